package oob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// PingpongMode selects one of rdma-core's ibv_*_pingpong examples. The
// zero value is invalid.
type PingpongMode int

// The four pingpong examples of rdma-core's libibverbs/examples.
const (
	PingpongRC  PingpongMode = iota + 1 // ibv_rc_pingpong (rc_pingpong.c)
	PingpongUC                          // ibv_uc_pingpong (uc_pingpong.c)
	PingpongUD                          // ibv_ud_pingpong (ud_pingpong.c)
	PingpongSRQ                         // ibv_srq_pingpong (srq_pingpong.c)
)

var pingpongModeNames = [...]string{PingpongRC: "rc", PingpongUC: "uc", PingpongUD: "ud", PingpongSRQ: "srq"}

// String returns the mode's short name ("rc", "uc", "ud", "srq").
func (m PingpongMode) String() string {
	if m.IsValid() {
		return pingpongModeNames[m]
	}
	return fmt.Sprintf("PingpongMode(%d)", int(m))
}

// IsValid reports whether m is one of the four modes.
func (m PingpongMode) IsValid() bool { return m >= PingpongRC && m <= PingpongSRQ }

// Tool returns the name of the rdma-core binary for m ("ibv_rc_pingpong").
func (m PingpongMode) Tool() string { return "ibv_" + m.String() + "_pingpong" }

// ParsePingpongMode parses "rc", "uc", "ud" or "srq".
func ParsePingpongMode(s string) (PingpongMode, error) {
	for m := PingpongRC; m <= PingpongSRQ; m++ {
		if pingpongModeNames[m] == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("oob: unknown pingpong mode %q (want rc, uc, ud or srq): %w", s, unix.EINVAL)
}

// Sizes and constants of the pingpong exchange.
const (
	// DefaultPort is the TCP port of every pingpong and perftest tool.
	DefaultPort = 18515
	// PingpongDestSize is sizeof "0000:000000:000000:" + 32 hex digits,
	// NUL included: every pingpong address message is exactly this long.
	PingpongDestSize = 52
	// DoneSize is sizeof "done": the closing message, NUL included.
	DoneSize = 5
	// SRQMaxQP is MAX_QP of srq_pingpong.c: the number of address messages
	// ibv_srq_pingpong sends each way whatever -q is (unused slots are
	// zero addresses), and one more than the largest -q it accepts.
	SRQMaxQP = 256
)

// doneMsg is the closing message, "done" and its NUL.
var doneMsg = []byte("done\x00")

// PingpongDest is struct pingpong_dest of the pingpong examples: the
// address of one QP as the peer needs it to connect. GID is in network
// byte order (ibv_gid.raw); an all-zero interface ID (bytes 8-15) means
// "no GRH" to the tools (pp_connect_ctx only sets is_global when
// gid.global.interface_id is nonzero).
type PingpongDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID [16]byte
}

// GIDToWire returns the 32 hex digits gid_to_wire_gid (pingpong.c) sends:
// each 32-bit word of the raw GID read in host (little-endian) order and
// printed with "%08x" after htonl, which on every host is the raw bytes in
// order. (The "byte-swapped words" in the C code cancel out: on the wire
// the GID is its 16 raw bytes as lower-case hex.)
func GIDToWire(gid [16]byte) string {
	var b [32]byte
	for i := 0; i < 4; i++ {
		v := binary.BigEndian.Uint32(gid[4*i:])
		copy(b[8*i:], cHex(uint64(v), 8))
	}
	return string(b[:])
}

// WireToGID parses the 32 hex digits of wire_gid_to_gid (pingpong.c):
// four 8-digit words, each stored in network order.
func WireToGID(s string) ([16]byte, error) {
	var gid [16]byte
	if len(s) != 32 {
		return gid, fmt.Errorf("oob: wire GID %q: want 32 hex digits: %w", s, unix.EINVAL)
	}
	for i := 0; i < 4; i++ {
		v, ok := parseHexField(s[8*i : 8*i+8])
		if !ok {
			return gid, fmt.Errorf("oob: wire GID %q: not hex: %w", s, unix.EINVAL)
		}
		binary.BigEndian.PutUint32(gid[4*i:], uint32(v))
	}
	return gid, nil
}

// hexField is one "%0<width>x" field of an address message.
type hexField struct {
	v     uint64
	width int
}

// appendHexFields appends each field as "%0<width>x:" (every field
// followed by its ':' separator).
func appendHexFields(b []byte, fields ...hexField) []byte {
	for _, f := range fields {
		b = append(b, cHex(f.v, f.width)...)
		b = append(b, ':')
	}
	return b
}

// parseHexField parses a fixed-width field of hex digits (either case).
func parseHexField(s string) (uint64, bool) {
	if s == "" || len(s) > 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// Marshal returns the 52-byte message the pingpong tools send for d:
// sprintf("%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid) and its NUL. QPN
// and PSN wider than 24 bits would overflow the C buffer and are EINVAL.
func (d PingpongDest) Marshal() ([]byte, error) {
	return d.AppendMarshal(make([]byte, 0, PingpongDestSize))
}

// AppendMarshal appends the 52-byte message for d to b.
func (d PingpongDest) AppendMarshal(b []byte) ([]byte, error) {
	if d.QPN > ib.QPNMask || d.PSN > ib.PSNMask {
		return b, fmt.Errorf("oob: pingpong dest QPN %#x PSN %#x: wider than 24 bits: %w", d.QPN, d.PSN, unix.EINVAL)
	}
	b = appendHexFields(b, hexField{uint64(d.LID), 4}, hexField{uint64(d.QPN), 6}, hexField{uint64(d.PSN), 6})
	b = append(b, GIDToWire(d.GID)...)
	return append(b, 0), nil
}

// ParsePingpongDest parses a 52-byte pingpong address message. It accepts
// exactly what the tools' sprintf produces (fixed-width lower- or
// upper-case hex, ':' separators, a NUL in the last byte) and returns
// EPROTO for anything else; it never panics.
func ParsePingpongDest(b []byte) (PingpongDest, error) {
	var d PingpongDest
	if len(b) != PingpongDestSize {
		return d, fmt.Errorf("oob: pingpong dest: %d bytes, want %d: %w", len(b), PingpongDestSize, unix.EPROTO)
	}
	if b[51] != 0 || b[4] != ':' || b[11] != ':' || b[18] != ':' {
		return d, fmt.Errorf("oob: pingpong dest %q: not LLLL:QQQQQQ:PPPPPP:GID: %w", printable(b), unix.EPROTO)
	}
	lid, ok1 := parseHexField(string(b[0:4]))
	qpn, ok2 := parseHexField(string(b[5:11]))
	psn, ok3 := parseHexField(string(b[12:18]))
	gid, err := WireToGID(string(b[19:51]))
	if !ok1 || !ok2 || !ok3 || err != nil {
		return d, fmt.Errorf("oob: pingpong dest %q: bad hex field: %w", printable(b), unix.EPROTO)
	}
	d.LID, d.QPN, d.PSN, d.GID = uint16(lid), uint32(qpn), uint32(psn), gid
	return d, nil
}

// printable trims a C string at its NUL for error messages.
func printable(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) > 120 {
		b = b[:120]
	}
	return string(b)
}

// PingpongMessages returns how many address messages each side sends in
// mode m: one, or SRQMaxQP for srq whatever the number of QPs.
func PingpongMessages(m PingpongMode) int {
	if m == PingpongSRQ {
		return SRQMaxQP
	}
	return 1
}

// checkPingpongLocal validates the local addresses for mode m.
func checkPingpongLocal(m PingpongMode, local []PingpongDest) error {
	if !m.IsValid() {
		return fmt.Errorf("oob: pingpong exchange: invalid mode %d: %w", int(m), unix.EINVAL)
	}
	if m == PingpongSRQ {
		if len(local) < 1 || len(local) >= SRQMaxQP {
			return fmt.Errorf("oob: %s exchange: %d QPs, want 1..%d: %w", m.Tool(), len(local), SRQMaxQP-1, unix.EINVAL)
		}
		return nil
	}
	if len(local) != 1 {
		return fmt.Errorf("oob: %s exchange: %d addresses, want 1: %w", m.Tool(), len(local), unix.EINVAL)
	}
	return nil
}

// marshalPingpongAll returns the messages one side sends: one per QP and,
// for srq, zero addresses up to SRQMaxQP (srq_pingpong.c memsets my_dest
// and always loops to MAX_QP).
func marshalPingpongAll(m PingpongMode, local []PingpongDest) ([][]byte, error) {
	n := PingpongMessages(m)
	msgs := make([][]byte, n)
	for i := 0; i < n; i++ {
		var d PingpongDest
		if i < len(local) {
			d = local[i]
		}
		b, err := d.Marshal()
		if err != nil {
			return nil, err
		}
		msgs[i] = b
	}
	return msgs, nil
}

// readPingpongAll reads the peer's messages and returns the first want.
func readPingpongAll(r io.Reader, m PingpongMode, want int) ([]PingpongDest, error) {
	n := PingpongMessages(m)
	out := make([]PingpongDest, 0, want)
	buf := make([]byte, PingpongDestSize)
	for i := 0; i < n; i++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("oob: %s: read remote address [%d]: %w", m.Tool(), i, err)
		}
		d, err := ParsePingpongDest(buf)
		if err != nil {
			return nil, fmt.Errorf("oob: %s: remote address [%d]: %w", m.Tool(), i, err)
		}
		if i < want {
			out = append(out, d)
		}
	}
	return out, nil
}

func writeAll(w io.Writer, msgs [][]byte, what string) error {
	for i, b := range msgs {
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("oob: write %s [%d]: %w", what, i, err)
		}
	}
	return nil
}

// PingpongClientExchange runs the client side of the pingpong address
// exchange on a connected stream, as pp_client_exch_dest does: send the
// local address message(s), read the server's, then send "done". It
// returns the server's addresses, as many as local has (for srq the
// trailing zero slots are read and dropped). Each message is written with
// one Write, since the C peers read each with a single read(2).
func PingpongClientExchange(rw io.ReadWriter, m PingpongMode, local []PingpongDest) ([]PingpongDest, error) {
	if err := checkPingpongLocal(m, local); err != nil {
		return nil, err
	}
	msgs, err := marshalPingpongAll(m, local)
	if err != nil {
		return nil, err
	}
	if err := writeAll(rw, msgs, m.Tool()+" local address"); err != nil {
		return nil, err
	}
	remote, err := readPingpongAll(rw, m, len(local))
	if err != nil {
		return nil, err
	}
	if _, err := rw.Write(doneMsg); err != nil {
		return nil, fmt.Errorf("oob: %s: write done: %w", m.Tool(), err)
	}
	return remote, nil
}

// PingpongServerExchange runs the server side on an accepted stream, as
// pp_server_exch_dest does: read the client's address message(s), call
// connect (the tools move their QPs to RTR/RTS here, before replying, so
// the client's first send finds a ready receiver), send the local
// address(es), then read the client's 5-byte "done". connect may be nil.
// If connect fails the server sends nothing, like the tools (which close
// the socket), and its error is returned.
func PingpongServerExchange(rw io.ReadWriter, m PingpongMode, local []PingpongDest, connect func(remote []PingpongDest) error) ([]PingpongDest, error) {
	if err := checkPingpongLocal(m, local); err != nil {
		return nil, err
	}
	msgs, err := marshalPingpongAll(m, local)
	if err != nil {
		return nil, err
	}
	remote, err := readPingpongAll(rw, m, len(local))
	if err != nil {
		return nil, err
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return nil, fmt.Errorf("oob: %s: connect to remote QP: %w", m.Tool(), err)
		}
	}
	if err := writeAll(rw, msgs, m.Tool()+" local address"); err != nil {
		return nil, err
	}
	if err := readDone(rw); err != nil {
		return nil, fmt.Errorf("oob: %s: %w", m.Tool(), err)
	}
	return remote, nil
}

// readDone reads the 5-byte "done" message.
func readDone(r io.Reader) error {
	var b [DoneSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("read done: %w", io.ErrUnexpectedEOF)
		}
		return fmt.Errorf("read done: %w", err)
	}
	if !bytes.Equal(b[:], doneMsg) {
		return fmt.Errorf("read done: got %q: %w", b[:], unix.EPROTO)
	}
	return nil
}
