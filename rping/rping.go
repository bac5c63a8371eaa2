// Package rping is librdmacm's rping (rdma-core 44, librdmacm/examples/
// rping.c) over an emulated device: its command line, its ping protocol
// and its output, connected by package cma's Communication Manager as
// librdmacm connects the real rping through the kernel's rdma_cm (the
// same calls, events and QP transitions), so that either side can be the
// real rping on the kernel's rxe.
//
// The protocol is rping's: the client SENDs the address, rkey and length
// of its start buffer (16 bytes, big-endian), the server RDMA READs it,
// SENDs "go ahead", the client SENDs its RDMA buffer's, the server RDMA
// WRITEs the ping back (strlen + 1 bytes) and SENDs "go ahead"; -C pings
// (0: forever), then the client disconnects. -v prints "ping data: ..."
// (client) and "server ping data: ..." (server), -V makes the client
// compare what came back ("data mismatch!"), -d prints rping's debug
// lines that carry no pointers.
package rping

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/getopt"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Usage is rping's usage text, printed after an option error that calls
// for it (a *UsageError).
const Usage = `rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
	-c		client side
	-I		Source address to bind to for client.
	-s		server side.  To bind to any address with IPv6 use -a ::0
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size 	ping data size
	-C count	ping count times
	-a addr		address
	-p port		port
	-P		persistent server mode allowing multiple connections
	-q		use self-created, self-modified QP
`

// Options is rping's command line.
type Options struct {
	Server, Client bool
	Addr           netip.Addr // -a: the server's address (client); the family to listen on (server)
	Port           int        // -p (default DefaultPort; 0: the server picks one)
	Count          int        // -C: pings (0: forever)
	Size           int        // -S: ping data size (default 64)
	Verbose        bool       // -v
	Validate       bool       // -V
	Debug          bool       // -d
	Dev            string     // --dev: the device (softroce's addition; rping's -d is debug)

	echo []string // debug lines of the option parsing, in order
	out  *bufio.Writer
	errw io.Writer
}

// UsageError is an option error after which rping prints its usage.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// options is rping's getopt string "a:I:Pp:C:S:t:scvVdq" plus --dev NAME.
var options = []getopt.Option{
	{Short: 'a', HasArg: true, Key: "a", Arg: "addr"}, {Short: 'I', HasArg: true, Key: "I", Arg: "addr"},
	{Short: 'P', Key: "P"}, {Short: 'p', HasArg: true, Key: "p", Arg: "port"},
	{Short: 'C', HasArg: true, Key: "C", Arg: "count"}, {Short: 'S', HasArg: true, Key: "S", Arg: "size"},
	{Short: 't', HasArg: true, Key: "t", Arg: "tos"}, {Short: 's', Key: "s"}, {Short: 'c', Key: "c"},
	{Short: 'v', Key: "v"}, {Short: 'V', Key: "V"}, {Short: 'd', Key: "d"}, {Short: 'q', Key: "q"},
	{Long: "dev", HasArg: true, Key: "dev", Arg: "NAME"},
}

// Synopsis returns one bracketed entry per option rping takes, from the
// table ParseFlags parses with.
func Synopsis() []string { return getopt.Synopsis(options) }

// ParseFlags parses rping's arguments (without argv[0]) with rping's checks
// and messages: -S outside MinSize..MaxSize, a negative -C, a bad -a, no
// -s or -c, a client without -a. -I, -P, -q and -t are refused
// (EOPNOTSUPP). Operands are ignored, as rping ignores them. A
// *UsageError is one after which rping prints Usage.
func ParseFlags(args []string) (*Options, error) {
	o := &Options{Port: DefaultPort, Size: 64}
	opts, _, err := getopt.Parse("rping", options, args)
	if err != nil {
		return nil, &UsageError{strings.TrimSuffix(err.Error(), ": "+unix.EINVAL.Error())}
	}
	server := -1
	for _, op := range opts {
		arg := op.Arg
		switch op.Key {
		case "dev":
			o.Dev = arg
		case "a":
			ip, err := netip.ParseAddr(arg)
			if err != nil {
				return nil, fmt.Errorf("getaddrinfo failed (Name or service not known) - invalid hostname or IP address")
			}
			o.Addr = ip
		case "p":
			p, _ := strconv.Atoi(arg)
			o.Port = p & 0xffff
			o.echo = append(o.echo, fmt.Sprintf("port %d", p))
		case "C":
			n, _ := strconv.Atoi(arg)
			if n < 0 {
				return nil, fmt.Errorf("Invalid count %d", n)
			}
			o.Count = n
			o.echo = append(o.echo, fmt.Sprintf("count %d", n))
		case "S":
			n, _ := strconv.Atoi(arg)
			if n < MinSize || n > MaxSize {
				return nil, fmt.Errorf("Invalid size %d (valid range is %d to %d)", n, MinSize, MaxSize+1)
			}
			o.Size = n
			o.echo = append(o.echo, fmt.Sprintf("size %d", n))
		case "s":
			server = 1
			o.echo = append(o.echo, "server")
		case "c":
			server = 0
			o.echo = append(o.echo, "client")
		case "v":
			o.Verbose = true
			o.echo = append(o.echo, "verbose")
		case "V":
			o.Validate = true
			o.echo = append(o.echo, "validate data")
		case "d":
			o.Debug = true
		default: // I, P, q, t
			return nil, fmt.Errorf("softroce rping: -%s is not supported: %v", op.Key, unix.EOPNOTSUPP)
		}
	}
	if server == -1 {
		return nil, &UsageError{"rping: -s or -c required"}
	}
	o.Server, o.Client = server == 1, server == 0
	if o.Client && !o.Addr.IsValid() {
		return nil, &UsageError{"rping: the client needs -a addr"}
	}
	return o, nil
}

// Config is what a run of rping uses.
type Config struct {
	Dev *emu.Device
	// CM is Dev's Communication Manager. The client's rdma_resolve_addr
	// goes through it to Dev's Resolver; its failure is rping's
	// ADDR_ERROR.
	CM     *cma.CM
	Stdout io.Writer
	Stderr io.Writer
	// Ready, if set, is called once the server listens, with its port.
	Ready func(port int)
}

// ErrFailed is what Run returns when rping fails the way the tool does
// (exit status 255): the reason is already on Stderr in rping's words.
var ErrFailed = errors.New("rping failed")

// Run runs rping's server or client as o says. It returns nil when rping
// would exit 0, ErrFailed when it would exit 255 (having printed why), and
// any other error for a failure of the emulated device.
//
// The server binds to -a (0.0.0.0 or :: for all of the device's
// addresses), as rping does.
func Run(cfg Config, o *Options) error {
	w := bufio.NewWriter(cfg.Stdout)
	defer w.Flush()
	o.out, o.errw = w, cfg.Stderr
	o.echoOptions()
	if o.Server {
		return runServer(cfg, o)
	}
	return runClient(cfg, o)
}

// flush writes what o has buffered for stdout.
func (o *Options) flush() { o.out.Flush() }

// MinSize and MaxSize bound -S as rping does (RPING_MIN_BUFSIZE:
// room for "rdma-ping-%d: " and INT_MAX; RPING_BUFSIZE - 1).
const (
	MinSize = 26
	MaxSize = 64*1024 - 1
)

// DefaultPort is rping's default -p.
const DefaultPort = 7174

// rping's test states (enum test_state), printed in its errors.
const (
	stateConnected      = 5
	stateReadAdv        = 6
	stateReadComplete   = 7
	stateWriteAdv       = 8
	stateWriteComplete  = 9
	stateDisconnected   = 10
	stateError          = 11
	stateRouteResolved  = 4
	infoSize            = 16 // struct rping_rdma_info
	sqDepth             = 16
	firstChar, lastChar = 65, 122
)

// echoOptions prints the option lines rping's DEBUG_LOG prints while it
// parses (only those after -d, as getopt meets them; we print all of them
// when -d is given anywhere, close enough for a debug aid).
func (o *Options) echoOptions() {
	if !o.Debug {
		return
	}
	for _, l := range o.echo {
		o.debugf("%s\n", l)
	}
}

func (o *Options) debugf(format string, a ...any) {
	if o.Debug {
		fmt.Fprintf(o.out, format, a...)
	}
}

// errorf prints a line on stderr as rping's fprintf(stderr, ...) does,
// after flushing stdout so that the two streams interleave in order.
func (o *Options) errorf(format string, a ...any) {
	o.flush()
	fmt.Fprintf(o.errw, format, a...)
}

// session is rping's control block: the QP, its CQ and the buffers.
type session struct {
	o      *Options
	dev    *emu.Device
	pd     *emu.PD
	cq     *emu.CQ
	qp     *emu.QP
	notify chan struct{}
	recv   buffer   // struct rping_rdma_info, received
	send   buffer   // struct rping_rdma_info, sent
	rdma   buffer   // RDMA sink (server: READ target and WRITE source)
	start  buffer   // client: the ping data the server READs
	id     *cma.ID  // the connection's rdma_cm_id
	events *channel // its event channel
	remote struct {
		addr      uint64
		rkey, len uint32
	}
	flushed bool
}

type buffer struct {
	addr uint64
	b    []byte
	mr   *emu.MR
}

// newSession creates rping's QP for id (rping_setup_qp, rdma_create_qp:
// the QP starts in INIT) and its buffers, and posts the first receive.
func newSession(dev *emu.Device, o *Options, id *cma.ID, events *channel) (*session, error) {
	cb := &session{o: o, dev: dev, notify: make(chan struct{}, 1), id: id, events: events}
	var err error
	if cb.pd, err = dev.AllocPD(0); err != nil {
		return nil, err
	}
	if cb.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: sqDepth * 2, CompHandler: func(*emu.CQ) {
		select {
		case cb.notify <- struct{}{}:
		default:
		}
	}}); err != nil {
		return nil, err
	}
	if cb.qp, err = cb.pd.CreateQP(&emu.QPInitAttr{SendCQ: cb.cq, RecvCQ: cb.cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	rw := ib.AccessLocalWrite | ib.AccessRemoteRead | ib.AccessRemoteWrite
	bufs := []struct {
		b      *buffer
		n      int
		access ib.AccessFlags
	}{{&cb.recv, infoSize, ib.AccessLocalWrite}, {&cb.send, infoSize, 0}, {&cb.rdma, o.Size, rw}}
	if o.Client {
		bufs = append(bufs, struct {
			b      *buffer
			n      int
			access ib.AccessFlags
		}{&cb.start, o.Size, rw})
	}
	for _, b := range bufs {
		b.b.addr, b.b.b = dev.Memory().Alloc(b.n)
		b.b.b = b.b.b[:b.n]
		if b.b.mr, err = cb.pd.RegUserMR(b.b.addr, uint64(b.n), b.b.addr, b.access); err != nil {
			return nil, err
		}
	}
	o.debugf("allocated & registered buffers...\n")
	if err := cb.modify(nil, qpstate.StateInit); err != nil { // rdma_create_qp
		return nil, err
	}
	if err := cb.postRecv(); err != nil {
		return nil, err
	}
	o.debugf("cq_thread started.\n")
	return cb, nil
}

func (cb *session) postRecv() error {
	_, err := cb.qp.PostRecv([]emu.RecvWR{{SGList: []emu.SGE{{Addr: cb.recv.addr, Length: infoSize, LKey: cb.recv.mr.LKey()}}}})
	return err
}

func (cb *session) postSend(wr emu.SendWR) error {
	wr.SendFlags |= emu.SendSignaled
	if _, err := cb.qp.PostSend([]emu.SendWR{wr}); err != nil {
		cb.o.errorf("post send error %d\n", errnoOf(err))
		return err
	}
	return nil
}

// perror prints what rping's perror(what) prints for err: its errno's
// text as strerror words it (capitalized), or err itself without one.
func (o *Options) perror(what string, err error) {
	msg := err.Error()
	var e unix.Errno
	if errors.As(err, &e) {
		msg = e.Error()
		msg = strings.ToUpper(msg[:1]) + msg[1:]
	}
	o.errorf("%s: %s\n", what, msg)
}

func errnoOf(err error) int {
	var e unix.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return -1
}

// sendInfo SENDs the address, rkey and length of b (rping_format_send).
func (cb *session) sendInfo(b *buffer) error {
	binary.BigEndian.PutUint64(cb.send.b[0:], b.addr)
	binary.BigEndian.PutUint32(cb.send.b[8:], b.mr.RKey())
	binary.BigEndian.PutUint32(cb.send.b[12:], uint32(cb.o.Size))
	cb.o.debugf("RDMA addr %x rkey %x len %d\n", b.addr, b.mr.RKey(), cb.o.Size)
	return cb.sendGoAhead()
}

// sendGoAhead SENDs the send buffer as it is.
func (cb *session) sendGoAhead() error {
	return cb.postSend(emu.SendWR{Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: cb.send.addr, Length: infoSize, LKey: cb.send.mr.LKey()}}})
}

// wait runs rping's completion handler until a completion that moves
// the state (a receive, a READ or a WRITE) or the disconnection, and
// returns the new state.
func (cb *session) wait(state int) int {
	wc := make([]emu.WC, 1)
	for {
		if cb.cq.Poll(wc) == 0 {
			cb.cq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents)
			if cb.cq.Poll(wc) == 0 {
				select {
				case <-cb.notify:
				case <-cb.events.disconnected:
					if cb.cq.Poll(wc) == 0 {
						cb.o.errorf("%s DISCONNECT EVENT...\n", map[bool]string{true: "server", false: "client"}[cb.o.Server])
						return stateDisconnected
					}
				case <-time.After(30 * time.Second):
					cb.o.errorf("no completion in 30 s\n")
					return stateError
				}
				if cb.cq.Poll(wc) == 0 {
					continue
				}
			}
		}
		w := &wc[0]
		if w.Status != emu.WCSuccess {
			if w.Status == emu.WCWRFlushErr {
				cb.flushed = true
				continue
			}
			cb.o.errorf("cq completion failed status %d\n", int(w.Status))
			return stateError
		}
		switch w.Opcode {
		case emu.WCSend:
			cb.o.debugf("send completion\n")
		case emu.WCRDMAWrite:
			cb.o.debugf("rdma write completion\n")
			return stateWriteComplete
		case emu.WCRDMARead:
			cb.o.debugf("rdma read completion\n")
			return stateReadComplete
		case emu.WCRecv:
			cb.o.debugf("recv completion\n")
			if w.ByteLen != infoSize {
				cb.o.errorf("Received bogus data, size %d\n", w.ByteLen)
				cb.o.errorf("recv wc error: %d\n", -1)
				return stateError
			}
			next := 0
			if cb.o.Server {
				cb.remote.addr = binary.BigEndian.Uint64(cb.recv.b[0:])
				cb.remote.rkey = binary.BigEndian.Uint32(cb.recv.b[8:])
				cb.remote.len = binary.BigEndian.Uint32(cb.recv.b[12:])
				cb.o.debugf("Received rkey %x addr %x len %d from peer\n", cb.remote.rkey, cb.remote.addr, cb.remote.len)
				if state <= stateConnected || state == stateWriteComplete {
					next = stateReadAdv
				} else {
					next = stateWriteAdv
				}
			} else if state == stateReadAdv {
				next = stateWriteAdv
			} else {
				next = stateWriteComplete
			}
			if err := cb.postRecv(); err != nil {
				cb.o.errorf("post recv error: %d\n", errnoOf(err))
				return stateError
			}
			return next
		default:
			cb.o.debugf("unknown!!!!! completion\n")
			return stateError
		}
	}
}

// Param is rping's connection parameters (rping_connect_client): one
// outstanding READ each way, retry and RNR retry counts 7.
var Param = cma.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

func runServer(cfg Config, o *Options) error {
	events := newChannel()
	lid, err := cfg.CM.CreateID(cma.PSTCP, qpstate.TypeRC, events.handle, nil)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	addr := o.Addr
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	if err := lid.Bind(netip.AddrPortFrom(addr, uint16(o.Port))); err != nil {
		o.perror("rdma_bind_addr", err)
		return ErrFailed
	}
	o.debugf("rdma_bind_addr successful\n")
	o.debugf("rdma_listen\n")
	if err := lid.Listen(backlog); err != nil {
		o.perror("rdma_listen", err)
		return ErrFailed
	}
	o.flush()
	if cfg.Ready != nil {
		cfg.Ready(int(lid.Info().Src.Port()))
	}
	var req cma.Event
	for req.Type != cma.EventConnectRequest {
		if req, err = events.next(context.Background()); err != nil {
			return err
		}
	}
	child := req.ID
	defer child.Destroy()
	o.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST (child)\n")
	cb, err := newSession(cfg.Dev, o, child, events)
	if err != nil {
		return err
	}
	o.debugf("accepting client connection request\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ev, err := cb.accept(ctx, req.Conn); err != nil {
		return err
	} else if ev.Type != cma.EventEstablished {
		o.errorf("cma event %v, error %d\n", ev.Type, ev.Status)
		o.errorf("wait for CONNECTED state %d\n", stateError)
		o.errorf("connect error -1\n")
		return ErrFailed
	}
	o.debugf("ESTABLISHED\n")
	ret := cb.testServer()
	cb.disconnect()
	if ret != 0 {
		o.errorf("rping server failed: %d\n", ret)
		return ErrFailed
	}
	return nil
}

// testServer is rping_test_server.
func (cb *session) testServer() int {
	o := cb.o
	state := stateConnected
	for {
		if state = cb.wait(state); state != stateReadAdv {
			o.errorf("wait for RDMA_READ_ADV state %d\n", state)
			return cb.result(state)
		}
		o.debugf("server received sink adv\n")
		// The client's length, as rping: a larger one than -S here
		// fails the READ on the local MR (local protection error).
		n := int(cb.remote.len)
		if cb.postSend(emu.SendWR{Opcode: emu.WRRDMARead, RemoteAddr: cb.remote.addr, RKey: cb.remote.rkey,
			SGList: []emu.SGE{{Addr: cb.rdma.addr, Length: uint32(n), LKey: cb.rdma.mr.LKey()}}}) != nil {
			return -1
		}
		o.debugf("server posted rdma read req \n")
		if state = cb.wait(state); state != stateReadComplete {
			o.errorf("wait for RDMA_READ_COMPLETE state %d\n", state)
			return cb.result(state)
		}
		o.debugf("server received read complete\n")
		if o.Verbose {
			fmt.Fprintf(o.out, "server ping data: %s\n", cString(cb.rdma.b))
		}
		if cb.sendGoAhead() != nil {
			return -1
		}
		o.debugf("server posted go ahead\n")
		if state = cb.wait(state); state != stateWriteAdv {
			o.errorf("wait for RDMA_WRITE_ADV state %d\n", state)
			return cb.result(state)
		}
		o.debugf("server received sink adv\n")
		wlen := len(cString(cb.rdma.b)) + 1
		wlen = min(wlen, o.Size)
		o.debugf("rdma write from lkey %x laddr %x len %d\n", cb.rdma.mr.LKey(), cb.rdma.addr, wlen)
		if cb.postSend(emu.SendWR{Opcode: emu.WRRDMAWrite, RemoteAddr: cb.remote.addr, RKey: cb.remote.rkey,
			SGList: []emu.SGE{{Addr: cb.rdma.addr, Length: uint32(wlen), LKey: cb.rdma.mr.LKey()}}}) != nil {
			return -1
		}
		if state = cb.wait(state); state != stateWriteComplete {
			o.errorf("wait for RDMA_WRITE_COMPLETE state %d\n", state)
			return cb.result(state)
		}
		o.debugf("server rdma write complete \n")
		if cb.sendGoAhead() != nil {
			return -1
		}
		o.debugf("server posted go ahead\n")
	}
}

// result is rping's return value at the end of a test loop: 0 once
// disconnected, -1 otherwise.
func (cb *session) result(state int) int {
	if state == stateDisconnected {
		return 0
	}
	return -1
}

// cString returns b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func runClient(cfg Config, o *Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events := newChannel()
	id, err := cfg.CM.CreateID(cma.PSTCP, qpstate.TypeRC, events.handle, nil)
	if err != nil {
		return err
	}
	defer id.Destroy()
	ev, err := resolve(ctx, id, events, netip.AddrPortFrom(o.Addr, uint16(o.Port)))
	if err != nil {
		return err
	}
	if ev.Type != cma.EventRouteResolved {
		o.errorf("cma event %v, error %d\n", ev.Type, ev.Status)
		o.errorf("waiting for addr/route resolution state %d\n", stateError)
		return ErrFailed
	}
	o.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	cb, err := newSession(cfg.Dev, o, id, events)
	if err != nil {
		return err
	}
	if ev, err = cb.connect(ctx); err != nil {
		return err
	}
	if ev.Type != cma.EventEstablished {
		o.errorf("cma event %v, error %d\n", ev.Type, ev.Status)
		o.errorf("wait for CONNECTED state %d\n", stateRouteResolved)
		o.errorf("connect error -1\n")
		return ErrFailed
	}
	o.debugf("ESTABLISHED\n")
	o.debugf("rdma_connect successful\n")
	ret := cb.testClient()
	if ret != 0 {
		o.errorf("rping client failed: %d\n", ret)
	}
	select {
	case <-events.disconnected: // the server went first; wait printed it
	default:
		// rping prints the DISCONNECTED event if it comes (the DREP)
		// while it tears down; a peer that never answers the DREQ does
		// not keep it.
		cb.disconnect()
		select {
		case <-events.disconnected:
			o.errorf("client DISCONNECT EVENT...\n")
		case <-time.After(disconnectWait):
		}
	}
	if ret != 0 {
		return ErrFailed
	}
	return nil
}

// testClient is rping_test_client.
func (cb *session) testClient() int {
	o := cb.o
	start := firstChar
	for ping := 0; o.Count == 0 || ping < o.Count; ping++ {
		state := stateReadAdv
		b := cb.start.b
		msg := fmt.Sprintf("rdma-ping-%d: ", ping)
		copy(b, msg) // -S is at least 26: room for any ping number
		c := start
		for i := len(msg); i < len(b); i++ {
			b[i] = byte(c)
			if c++; c > lastChar {
				c = firstChar
			}
		}
		if start++; start > lastChar {
			start = firstChar
		}
		b[len(b)-1] = 0
		if cb.sendInfo(&cb.start) != nil {
			return -1
		}
		if state = cb.wait(state); state != stateWriteAdv {
			o.errorf("wait for RDMA_WRITE_ADV state %d\n", state)
			return cb.result(state)
		}
		if cb.sendInfo(&cb.rdma) != nil {
			return -1
		}
		if state = cb.wait(state); state != stateWriteComplete {
			o.errorf("wait for RDMA_WRITE_COMPLETE state %d\n", state)
			return cb.result(state)
		}
		if o.Validate && !bytes.Equal(cb.start.b, cb.rdma.b) {
			o.errorf("data mismatch!\n")
			return -1
		}
		if o.Verbose {
			fmt.Fprintf(o.out, "ping data: %s\n", cString(cb.rdma.b))
		}
	}
	return 0
}
