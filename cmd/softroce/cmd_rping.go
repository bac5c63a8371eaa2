package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/rdmacm"
	"golang.org/x/sys/unix"
)

func init() {
	register(command{
		name:    "rping",
		summary: "librdmacm's rping from an emulated HCA on a real segment: RDMA CM connection, same flags, protocol and output",
		usage: "-s|-c [-vVd] [-S size] [-C count] [-a addr] [-p port] [--dev NAME]\n" +
			"\t[--tap NAME|--iface NAME] [--bridge BR] --ip CIDR [--mac MAC] [--mtu N] [--pcap FILE]",
		run: runRping,
	})
}

// runRping is "softroce rping": rdma-core 44's rping (librdmacm/examples),
// connected by softroce's own Communication Manager (package rdmacm: CM
// MADs on QP1, service ID of RDMA_PS_TCP port -p, default 7174) instead of
// the kernel's rdma_cm, so either side can be the real rping on rxe.
//
// The protocol is rping's: the client SENDs the address, rkey and length
// of its start buffer (16 bytes, big-endian), the server RDMA READs it,
// SENDs "go ahead", the client SENDs its RDMA buffer's, the server RDMA
// WRITEs the ping back (strlen + 1 bytes) and SENDs "go ahead"; -C pings
// (0: forever), then the client disconnects. -v prints "ping data: ..."
// (client) and "server ping data: ..." (server), -V makes the client
// compare what came back ("data mismatch!"), -d prints rping's debug
// lines that carry no pointers.
//
// Differences: -a on the server only selects the address family (the
// server listens on all of the node's addresses); -I, -P and -q are
// refused; -d is rping's debug flag, so the device is named with --dev.
func runRping(args []string, stdout, stderr io.Writer) error {
	linkArgs, toolArgs, err := splitLinkArgs(args)
	if err != nil {
		fmt.Fprintln(stderr, "softroce rping:", err)
		return errUsage
	}
	o, err := parseRpingFlags(toolArgs)
	if err != nil {
		fmt.Fprintln(stderr, err)
		var ue *rpingUsageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stdout, "%s", rpingUsage)
		}
		return &exitError{code: int(unix.EINVAL)}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	o.out, o.errw = w, stderr
	o.echoOptions()
	n, err := toolNode("rping", linkArgs, o.dev, stderr)
	if err != nil {
		return err
	}
	defer n.Close()
	cm, err := rdmacm.New(rdmacm.Config{Dev: n.Device(), Seed: uint64(time.Now().UnixNano()),
		Resolver: emu.ResolverFunc(func(ctx context.Context, ip netip.Addr) ([6]byte, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*node.ResolveTimeout)
			defer cancel()
			return n.Resolve(ctx, ip)
		})})
	if err != nil {
		return err
	}
	defer cm.Close()
	if o.server {
		return rpingServer(n, cm, o)
	}
	return rpingClient(n, cm, o)
}

const rpingUsage = `rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
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

// rpingMinSize and rpingMaxSize bound -S as rping does (RPING_MIN_BUFSIZE:
// room for "rdma-ping-%d: " and INT_MAX; RPING_BUFSIZE - 1).
const (
	rpingMinSize = 26
	rpingMaxSize = 64*1024 - 1
)

// rping's test states (enum test_state), printed in its errors.
const (
	rpingConnected         = 5
	rpingReadAdv           = 6
	rpingReadComplete      = 7
	rpingWriteAdv          = 8
	rpingWriteComplete     = 9
	rpingDisconnected      = 10
	rpingError             = 11
	rpingRouteResolved     = 4
	rpingDefaultPort       = 7174
	rpingInfoSize          = 16 // struct rping_rdma_info
	rpingSQDepth           = 16
	rpingFirstChar, rpingZ = 65, 122
)

type rpingOpts struct {
	server, client bool
	addr           netip.Addr
	port           int
	count          int
	size           int
	verbose        bool
	validate       bool
	debug          bool
	dev            string
	echo           []string // debug lines of the option parsing, in order

	out  *bufio.Writer
	errw io.Writer
}

// rpingUsageError is an option error after which rping prints its usage.
type rpingUsageError struct{ msg string }

func (e *rpingUsageError) Error() string { return e.msg }

// parseRpingFlags parses rping's getopt string "a:I:Pp:C:S:t:scvVdq"
// (clustered flags, glued or separate arguments) plus --dev NAME.
func parseRpingFlags(args []string) (*rpingOpts, error) {
	o := &rpingOpts{port: rpingDefaultPort, size: 64}
	server := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--dev" || strings.HasPrefix(a, "--dev=") {
			if v, ok := strings.CutPrefix(a, "--dev="); ok {
				o.dev = v
			} else if i+1 < len(args) {
				i++
				o.dev = args[i]
			} else {
				return nil, &rpingUsageError{"option --dev requires an argument"}
			}
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			continue // rping ignores operands
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			arg := ""
			if strings.IndexByte("aIpCSt", c) >= 0 {
				if j+1 < len(a) {
					arg = a[j+1:]
				} else if i+1 < len(args) {
					i++
					arg = args[i]
				} else {
					return nil, &rpingUsageError{fmt.Sprintf("option -%c requires an argument", c)}
				}
				j = len(a)
			}
			switch c {
			case 'a':
				ip, err := netip.ParseAddr(arg)
				if err != nil {
					return nil, fmt.Errorf("getaddrinfo failed (Name or service not known) - invalid hostname or IP address")
				}
				o.addr = ip
			case 'p':
				p, _ := strconv.Atoi(arg)
				o.port = p & 0xffff
				o.echo = append(o.echo, fmt.Sprintf("port %d", p))
			case 'C':
				n, _ := strconv.Atoi(arg)
				if n < 0 {
					return nil, fmt.Errorf("Invalid count %d", n)
				}
				o.count = n
				o.echo = append(o.echo, fmt.Sprintf("count %d", n))
			case 'S':
				n, _ := strconv.Atoi(arg)
				if n < rpingMinSize || n > rpingMaxSize {
					return nil, fmt.Errorf("Invalid size %d (valid range is %d to %d)", n, rpingMinSize, rpingMaxSize+1)
				}
				o.size = n
				o.echo = append(o.echo, fmt.Sprintf("size %d", n))
			case 's':
				server = 1
				o.echo = append(o.echo, "server")
			case 'c':
				server = 0
				o.echo = append(o.echo, "client")
			case 'v':
				o.verbose = true
				o.echo = append(o.echo, "verbose")
			case 'V':
				o.validate = true
				o.echo = append(o.echo, "validate data")
			case 'd':
				o.debug = true
			case 'I', 'P', 'q', 't':
				return nil, fmt.Errorf("softroce rping: -%c is not supported: %v", c, unix.EOPNOTSUPP)
			default:
				return nil, &rpingUsageError{fmt.Sprintf("rping: invalid option -- '%c'", c)}
			}
		}
	}
	if server == -1 {
		return nil, &rpingUsageError{"rping: -s or -c required"}
	}
	o.server, o.client = server == 1, server == 0
	if o.client && !o.addr.IsValid() {
		return nil, &rpingUsageError{"rping: the client needs -a addr"}
	}
	return o, nil
}

// echoOptions prints the option lines rping's DEBUG_LOG prints while it
// parses (only those after -d, as getopt meets them; we print all of them
// when -d is given anywhere, close enough for a debug aid).
func (o *rpingOpts) echoOptions() {
	if !o.debug {
		return
	}
	for _, l := range o.echo {
		o.debugf("%s\n", l)
	}
}

func (o *rpingOpts) debugf(format string, a ...any) {
	if o.debug {
		fmt.Fprintf(o.out, format, a...)
	}
}

// errorf prints a line on stderr as rping's fprintf(stderr, ...) does,
// after flushing stdout so that the two streams interleave in order.
func (o *rpingOpts) errorf(format string, a ...any) {
	o.out.Flush()
	fmt.Fprintf(o.errw, format, a...)
}

// rpingCB is rping's control block: the QP, its CQ and the buffers.
type rpingCB struct {
	o      *rpingOpts
	dev    *emu.Device
	pd     *emu.PD
	cq     *emu.CQ
	qp     *emu.QP
	notify chan struct{}
	recv   rpingBuf // struct rping_rdma_info, received
	send   rpingBuf // struct rping_rdma_info, sent
	rdma   rpingBuf // RDMA sink (server: READ target and WRITE source)
	start  rpingBuf // client: the ping data the server READs
	conn   *rdmacm.Conn
	remote struct {
		addr      uint64
		rkey, len uint32
	}
	flushed bool
}

type rpingBuf struct {
	addr uint64
	b    []byte
	mr   *emu.MR
}

func newRpingCB(dev *emu.Device, o *rpingOpts) (*rpingCB, error) {
	cb := &rpingCB{o: o, dev: dev, notify: make(chan struct{}, 1)}
	var err error
	if cb.pd, err = dev.AllocPD(0); err != nil {
		return nil, err
	}
	if cb.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: rpingSQDepth * 2, CompHandler: func(*emu.CQ) {
		select {
		case cb.notify <- struct{}{}:
		default:
		}
	}}); err != nil {
		return nil, err
	}
	if cb.qp, err = cb.pd.CreateQP(&emu.QPInitAttr{SendCQ: cb.cq, RecvCQ: cb.cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: rpingSQDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	rw := ib.AccessLocalWrite | ib.AccessRemoteRead | ib.AccessRemoteWrite
	bufs := []struct {
		b      *rpingBuf
		n      int
		access ib.AccessFlags
	}{{&cb.recv, rpingInfoSize, ib.AccessLocalWrite}, {&cb.send, rpingInfoSize, 0}, {&cb.rdma, o.size, rw}}
	if o.client {
		bufs = append(bufs, struct {
			b      *rpingBuf
			n      int
			access ib.AccessFlags
		}{&cb.start, o.size, rw})
	}
	for _, b := range bufs {
		b.b.addr, b.b.b = dev.Memory().Alloc(b.n)
		b.b.b = b.b.b[:b.n]
		if b.b.mr, err = cb.pd.RegUserMR(b.b.addr, uint64(b.n), b.b.addr, b.access); err != nil {
			return nil, err
		}
	}
	o.debugf("allocated & registered buffers...\n")
	if err := rdmacm.InitQP(cb.qp, rpingParam); err != nil { // rdma_create_qp
		return nil, err
	}
	if err := cb.postRecv(); err != nil {
		return nil, err
	}
	o.debugf("cq_thread started.\n")
	return cb, nil
}

func (cb *rpingCB) postRecv() error {
	_, err := cb.qp.PostRecv([]emu.RecvWR{{SGList: []emu.SGE{{Addr: cb.recv.addr, Length: rpingInfoSize, LKey: cb.recv.mr.LKey()}}}})
	return err
}

func (cb *rpingCB) postSend(wr emu.SendWR) error {
	wr.SendFlags |= emu.SendSignaled
	if _, err := cb.qp.PostSend([]emu.SendWR{wr}); err != nil {
		cb.o.errorf("post send error %d\n", errnoOf(err))
		return err
	}
	return nil
}

func errnoOf(err error) int {
	var e unix.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return -1
}

// sendInfo SENDs the address, rkey and length of b (rping_format_send).
func (cb *rpingCB) sendInfo(b *rpingBuf) error {
	binary.BigEndian.PutUint64(cb.send.b[0:], b.addr)
	binary.BigEndian.PutUint32(cb.send.b[8:], b.mr.RKey())
	binary.BigEndian.PutUint32(cb.send.b[12:], uint32(cb.o.size))
	cb.o.debugf("RDMA addr %x rkey %x len %d\n", b.addr, b.mr.RKey(), cb.o.size)
	return cb.sendGoAhead()
}

// sendGoAhead SENDs the send buffer as it is.
func (cb *rpingCB) sendGoAhead() error {
	return cb.postSend(emu.SendWR{Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: cb.send.addr, Length: rpingInfoSize, LKey: cb.send.mr.LKey()}}})
}

// wait runs rping's completion handler until a completion that moves
// the state (a receive, a READ or a WRITE) or the disconnection, and
// returns the new state.
func (cb *rpingCB) wait(state int) int {
	wc := make([]emu.WC, 1)
	for {
		if cb.cq.Poll(wc) == 0 {
			cb.cq.ReqNotify(emu.CQNextComp | emu.CQReportMissedEvents)
			if cb.cq.Poll(wc) == 0 {
				var done <-chan struct{}
				if cb.conn != nil {
					done = cb.conn.Done()
				}
				select {
				case <-cb.notify:
				case <-done:
					if cb.cq.Poll(wc) == 0 {
						cb.o.errorf("%s DISCONNECT EVENT...\n", map[bool]string{true: "server", false: "client"}[cb.o.server])
						return rpingDisconnected
					}
				case <-time.After(30 * time.Second):
					cb.o.errorf("no completion in 30 s\n")
					return rpingError
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
			return rpingError
		}
		switch w.Opcode {
		case emu.WCSend:
			cb.o.debugf("send completion\n")
		case emu.WCRDMAWrite:
			cb.o.debugf("rdma write completion\n")
			return rpingWriteComplete
		case emu.WCRDMARead:
			cb.o.debugf("rdma read completion\n")
			return rpingReadComplete
		case emu.WCRecv:
			cb.o.debugf("recv completion\n")
			if w.ByteLen != rpingInfoSize {
				cb.o.errorf("Received bogus data, size %d\n", w.ByteLen)
				cb.o.errorf("recv wc error: %d\n", -1)
				return rpingError
			}
			next := 0
			if cb.o.server {
				cb.remote.addr = binary.BigEndian.Uint64(cb.recv.b[0:])
				cb.remote.rkey = binary.BigEndian.Uint32(cb.recv.b[8:])
				cb.remote.len = binary.BigEndian.Uint32(cb.recv.b[12:])
				cb.o.debugf("Received rkey %x addr %x len %d from peer\n", cb.remote.rkey, cb.remote.addr, cb.remote.len)
				if state <= rpingConnected || state == rpingWriteComplete {
					next = rpingReadAdv
				} else {
					next = rpingWriteAdv
				}
			} else if state == rpingReadAdv {
				next = rpingWriteAdv
			} else {
				next = rpingWriteComplete
			}
			if err := cb.postRecv(); err != nil {
				cb.o.errorf("post recv error: %d\n", errnoOf(err))
				return rpingError
			}
			return next
		default:
			cb.o.debugf("unknown!!!!! completion\n")
			return rpingError
		}
	}
}

var rpingParam = rdmacm.Param{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// rpingReady is a test hook called once the server listens, with the
// port it listens on.
var rpingReady func(port int)

func rpingServer(n *node.Node, cm *rdmacm.CM, o *rpingOpts) error {
	port := o.port
	if port == 0 { // rdma_bind_addr picks a free port
		port = 20000 + rand.IntN(20000)
	}
	l, err := cm.Listen(uint16(port))
	if err != nil {
		o.errorf("rdma_bind_addr: %v\n", err)
		return &exitError{code: 255}
	}
	defer l.Close()
	o.debugf("rdma_bind_addr successful\n")
	o.debugf("rdma_listen\n")
	o.out.Flush()
	if rpingReady != nil {
		rpingReady(port)
	}
	if serverReady != nil {
		serverReady(&net.TCPAddr{Port: port})
	}
	req, err := l.Accept(context.Background())
	if err != nil {
		return err
	}
	o.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST (child)\n")
	cb, err := newRpingCB(n.Device(), o)
	if err != nil {
		return err
	}
	o.debugf("accepting client connection request\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cb.conn, err = req.Accept(ctx, cb.qp, rpingParam)
	if err != nil {
		o.errorf("cma event RDMA_CM_EVENT_CONNECT_ERROR, error %d\n", -errnoOf(err))
		o.errorf("wait for CONNECTED state %d\n", rpingError)
		o.errorf("connect error -1\n")
		return &exitError{code: 255}
	}
	o.debugf("ESTABLISHED\n")
	ret := cb.testServer()
	cb.conn.Disconnect(ctx)
	if ret != 0 {
		o.errorf("rping server failed: %d\n", ret)
		return &exitError{code: 255}
	}
	return nil
}

// testServer is rping_test_server.
func (cb *rpingCB) testServer() int {
	o := cb.o
	state := rpingConnected
	for {
		if state = cb.wait(state); state != rpingReadAdv {
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
		if state = cb.wait(state); state != rpingReadComplete {
			o.errorf("wait for RDMA_READ_COMPLETE state %d\n", state)
			return cb.result(state)
		}
		o.debugf("server received read complete\n")
		if o.verbose {
			fmt.Fprintf(o.out, "server ping data: %s\n", cString(cb.rdma.b))
		}
		if cb.sendGoAhead() != nil {
			return -1
		}
		o.debugf("server posted go ahead\n")
		if state = cb.wait(state); state != rpingWriteAdv {
			o.errorf("wait for RDMA_WRITE_ADV state %d\n", state)
			return cb.result(state)
		}
		o.debugf("server received sink adv\n")
		wlen := len(cString(cb.rdma.b)) + 1
		wlen = min(wlen, o.size)
		o.debugf("rdma write from lkey %x laddr %x len %d\n", cb.rdma.mr.LKey(), cb.rdma.addr, wlen)
		if cb.postSend(emu.SendWR{Opcode: emu.WRRDMAWrite, RemoteAddr: cb.remote.addr, RKey: cb.remote.rkey,
			SGList: []emu.SGE{{Addr: cb.rdma.addr, Length: uint32(wlen), LKey: cb.rdma.mr.LKey()}}}) != nil {
			return -1
		}
		if state = cb.wait(state); state != rpingWriteComplete {
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
func (cb *rpingCB) result(state int) int {
	if state == rpingDisconnected {
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

func rpingClient(n *node.Node, cm *rdmacm.CM, o *rpingOpts) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := n.Resolve(ctx, o.addr); err != nil {
		o.errorf("cma event RDMA_CM_EVENT_ADDR_ERROR, error %d\n", -int(unix.ETIMEDOUT))
		o.errorf("waiting for addr/route resolution state %d\n", rpingError)
		return &exitError{code: 255}
	}
	o.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	cb, err := newRpingCB(n.Device(), o)
	if err != nil {
		return err
	}
	cb.conn, err = cm.Connect(ctx, cb.qp, o.addr, uint16(o.port), rpingParam)
	if err != nil {
		var rej *rdmacm.RejectError
		switch {
		case errors.As(err, &rej):
			o.errorf("cma event RDMA_CM_EVENT_REJECTED, error %d\n", int(rej.Reason))
		default:
			o.errorf("cma event RDMA_CM_EVENT_UNREACHABLE, error %d\n", -errnoOf(err))
		}
		o.errorf("wait for CONNECTED state %d\n", rpingRouteResolved)
		o.errorf("connect error -1\n")
		return &exitError{code: 255}
	}
	o.debugf("ESTABLISHED\n")
	o.debugf("rdma_connect successful\n")
	ret := cb.testClient()
	if ret != 0 {
		o.errorf("rping client failed: %d\n", ret)
	}
	if cb.conn.State() == rdmacm.StateEstablished {
		if err := cb.conn.Disconnect(ctx); err == nil {
			o.errorf("client DISCONNECT EVENT...\n")
		}
	}
	if ret != 0 {
		return &exitError{code: 255}
	}
	return nil
}

// testClient is rping_test_client.
func (cb *rpingCB) testClient() int {
	o := cb.o
	start := rpingFirstChar
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		state := rpingReadAdv
		b := cb.start.b
		msg := fmt.Sprintf("rdma-ping-%d: ", ping)
		copy(b, msg) // -S is at least 26: room for any ping number
		c := start
		for i := len(msg); i < len(b); i++ {
			b[i] = byte(c)
			if c++; c > rpingZ {
				c = rpingFirstChar
			}
		}
		if start++; start > rpingZ {
			start = rpingFirstChar
		}
		b[len(b)-1] = 0
		if cb.sendInfo(&cb.start) != nil {
			return -1
		}
		if state = cb.wait(state); state != rpingWriteAdv {
			o.errorf("wait for RDMA_WRITE_ADV state %d\n", state)
			return cb.result(state)
		}
		if cb.sendInfo(&cb.rdma) != nil {
			return -1
		}
		if state = cb.wait(state); state != rpingWriteComplete {
			o.errorf("wait for RDMA_WRITE_COMPLETE state %d\n", state)
			return cb.result(state)
		}
		if o.validate && !bytes.Equal(cb.start.b, cb.rdma.b) {
			o.errorf("data mismatch!\n")
			return -1
		}
		if o.verbose {
			fmt.Fprintf(o.out, "ping data: %s\n", cString(cb.rdma.b))
		}
	}
	return 0
}
