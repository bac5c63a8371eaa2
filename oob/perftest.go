package oob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// Sizes and constants of perftest's out-of-band exchange (perftest
// 4.5-0.17, src/perftest_communication.c, "ethernet" exchange: no -R/-z).
const (
	// PerftestVersion is the version string Debian 12's perftest
	// 4.5-0.17 exchanges (ib_write_bw -V prints "Version: 6.06").
	PerftestVersion = "6.06"
	// PerftestVersionSize is sizeof user_param->version: the version
	// message, NUL padded.
	PerftestVersionSize = 16
	// PerftestDestSize is KEY_MSG_SIZE: an address message without GID
	// ("%04x:%04x:%06x:%06x:%08x:%016llx:%08x" and its NUL), sent when
	// the GID index is -1 (InfiniBand without -x).
	PerftestDestSize = 59
	// PerftestDestGIDSize is KEY_MSG_SIZE_GID: an address message with the
	// 16 GID bytes, each "%02x:", between the virtual address and the
	// SRQ number, and a trailing ':' before the NUL. RoCE always uses it.
	PerftestDestGIDSize = 108
	// PerftestMTUSize is the MTU message length for peers of version 5.31
	// and later: sprintf("%d", mtu enum) in a 2-byte exchange ("3\0").
	PerftestMTUSize = 2
)

// PerftestRole says which side of the exchange a PerftestConn plays: in
// every ctx_xchg_data the client writes first and then reads, the server
// reads first and then writes. The zero value is invalid.
type PerftestRole int

// Roles.
const (
	PerftestClient PerftestRole = iota + 1 // the side given a server name
	PerftestServer                         // the listening side
)

// String returns "client" or "server".
func (r PerftestRole) String() string {
	switch r {
	case PerftestClient:
		return "client"
	case PerftestServer:
		return "server"
	}
	return fmt.Sprintf("PerftestRole(%d)", int(r))
}

// IsValid reports whether r is PerftestClient or PerftestServer.
func (r PerftestRole) IsValid() bool { return r == PerftestClient || r == PerftestServer }

// PerftestDest is perftest's struct pingpong_dest as the ethernet
// exchange carries it (ethernet_write_keys / ethernet_read_keys). GID is
// in network byte order; SRQN is only meaningful for XRC and DC.
type PerftestDest struct {
	LID      uint16
	OutReads uint16 // outstanding RDMA reads/atomics ("%04x")
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// Marshal returns the address message perftest sends for d: the 108-byte
// KEY_PRINT_FMT_GID form if withGID, else the 59-byte KEY_PRINT_FMT form,
// NUL included. A QPN or PSN wider than 24 bits is EINVAL.
func (d PerftestDest) Marshal(withGID bool) ([]byte, error) {
	if d.QPN > ib.QPNMask || d.PSN > ib.PSNMask {
		return nil, fmt.Errorf("oob: perftest dest QPN %#x PSN %#x: wider than 24 bits: %w", d.QPN, d.PSN, unix.EINVAL)
	}
	n := PerftestDestSize
	if withGID {
		n = PerftestDestGIDSize
	}
	b := appendHexFields(make([]byte, 0, n), hexField{uint64(d.LID), 4}, hexField{uint64(d.OutReads), 4},
		hexField{uint64(d.QPN), 6}, hexField{uint64(d.PSN), 6}, hexField{uint64(d.RKey), 8}, hexField{d.VAddr, 16})
	if withGID {
		for _, g := range d.GID {
			b = appendHexFields(b, hexField{uint64(g), 2})
		}
	}
	b = append(b, cHex(uint64(d.SRQN), 8)...)
	if withGID {
		b = append(b, ':')
	}
	return append(b, 0), nil
}

// perftestField is one fixed-width hex field of an address message.
type perftestField struct{ off, width int }

var perftestHead = [...]perftestField{{0, 4}, {5, 4}, {10, 6}, {17, 6}, {24, 8}, {33, 16}}

// ParsePerftestDest parses an address message. The length chooses the
// form: PerftestDestSize bytes is the plain form, PerftestDestGIDSize
// the GID form (withGID reports which). It accepts exactly what perftest's
// sprintf produces and returns EPROTO for anything else; it never panics.
func ParsePerftestDest(b []byte) (d PerftestDest, withGID bool, err error) {
	switch len(b) {
	case PerftestDestSize:
	case PerftestDestGIDSize:
		withGID = true
	default:
		return d, false, fmt.Errorf("oob: perftest dest: %d bytes, want %d or %d: %w", len(b), PerftestDestSize, PerftestDestGIDSize, unix.EPROTO)
	}
	bad := func(what string) (PerftestDest, bool, error) {
		return PerftestDest{}, false, fmt.Errorf("oob: perftest dest %q: %s: %w", printable(b), what, unix.EPROTO)
	}
	if b[len(b)-1] != 0 {
		return bad("no NUL at the end")
	}
	var v [6]uint64
	for i, f := range perftestHead {
		if b[f.off+f.width] != ':' {
			return bad("missing ':'")
		}
		x, ok := parseHexField(string(b[f.off : f.off+f.width]))
		if !ok {
			return bad("bad hex field")
		}
		v[i] = x
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	off := 50
	if withGID {
		for i := range d.GID {
			if b[off+2] != ':' {
				return bad("missing ':' in GID")
			}
			x, ok := parseHexField(string(b[off : off+2]))
			if !ok {
				return bad("bad GID byte")
			}
			d.GID[i] = byte(x)
			off += 3
		}
		if b[off+8] != ':' {
			return bad("missing ':' after SRQN")
		}
	}
	x, ok := parseHexField(string(b[off : off+8]))
	if !ok {
		return bad("bad SRQN")
	}
	d.SRQN = uint32(x)
	return d, withGID, nil
}

// BWReport is struct bw_report_data as xchg_bw_reports sends it: each
// field in its own exchange, integers and doubles big-endian. The
// per-port fields go only with --report-per-port.
type BWReport struct {
	Size                      uint64
	Iters                     uint64 // 8 bytes to peers of 5.33 and later, else 4
	BWPeak, BWAvg, MsgRateAvg float64
	BWAvgP1, MsgRateAvgP1     float64
	BWAvgP2, MsgRateAvgP2     float64
}

// PerftestConn is one side of perftest's TCP exchange. Its methods are
// the exchange primitives in the order perftest uses them; PerftestConnect
// and the Finish functions string them together as the BW tests do.
type PerftestConn struct {
	rw   io.ReadWriter
	role PerftestRole
	// RemoteVersion is the peer's version string once ExchangeVersions
	// has run ("" before, or with --dont_xchg_versions).
	RemoteVersion string
}

// NewPerftestConn wraps a connected stream.
func NewPerftestConn(rw io.ReadWriter, role PerftestRole) (*PerftestConn, error) {
	if !role.IsValid() {
		return nil, fmt.Errorf("oob: perftest conn: invalid role %d: %w", int(role), unix.EINVAL)
	}
	return &PerftestConn{rw: rw, role: role}, nil
}

// Role returns the side c plays.
func (c *PerftestConn) Role() PerftestRole { return c.role }

// Exchange is ctx_xchg_data_ethernet: the client writes my and then reads
// len(my) bytes, the server reads len(my) bytes and then writes my. Both
// sides must pass the same length. my goes out in one Write (the C peer
// reads each message with a single read(2)).
func (c *PerftestConn) Exchange(my []byte) ([]byte, error) {
	rem := make([]byte, len(my))
	if c.role == PerftestClient {
		if _, err := c.rw.Write(my); err != nil {
			return nil, fmt.Errorf("oob: perftest %s: write %d bytes: %w", c.role, len(my), err)
		}
	}
	if _, err := io.ReadFull(c.rw, rem); err != nil {
		return nil, fmt.Errorf("oob: perftest %s: read %d bytes: %w", c.role, len(my), err)
	}
	if c.role == PerftestServer {
		if _, err := c.rw.Write(my); err != nil {
			return nil, fmt.Errorf("oob: perftest %s: write %d bytes: %w", c.role, len(my), err)
		}
	}
	return rem, nil
}

// ExchangeVersions is exchange_versions: the 16-byte, NUL-padded version
// strings. It records and returns the peer's.
func (c *PerftestConn) ExchangeVersions(local string) (string, error) {
	if len(local) >= PerftestVersionSize {
		return "", fmt.Errorf("oob: perftest version %q: longer than %d: %w", local, PerftestVersionSize-1, unix.EINVAL)
	}
	var my [PerftestVersionSize]byte
	copy(my[:], local)
	rem, err := c.Exchange(my[:])
	if err != nil {
		return "", fmt.Errorf("oob: exchange versions: %w", err)
	}
	c.RemoteVersion = printable(rem)
	return c.RemoteVersion, nil
}

// remoteAtLeast compares the peer's version like atof(rem_version) >= v.
func (c *PerftestConn) remoteAtLeast(v float64) bool { return cAtof(c.RemoteVersion) >= v }

// ExchangeSysData is check_sys_data: the cycle buffer (page size) and the
// cache line size, each a big-endian int32, when the peer is 5.32 or
// later. It returns the larger of each pair, which both sides then use,
// and whether anything was exchanged.
func (c *PerftestConn) ExchangeSysData(cycleBuffer, cacheLineSize int32) (int32, int32, bool, error) {
	if !c.remoteAtLeast(5.32) {
		return cycleBuffer, cacheLineSize, false, nil
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(cycleBuffer))
	rem, err := c.Exchange(b[:])
	if err != nil {
		return 0, 0, false, fmt.Errorf("oob: exchange page size: %w", err)
	}
	remCycle := int32(binary.BigEndian.Uint32(rem))
	binary.BigEndian.PutUint32(b[:], uint32(cacheLineSize))
	if rem, err = c.Exchange(b[:]); err != nil {
		return 0, 0, false, fmt.Errorf("oob: exchange cache line size: %w", err)
	}
	remCache := int32(binary.BigEndian.Uint32(rem))
	return max(cycleBuffer, remCycle), max(cacheLineSize, remCache), true, nil
}

// ExchangeMTU is check_mtu's exchange: the local path MTU code as decimal
// text ("3\0" for IB_MTU_1024) in 2 bytes for peers of 5.31 and later, 4
// bytes (the same text, NUL padded) for 5.1 up to 5.31, nothing for older
// peers. It returns the MTU both sides use: the peer's if it is a valid
// code smaller than the local one, else the local one.
func (c *PerftestConn) ExchangeMTU(local ib.MTU) (ib.MTU, error) {
	if !c.remoteAtLeast(5.1) {
		return local, nil
	}
	size := 4
	if c.remoteAtLeast(5.31) {
		size = PerftestMTUSize
	}
	txt := fmt.Sprintf("%d", int32(local))
	if len(txt) >= size {
		return 0, fmt.Errorf("oob: exchange MTU: code %d does not fit %d bytes: %w", local, size, unix.EINVAL)
	}
	my := make([]byte, size)
	copy(my, txt)
	rem, err := c.Exchange(my)
	if err != nil {
		return 0, fmt.Errorf("oob: exchange MTU: %w", err)
	}
	r := ib.MTU(cAtoi(printable(rem)))
	if r.IsValid() && local > r {
		return r, nil
	}
	return local, nil
}

// HandShake is ctx_hand_shake with the ethernet keys: the client writes
// its address message and reads the server's, the server the other way
// round. withGID must match on both sides (it follows the GID index).
func (c *PerftestConn) HandShake(my PerftestDest, withGID bool) (PerftestDest, error) {
	b, err := my.Marshal(withGID)
	if err != nil {
		return PerftestDest{}, err
	}
	rem, err := c.Exchange(b)
	if err != nil {
		return PerftestDest{}, fmt.Errorf("oob: hand shake: %w", err)
	}
	d, _, err := ParsePerftestDest(rem)
	if err != nil {
		return PerftestDest{}, fmt.Errorf("oob: hand shake: %w", err)
	}
	return d, nil
}

// ExchangeBWReports is xchg_bw_reports: size, iters, peak, average and
// message rate (then the per-port four if perPort), each in its own
// exchange, big-endian; iters is 8 bytes to peers of 5.33 and later.
func (c *PerftestConn) ExchangeBWReports(my BWReport, perPort bool) (BWReport, error) {
	var rem BWReport
	u64 := func(v uint64, n int) ([]byte, error) {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		r, err := c.Exchange(b[8-n:])
		if err != nil {
			return nil, fmt.Errorf("oob: exchange BW reports: %w", err)
		}
		return r, nil
	}
	r, err := u64(my.Size, 8)
	if err != nil {
		return rem, err
	}
	rem.Size = binary.BigEndian.Uint64(r)
	if c.remoteAtLeast(5.33) {
		if r, err = u64(my.Iters, 8); err != nil {
			return rem, err
		}
		rem.Iters = binary.BigEndian.Uint64(r)
	} else {
		if r, err = u64(my.Iters, 4); err != nil {
			return rem, err
		}
		rem.Iters = uint64(binary.BigEndian.Uint32(r))
	}
	fields := []struct {
		my  float64
		rem *float64
	}{{my.BWPeak, &rem.BWPeak}, {my.BWAvg, &rem.BWAvg}, {my.MsgRateAvg, &rem.MsgRateAvg}}
	if perPort {
		fields = append(fields, []struct {
			my  float64
			rem *float64
		}{{my.BWAvgP1, &rem.BWAvgP1}, {my.MsgRateAvgP1, &rem.MsgRateAvgP1}, {my.BWAvgP2, &rem.BWAvgP2}, {my.MsgRateAvgP2, &rem.MsgRateAvgP2}}...)
	}
	for _, f := range fields {
		if r, err = u64(math.Float64bits(f.my), 8); err != nil {
			return rem, err
		}
		*f.rem = math.Float64frombits(binary.BigEndian.Uint64(r))
	}
	return rem, nil
}

// Close is ctx_close_connection: one more hand shake, then each side
// writes "done" and reads the peer's (both write first, so on the wire
// either may come first). The write runs beside the read so that an
// unbuffered stream (net.Pipe) cannot deadlock. perftest 25.01 (Debian
// 13) writes no "done": its close is the hand shake and close(2), so the
// peer's end of the stream (EOF, or a reset because our "done" reached a
// closed socket) in place of its "done" also ends the exchange cleanly.
// Close does not close the stream.
func (c *PerftestConn) Close(my PerftestDest, withGID bool) error {
	if _, err := c.HandShake(my, withGID); err != nil {
		return fmt.Errorf("oob: close connection: %w", err)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.rw.Write(doneMsg)
		werr <- err
	}()
	rerr := readDone(c.rw)
	err := <-werr
	if peerClosed(rerr) {
		rerr = nil
		if peerClosed(err) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("oob: close connection: write done: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("oob: close connection: %w", rerr)
	}
	return nil
}

// peerClosed reports whether err says the peer closed its end of the
// stream: end of file, a reset or a broken pipe.
func peerClosed(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
}

// PerftestShake is one group of ctx_hand_shake calls in a perftest tool's
// main: every hand shake is the same 108-byte exchange, only how many
// there are, and where, differs between the tools.
type PerftestShake int

// Hand shake groups.
const (
	// ShakeFirst is one hand shake with the first QP's address
	// (ctx_hand_shake(&user_comm, my_dest, rem_dest) or &my_dest[0]).
	ShakeFirst PerftestShake = iota + 1
	// ShakeEachQP is one hand shake per QP (the loops over num_of_qps).
	ShakeEachQP
)

// PerftestFlow is the out-of-band sequence of one perftest tool around its
// traffic, after the version, sys data and MTU exchanges (the ethernet
// exchange, no -R/-z, no -a). PerftestFlowOf gives the unidirectional
// flows, PerftestFlowFor those of -b and -D too.
type PerftestFlow struct {
	// BeforeConnect are the hand shakes before ctx_connect; the last
	// ShakeEachQP of them carries the addresses the QPs connect to.
	BeforeConnect []PerftestShake
	// AfterConnect are the hand shakes after ctx_connect and before the
	// traffic (the syncs, the loop that prints the remote addresses, and
	// for the send tests the sync after the receives are posted).
	AfterConnect []PerftestShake
	// EndSync is a hand shake after the traffic (the unidirectional BW
	// server of write, read and atomic waits in it for the client; not
	// with -b, where both sides run the traffic).
	EndSync bool
	// Reports is xchg_bw_reports after EndSync (write, read and atomic
	// BW; send_bw only with -b in iterations mode).
	Reports bool
	// Close is ctx_close_connection at the end (a hand shake, then
	// "done" each way); write_lat has none and just closes the socket.
	Close bool
}

// perftestFlows is each tool's flow as Debian 12's perftest 4.5-0.17 main()
// runs it (src/write_bw.c, read_bw.c, atomic_bw.c, send_bw.c, write_lat.c,
// read_lat.c, atomic_lat.c, send_lat.c with perftest_communication.c):
//
//   - write_bw, read_bw, atomic_bw: one hand shake per QP, ctx_connect, one
//     per QP (printing the remote addresses), the "additional handshake
//     required after moving qp to RTR" with QP 0; after the
//     traffic a hand shake, the BW reports, ctx_close_connection (the
//     write_bw, read_bw and atomic_bw captures in testdata confirm it).
//   - send_bw: one per QP, ctx_connect, a sync with QP 0, one per QP
//     (printing), then one more sync with QP 0 after the receives
//     are posted ("so the client won't send before the server posted its
//     receives"); after the traffic no report (the server measures itself
//     in run_iter_bw_server; xchg_bw_reports only runs duplex) and straight
//     ctx_close_connection.
//   - write_lat, read_lat, atomic_lat: a hand shake with QP 0 and one per
//     QP, ctx_connect, one per QP and the "additional handshake required
//     after moving qp to RTR" with QP 0. read_lat and atomic_lat end with
//     ctx_close_connection (their server goes there right away and waits
//     for the client's); write_lat ends without one.
//   - send_lat: as send_bw up to the traffic (per QP, connect, QP 0, per
//     QP, the sync after the receives), then ctx_close_connection.
var perftestFlows = map[PerftestTest]PerftestFlow{
	PerftestWriteBW:   bwFlow,
	PerftestReadBW:    bwFlow,
	PerftestAtomicBW:  bwFlow,
	PerftestSendBW:    {BeforeConnect: []PerftestShake{ShakeEachQP}, AfterConnect: []PerftestShake{ShakeFirst, ShakeEachQP, ShakeFirst}, Close: true},
	PerftestWriteLat:  {BeforeConnect: latBefore, AfterConnect: latAfter},
	PerftestReadLat:   {BeforeConnect: latBefore, AfterConnect: latAfter, Close: true},
	PerftestAtomicLat: {BeforeConnect: latBefore, AfterConnect: latAfter, Close: true},
	PerftestSendLat:   {BeforeConnect: []PerftestShake{ShakeEachQP}, AfterConnect: []PerftestShake{ShakeFirst, ShakeEachQP, ShakeFirst}, Close: true},
}

var (
	bwFlow = PerftestFlow{BeforeConnect: []PerftestShake{ShakeEachQP}, AfterConnect: []PerftestShake{ShakeEachQP, ShakeFirst},
		EndSync: true, Reports: true, Close: true}
	latBefore = []PerftestShake{ShakeFirst, ShakeEachQP}
	latAfter  = []PerftestShake{ShakeEachQP, ShakeFirst}
)

// PerftestFlowOf returns the out-of-band sequence of test t,
// unidirectional (no -b); an invalid t gets write_bw's. Duration mode (-D)
// has the same flows.
func PerftestFlowOf(t PerftestTest) PerftestFlow {
	if f, ok := perftestFlows[t]; ok {
		return f
	}
	return bwFlow
}

// PerftestFlowFor returns the out-of-band sequence of p.Test with p's -b
// (Duplex) and -D (Duration), as the mains of perftest 4.5-0.17 run them
// and as observed between two kernel-rxe hosts:
//
//   - without -b, -D changes nothing: every tool's flow is PerftestFlowOf's
//     (the timer is local to each side; no exchange marks its end);
//   - write_bw, read_bw, atomic_bw with -b (with or without -D): both sides
//     take the client's path, so after the syncs one more hand shake with
//     QP 0 right before run_iter_bw, and after the traffic no end sync:
//     the report exchange (each side prints its own size and iterations
//     with the rates of both summed, BWReport.Plus), then
//     ctx_close_connection;
//   - send_bw with -b: its usual hand shakes (the sync after the receives
//     already precedes the traffic on both sides), then the report
//     exchange in iterations mode only — with -D each side prints its own
//     row (it counts its sends and receives) — then ctx_close_connection.
//
// Duplex on a latency test (which the tools refuse) is ignored.
func PerftestFlowFor(p PerftestParams) PerftestFlow {
	f := PerftestFlowOf(p.Test)
	if !p.Duplex || (p.Test.IsValid() && !p.Test.IsBW()) {
		return f
	}
	f.EndSync = false
	if p.Test == PerftestSendBW {
		f.Reports = !p.Duration
		return f
	}
	f.AfterConnect = append(append([]PerftestShake(nil), f.AfterConnect...), ShakeFirst)
	f.Reports = true
	return f
}

// PerftestParams are the inputs of the setup exchange.
type PerftestParams struct {
	Test             PerftestTest // the tool whose sequence to run; 0 means write_bw (as read_bw and atomic_bw)
	Version          string       // local version string; "" means PerftestVersion
	DontXchgVersions bool         // --dont_xchg_versions: skip versions, sys data and MTU
	CycleBuffer      int32        // page size (sysconf(_SC_PAGESIZE)); 0 means 4096
	CacheLineSize    int32        // cache line size; 0 means 64
	MTU              ib.MTU       // local path MTU code (the port's, or -m)
	WithGID          bool         // GID index is not -1 (always on RoCE)
	ReportPerPort    bool         // --report-per-port
	Duplex           bool         // -b --bidirectional (BW tests)
	Duration         bool         // -D --duration given (duration mode)
}

// PerftestSetup is what the setup exchange settled.
type PerftestSetup struct {
	RemoteVersion string
	CycleBuffer   int32
	CacheLineSize int32
	MTU           ib.MTU
	Remote        []PerftestDest // the peer's address for each local QP
}

// shakes runs a group list of hand shakes; remote, if not nil, receives
// the peer's addresses (ShakeFirst fills remote[0]).
func (c *PerftestConn) shakes(groups []PerftestShake, p PerftestParams, local, remote []PerftestDest, what string) error {
	for gi, g := range groups {
		n := 1
		if g == ShakeEachQP {
			n = len(local)
		}
		for i := range n {
			r, err := c.HandShake(local[i], p.WithGID)
			if err != nil {
				return fmt.Errorf("oob: perftest %s: hand shake %d.%d: %w", what, gi+1, i+1, err)
			}
			if remote != nil {
				remote[i] = r
			}
		}
	}
	return nil
}

// PerftestConnect runs everything of a perftest test before the traffic,
// in the order of PerftestFlowFor(p):
//
//  1. versions (16 bytes each way), sys data (4 + 4), MTU (2);
//  2. the flow's hand shakes before ctx_connect;
//  3. connect(setup) — the caller moves its QPs to RTR and RTS;
//  4. the flow's hand shakes after it, after which both sides start the
//     traffic (send tests: with their receives posted before).
//
// connect may be nil. An error leaves the stream unusable.
func PerftestConnect(c *PerftestConn, p PerftestParams, local []PerftestDest, connect func(s *PerftestSetup) error) (*PerftestSetup, error) {
	if len(local) == 0 {
		return nil, fmt.Errorf("oob: perftest connect: no local QP: %w", unix.EINVAL)
	}
	flow := PerftestFlowFor(p)
	s := &PerftestSetup{CycleBuffer: p.CycleBuffer, CacheLineSize: p.CacheLineSize, MTU: p.MTU}
	if s.CycleBuffer == 0 {
		s.CycleBuffer = 4096
	}
	if s.CacheLineSize == 0 {
		s.CacheLineSize = 64
	}
	if !p.DontXchgVersions {
		v := p.Version
		if v == "" {
			v = PerftestVersion
		}
		rv, err := c.ExchangeVersions(v)
		if err != nil {
			return nil, err
		}
		s.RemoteVersion = rv
		if s.CycleBuffer, s.CacheLineSize, _, err = c.ExchangeSysData(s.CycleBuffer, s.CacheLineSize); err != nil {
			return nil, err
		}
		if s.MTU, err = c.ExchangeMTU(p.MTU); err != nil {
			return nil, err
		}
	}
	s.Remote = make([]PerftestDest, len(local))
	if err := c.shakes(flow.BeforeConnect, p, local, s.Remote, "address exchange"); err != nil {
		return nil, err
	}
	if connect != nil {
		if err := connect(s); err != nil {
			return nil, fmt.Errorf("oob: perftest connect: %w", err)
		}
	}
	if err := c.shakes(flow.AfterConnect, p, local, nil, "sync after connect"); err != nil {
		return nil, err
	}
	return s, nil
}

// PerftestFinish runs everything of a test after the traffic, in the order
// of PerftestFlowFor(p): for write_bw, read_bw and atomic_bw a hand
// shake (the server waits here for the client to finish; not with -b),
// the report exchange and ctx_close_connection; for send_bw, send_lat,
// read_lat and atomic_lat ctx_close_connection only (send_bw -b in
// iterations mode exchanges the reports first); for write_lat nothing.
// local is the first QP's address. The unidirectional BW client passes
// its measured report and gets the server's; the server passes anything
// (the real server sends its uninitialised struct: zeros are as good)
// and gets the client's, which it prints. With -b both sides pass their
// own report and get the peer's, and print my.Plus(rem). Without a report
// exchange the result is the zero BWReport.
func PerftestFinish(c *PerftestConn, p PerftestParams, local PerftestDest, my BWReport) (BWReport, error) {
	flow := PerftestFlowFor(p)
	var rem BWReport
	if flow.EndSync {
		if _, err := c.HandShake(local, p.WithGID); err != nil {
			return BWReport{}, fmt.Errorf("oob: perftest end sync: %w", err)
		}
	}
	if flow.Reports {
		var err error
		if rem, err = c.ExchangeBWReports(my, p.ReportPerPort); err != nil {
			return BWReport{}, err
		}
	}
	if flow.Close {
		if err := c.Close(local, p.WithGID); err != nil {
			return BWReport{}, err
		}
	}
	return rem, nil
}

// cAtof parses the leading decimal number of s like atof (0 if none).
func cAtof(s string) float64 {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	var f float64
	if _, err := fmt.Sscan(s[:i], &f); err != nil {
		return 0
	}
	return f
}

// cAtoi parses the leading decimal integer of s like strtol(s, NULL, 10).
func cAtoi(s string) int64 {
	s = string(bytes.TrimLeft([]byte(s), " \t\n"))
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	var v int64
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9' && v < 1<<40; i++ {
		v = v*10 + int64(s[i]-'0')
	}
	if neg {
		return -v
	}
	return v
}
