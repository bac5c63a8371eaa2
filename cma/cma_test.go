package cma

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// side is one device of a loopback pair with its CM and a QP factory.
type side struct {
	t   testing.TB
	dev *emu.Device
	ip  netip.Addr
	cm  *CM
	pd  *emu.PD
	cq  *emu.CQ
	evs chan *Event
}

func newPair(t testing.TB, ca, cb Config) (*side, *side) {
	t.Helper()
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	mk := func(ls *workload.LoopbackSide, cfg Config) *side {
		cfg.Dev = ls.Dev
		cm, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		s := &side{t: t, dev: ls.Dev, ip: ls.IP, cm: cm, evs: make(chan *Event, 64)}
		if s.pd, err = ls.Dev.AllocPD(0); err != nil {
			t.Fatal(err)
		}
		if s.cq, err = ls.Dev.CreateCQ(emu.CQInitAttr{CQE: 16}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return mk(lb.A, ca), mk(lb.B, cb)
}

// handler queues every event, copying what the CM owns.
func (s *side) handler(ev *Event) error {
	e := *ev
	e.Conn.PrivateData = append([]byte(nil), ev.Conn.PrivateData...)
	s.evs <- &e
	return nil
}

func (s *side) id(ps PortSpace) *ID {
	id, err := s.cm.CreateID(ps, qpstate.TypeRC, s.handler, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

func (s *side) qp() *emu.QP {
	qp, err := s.pd.CreateQP(&emu.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		s.t.Fatal(err)
	}
	return qp
}

// want waits for the next event and checks its type and status.
func (s *side) want(typ EventType, status int32) *Event {
	s.t.Helper()
	select {
	case ev := <-s.evs:
		if ev.Type != typ || ev.Status != status {
			s.t.Fatalf("event %v status %d, want %v status %d", ev.Type, ev.Status, typ, status)
		}
		return ev
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no %v", typ)
	}
	return nil
}

// modify moves qp to each state with the attributes InitQPAttr gives, as
// librdmacm's ucma_modify_qp_* do.
func modify(t *testing.T, id *ID, qp *emu.QP, states ...qpstate.State) {
	t.Helper()
	for _, st := range states {
		a, m, err := id.InitQPAttr(st)
		if err != nil {
			t.Fatalf("InitQPAttr(%v): %v", st, err)
		}
		if err := qp.Modify(&a, m); err != nil {
			t.Fatalf("modify to %v (%v): %v", st, m, err)
		}
	}
}

// resolved creates an ID on s resolved to dst:port.
func (s *side) resolved(dst netip.Addr, port uint16) *ID {
	s.t.Helper()
	id := s.id(PSTCP)
	if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(dst, port), time.Second); err != nil {
		s.t.Fatal(err)
	}
	s.want(EventAddrResolved, 0)
	if err := id.ResolveRoute(time.Second); err != nil {
		s.t.Fatal(err)
	}
	s.want(EventRouteResolved, 0)
	return id
}

// TestConnectSendDisconnect: the librdmacm sequence end to end between two
// CMs: resolve, connect, CONNECT_REQUEST, accept, CONNECT_RESPONSE, RTU,
// ESTABLISHED, a SEND over the QPs the consumers moved themselves,
// DISCONNECTED on both sides, TIMEWAIT_EXIT.
func TestConnectSendDisconnect(t *testing.T) {
	a, b := newPair(t, Config{Seed: 1, Timewait: 50 * time.Millisecond}, Config{Seed: 2, Timewait: 50 * time.Millisecond})
	l := b.id(PSTCP)
	if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	ca := a.resolved(b.ip, 7174)
	qa := a.qp()
	modify(t, ca, qa, qpstate.StateInit)
	if err := ca.Connect(&ConnParam{QPNum: qa.QPNum(), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		PrivateData: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	req := b.want(EventConnectRequest, 0)
	cb := req.ID
	if !bytes.HasPrefix(req.Conn.PrivateData, []byte("hello")) || len(req.Conn.PrivateData) != 56 || req.Conn.QPNum != qa.QPNum() {
		t.Fatalf("CONNECT_REQUEST %+v", req.Conn)
	}
	if in := cb.Info(); in.Dst.Addr() != a.ip || in.Src != netip.AddrPortFrom(b.ip, 7174) || in.Dst.Port() != ca.Info().Src.Port() {
		t.Fatalf("passive addresses %v -> %v, active %v", in.Src, in.Dst, ca.Info().Src)
	}
	qb := b.qp()
	modify(t, cb, qb, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS)
	if err := cb.Accept(&ConnParam{QPNum: qb.QPNum(), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	resp := a.want(EventConnectResponse, 0)
	if resp.Conn.QPNum != qb.QPNum() {
		t.Fatalf("CONNECT_RESPONSE QPN %#x, want %#x", resp.Conn.QPNum, qb.QPNum())
	}
	modify(t, ca, qa, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS)
	if err := ca.Accept(nil); err != nil {
		t.Fatal(err)
	}
	b.want(EventEstablished, 0)

	// A SEND from a to b over the connected QPs.
	mem := b.dev.Memory()
	addr, buf := mem.Alloc(64)
	mr, err := b.pd.RegUserMR(addr, 64, addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qb.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{{Addr: addr, Length: 64, LKey: mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	amem := a.dev.Memory()
	saddr, sbuf := amem.Alloc(64)
	copy(sbuf, "ping over rdma_cm")
	smr, err := a.pd.RegUserMR(saddr, 64, saddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qa.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: saddr, Length: 17, LKey: smr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]emu.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); b.cq.Poll(wc) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no receive completion")
		}
	}
	if wc[0].Status != emu.WCSuccess || string(buf[:17]) != "ping over rdma_cm" {
		t.Fatalf("receive %v: %q", wc[0].Status, buf[:17])
	}

	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(EventDisconnected, 0)
	if err := cb.Disconnect(); err != nil {
		t.Fatal(err)
	}
	a.want(EventDisconnected, 0)
	a.want(EventTimewaitExit, 0)
	b.want(EventTimewaitExit, 0)
	ca.Destroy()
	cb.Destroy()
	l.Destroy()
}

// TestConnectToNobody: a REQ for a port nobody listens on gets REJ
// "invalid service ID", which the consumer sees as REJECTED status 8.
func TestConnectToNobody(t *testing.T) {
	a, b := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	ca := a.resolved(b.ip, 9999)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	a.want(EventRejected, int32(mad.RejInvalidServiceID))
}

// TestRejectWithPrivateData: rdma_reject of a request reaches the active
// side as REJECTED 28 with the listener's private data.
func TestRejectWithPrivateData(t *testing.T) {
	a, b := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	l := b.id(PSTCP)
	if err := l.Bind(netip.AddrPortFrom(b.ip, 4000)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	ca := a.resolved(b.ip, 4000)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	req := b.want(EventConnectRequest, 0)
	if err := req.ID.Reject([]byte("go away"), 0); err != nil {
		t.Fatal(err)
	}
	ev := a.want(EventRejected, int32(mad.RejConsumerDefined))
	if !bytes.HasPrefix(ev.Conn.PrivateData, []byte("go away")) {
		t.Fatalf("REJ private data %q", ev.Conn.PrivateData)
	}
	if err := req.ID.Accept(&ConnParam{}); err == nil {
		t.Fatal("accept after reject succeeded")
	}
}

// TestUnreachable: a REQ nobody answers is sent 1+MaxRetries times, then
// the consumer gets UNREACHABLE with -ETIMEDOUT.
func TestUnreachable(t *testing.T) {
	var sent int
	a, b := newPair(t, Config{Seed: 1, REQTimeout: 10 * time.Millisecond, MaxRetries: 2, DropTx: func(m mad.MAD) bool {
		if m.AttributeID() == mad.AttrREQ {
			sent++
			return true
		}
		return false
	}}, Config{Seed: 2})
	ca := a.resolved(b.ip, 7174)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	a.want(EventUnreachable, -int32(unix.ETIMEDOUT))
	a.cm.mu.Lock()
	n := sent
	a.cm.mu.Unlock()
	if n != 3 {
		t.Fatalf("REQ sent %d times, want 3", n)
	}
}

// TestBindErrors: the kernel's errnos for binds and calls out of order.
func TestBindErrors(t *testing.T) {
	a, _ := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	x, y := a.id(PSTCP), a.id(PSTCP)
	if err := x.Bind(netip.AddrPortFrom(a.ip, 5000)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want unix.Errno
	}{
		// cma_check_port: a wildcard beside a bound address is
		// EADDRNOTAVAIL, the same address EADDRINUSE.
		{"same port, wildcard", y.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 5000)), unix.EADDRNOTAVAIL},
		{"same port, same address", y.Bind(netip.AddrPortFrom(a.ip, 5000)), unix.EADDRINUSE},
		{"foreign address", y.Bind(netip.AddrPortFrom(netip.MustParseAddr("192.0.2.77"), 0)), unix.EADDRNOTAVAIL},
		{"bind twice", x.Bind(netip.AddrPortFrom(a.ip, 5001)), unix.EINVAL},
		{"connect unresolved", x.Connect(&ConnParam{}), unix.EINVAL},
		{"route unresolved", x.ResolveRoute(time.Second), unix.EINVAL},
		{"disconnect unconnected", x.Disconnect(), unix.EINVAL},
		{"accept unconnected", x.Accept(nil), unix.EINVAL},
		{"bad port space", func() error { _, err := a.cm.CreateID(7, qpstate.TypeRC, nil, nil); return err }(), unix.EINVAL},
	} {
		if !errorsIs(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := y.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 5002)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := y.InitQPAttr(qpstate.StateInit); !errorsIs(err, unix.EINVAL) {
		t.Errorf("InitQPAttr on a wildcard ID: %v, want EINVAL", err)
	}
}

func errorsIs(err error, e unix.Errno) bool { return errors.Is(err, e) }

// TestServiceResolution: a UD ID's connect is a SIDR_REQ; the listener's
// accept answers with its QPN and RDMA_UDP_QKEY (ESTABLISHED with the UD
// parameters), a port nobody listens on answers "unsupported"
// (UNREACHABLE, status 1), a reject "rejected" (status 2).
func TestServiceResolution(t *testing.T) {
	a, b := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	udID := func(s *side) *ID {
		id, err := s.cm.CreateID(PSUDP, qpstate.TypeUD, s.handler, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	resolved := func(port uint16) *ID {
		id := udID(a)
		if err := id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(b.ip, port), time.Second); err != nil {
			t.Fatal(err)
		}
		a.want(EventAddrResolved, 0)
		if err := id.ResolveRoute(time.Second); err != nil {
			t.Fatal(err)
		}
		a.want(EventRouteResolved, 0)
		return id
	}
	l := udID(b)
	if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	ca := resolved(7174)
	if a, m, err := ca.InitQPAttr(qpstate.StateInit); err != nil || a.QKey != UDPQKey || m&qpstate.AttrQKey == 0 {
		t.Fatalf("UD INIT attributes %+v %v: %v", a, m, err)
	}
	if err := ca.Connect(&ConnParam{PrivateData: []byte("who")}); err != nil {
		t.Fatal(err)
	}
	req := b.want(EventConnectRequest, 0)
	if len(req.UD.PrivateData) != 180 || string(req.UD.PrivateData[:3]) != "who" {
		t.Fatalf("CONNECT_REQUEST private data %q", req.UD.PrivateData)
	}
	if err := req.ID.Accept(&ConnParam{QPNum: 0x123}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-a.evs:
		if ev.Type != EventEstablished || ev.UD.QPNum != 0x123 || ev.UD.QKey != UDPQKey || ev.UD.AH.GRH.DGID != emu.GIDFromAddr(b.ip) {
			t.Fatalf("event %v %+v", ev.Type, ev.UD)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ESTABLISHED")
	}
	nobody := resolved(7175)
	if err := nobody.Connect(&ConnParam{}); err != nil {
		t.Fatal(err)
	}
	a.want(EventUnreachable, int32(mad.SIDRUnsupported))
	again := resolved(7174)
	if err := again.Connect(&ConnParam{}); err != nil {
		t.Fatal(err)
	}
	req = b.want(EventConnectRequest, 0)
	if err := req.ID.Reject(nil, 0); err != nil {
		t.Fatal(err)
	}
	a.want(EventUnreachable, int32(mad.SIDRReject))
}

// established connects a (active) to a listener on b at port and returns
// both IDs, their QPs moved through INIT, RTR and RTS.
func established(t *testing.T, a, b *side, port uint16) (*ID, *ID) {
	t.Helper()
	ca, cb := connected(t, a, b, port, rpingParam, ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
	return ca.id, cb.id
}

// TestLostREQIsRetransmitted: the first REQ is lost; the timer sends the
// identical REQ again and the connection is made.
func TestLostREQIsRetransmitted(t *testing.T) {
	var mu sync.Mutex
	var reqs []mad.MAD
	a, b := newPair(t, Config{Seed: 1, REQTimeout: 20 * time.Millisecond, DropTx: func(m mad.MAD) bool {
		mu.Lock()
		defer mu.Unlock()
		if m.AttributeID() != mad.AttrREQ {
			return false
		}
		reqs = append(reqs, append(mad.MAD(nil), m...))
		return len(reqs) == 1
	}}, Config{Seed: 2})
	established(t, a, b, 7174)
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) < 2 {
		t.Fatalf("%d REQs sent, want a retransmission", len(reqs))
	}
	for i, r := range reqs[1:] {
		if !bytes.Equal(r, reqs[0]) {
			t.Fatalf("retransmission %d differs from the REQ", i+1)
		}
	}
}

// TestUnansweredDREQ: a peer that never answers the DREQ: after the
// retries the consumer gets DISCONNECTED with -ETIMEDOUT, then
// TIMEWAIT_EXIT.
func TestUnansweredDREQ(t *testing.T) {
	// The REQ timer is the active side's DREQ timer too: long enough for
	// the REP on a loaded machine.
	a, b := newPair(t, Config{Seed: 1, REQTimeout: 200 * time.Millisecond, MaxRetries: 2, Timewait: 10 * time.Millisecond},
		Config{Seed: 2, DropTx: func(m mad.MAD) bool { return m.AttributeID() == mad.AttrDREP }})
	ca, cb := established(t, a, b, 7174)
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(EventDisconnected, 0)
	if err := cb.Disconnect(); err != nil { // its DREP is lost
		t.Fatal(err)
	}
	a.want(EventDisconnected, -int32(unix.ETIMEDOUT))
	a.want(EventTimewaitExit, 0)
}

// TestDestroyWhileConnecting: the active side destroys its ID before the
// REP: the REJ "timeout" it sends (with its node GUID) reaches the passive
// ID as REJECTED 4, and a later accept fails.
func TestDestroyWhileConnecting(t *testing.T) {
	a, b := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	l := b.id(PSTCP)
	if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	ca := a.resolved(b.ip, 7174)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	cb := b.want(EventConnectRequest, 0).ID
	ca.Destroy()
	b.want(EventRejected, int32(mad.RejTimeout))
	if err := cb.Accept(&ConnParam{QPNum: 1}); !errorsIs(err, unix.EINVAL) {
		t.Fatalf("accept after the peer gave up: %v, want EINVAL", err)
	}
}

// TestREQFloodLeavesNothing: REQs for a port nobody listens on, and REQs a
// full backlog drops, are counted and answered as the kernel does (REJ 8;
// nothing) and leave no ID or goroutine behind.
func TestREQFloodLeavesNothing(t *testing.T) {
	a, b := newPair(t, Config{Seed: 1}, Config{Seed: 2})
	// One REJ each way first: the address handles are cached.
	warm := a.resolved(b.ip, 6999)
	if err := warm.Connect(&ConnParam{QPNum: 0xff}); err != nil {
		t.Fatal(err)
	}
	a.want(EventRejected, int32(mad.RejInvalidServiceID))
	warm.Destroy()
	objects := [2][8]int{a.cm.objects(), b.cm.objects()}
	st0 := b.cm.Stats()
	before := runtime.NumGoroutine()
	full := func(*Event) error { return errors.New("backlog full") }
	l, err := b.cm.CreateID(PSTCP, qpstate.TypeRC, full, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7000)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var ids []*ID
	for i := range n {
		port := uint16(7000)
		if i%2 == 1 {
			port = 7001
		}
		ids = append(ids, a.resolved(b.ip, port))
	}
	for i, id := range ids {
		if err := id.Connect(&ConnParam{QPNum: 0x100 + uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range n / 2 {
		a.want(EventRejected, int32(mad.RejInvalidServiceID))
	}
	// (A slow run may see the dropped ones retransmitted: more drops.)
	waitFor(t, "the dropped REQs", func() bool { return b.cm.Stats().BacklogDrops >= n/2 })
	if st := b.cm.Stats(); st.RejSent-st0.RejSent != n/2 || st.Received-st0.Received != n/2+st.BacklogDrops {
		t.Errorf("after %d REQs: %+v, before %+v", n, st, st0)
	}
	for _, id := range ids {
		id.Destroy()
	}
	l.Destroy()
	for _, c := range []*CM{a.cm, b.cm} {
		c.mu.Lock()
		left := len(c.ids) + len(c.conns) + len(c.remotes) + len(c.ports)
		c.mu.Unlock()
		if left != 0 {
			t.Errorf("%d IDs, connections or ports left", left)
		}
	}
	// The REJs the destroyed IDs sent leave their send slots once sent.
	waitFor(t, fmt.Sprintf("the objects of before the flood, %v", objects), func() bool {
		return [2][8]int{a.cm.objects(), b.cm.objects()} == objects
	})
	waitGoroutines(t, before)
}

func TestCommonPrefix(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"10.0.0.1", "10.0.0.1", 128},
		{"10.0.0.1", "10.0.0.2", 96 + 30},
		{"10.1.0.1", "10.0.0.1", 96 + 15},
		{"fd00::1", "fe80::1", 6},
	} {
		if got := commonPrefix(netip.MustParseAddr(tc.a), netip.MustParseAddr(tc.b)); got != tc.want {
			t.Errorf("commonPrefix(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// groups records the link joins and leaves.
type groups struct {
	mu  sync.Mutex
	log []string
}

func (g *groups) JoinMulticast(a netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = append(g.log, "join "+a.String())
	return nil
}

func (g *groups) LeaveMulticast(a netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = append(g.log, "leave "+a.String())
	return nil
}

// TestJoinMulticast: rdma_join_multicast of an IPv4 group on a UD ID
// gives MULTICAST_JOIN with the group's GID, QPN 0xFFFFFF and
// RDMA_UDP_QKEY, and joins the group on the link (a send-only join does
// not); leaving and destroying leave it there; an IPv6 group is ENOTSUPP,
// a TCP ID or one not bound EINVAL.
func TestJoinMulticast(t *testing.T) {
	g := &groups{}
	a, _ := newPair(t, Config{Seed: 1, Groups: g}, Config{Seed: 2})
	id, err := a.cm.CreateID(PSUDP, qpstate.TypeUD, a.handler, nil)
	if err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddr("239.1.1.1")
	if _, err := id.JoinMulticast(group, false, nil); !errorsIs(err, unix.EINVAL) {
		t.Fatalf("join before bind: %v, want EINVAL", err)
	}
	if err := id.Bind(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	m, err := id.JoinMulticast(group, false, "cookie")
	if err != nil {
		t.Fatal(err)
	}
	ev := a.want(EventMulticastJoin, 0)
	if ev.Multicast != m || m.Cookie() != "cookie" || ev.UD.QPNum != 0xFFFFFF || ev.UD.QKey != UDPQKey ||
		ev.UD.AH.GRH.DGID != emu.GIDFromAddr(group) || ev.UD.AH.GRH.HopLimit != 64 {
		t.Fatalf("MULTICAST_JOIN %+v", ev.UD)
	}
	so, err := id.JoinMulticast(netip.MustParseAddr("239.1.1.2"), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.want(EventMulticastJoin, 0)
	if _, err := id.JoinMulticast(netip.MustParseAddr("ff0e::1"), false, nil); !errorsIs(err, ENOTSUPP) {
		t.Fatalf("IPv6 group: %v, want ENOTSUPP", err)
	}
	tcp := a.id(PSTCP)
	if err := tcp.Bind(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := tcp.JoinMulticast(group, false, nil); !errorsIs(err, unix.EINVAL) {
		t.Fatalf("join on a TCP ID: %v, want EINVAL", err)
	}
	if err := id.LeaveMulticast(so); err != nil {
		t.Fatal(err)
	}
	if err := id.LeaveMulticast(so); !errorsIs(err, unix.EADDRNOTAVAIL) {
		t.Fatalf("second leave: %v, want EADDRNOTAVAIL", err)
	}
	id.Destroy()
	g.mu.Lock()
	defer g.mu.Unlock()
	if want := []string{"join 239.1.1.1", "leave 239.1.1.1"}; !slices.Equal(g.log, want) {
		t.Fatalf("link joins %q, want %q", g.log, want)
	}
}

// TestTimersAsLinux612: the REQ carries the ACK timeout of Linux 6.12's
// RoCE path (packet life time 16, rxe's CA ACK delay 15: 17, which a 6.12
// peer sends too), both QPs get it as their timeout, and the timewait
// follows it (2^(17−8) = 512 ms on both sides, as measured against a 6.12
// peer) or, on the passive side, whatever the peer's REQ said (19 from a
// Linux 6.1 peer: 2048 ms).
func TestTimersAsLinux612(t *testing.T) {
	var mu sync.Mutex
	var req mad.MAD
	tap := func(m mad.MAD) bool {
		if m.AttributeID() == mad.AttrREQ {
			mu.Lock()
			req = append(mad.MAD(nil), m...)
			mu.Unlock()
		}
		return false
	}
	a, b := newPair(t, Config{Seed: 1, DropTx: tap}, Config{Seed: 2})
	ca, cb := established(t, a, b, 7174)
	mu.Lock()
	f := mad.REQ(req).Fields()
	mu.Unlock()
	if f.PrimaryLocalACKTimeout != 17 || f.LocalCMResponseTimeout != 20 || f.RemoteCMResponseTimeout != 20 || f.MaxCMRetries != 15 {
		t.Errorf("REQ ACK timeout %d, CM response timeouts %d %d, retries %d; want 17, 20, 20, 15",
			f.PrimaryLocalACKTimeout, f.LocalCMResponseTimeout, f.RemoteCMResponseTimeout, f.MaxCMRetries)
	}
	if DefaultREQTimeout != 2*cmTimeout(packetLifeTime)+cmTimeout(cmResponseTimeout) {
		t.Errorf("REQ timeout %v", DefaultREQTimeout)
	}
	for _, id := range []*ID{ca, cb} {
		a, _, err := id.InitQPAttr(qpstate.StateRTS)
		if err != nil || a.Timeout != 17 {
			t.Errorf("QP timeout %d (%v), want 17", a.Timeout, err)
		}
		id.cm.mu.Lock()
		tw := id.timewaitLocked()
		id.cm.mu.Unlock()
		if tw != 512*time.Millisecond {
			t.Errorf("timewait %v, want 512ms", tw)
		}
	}
	b.cm.mu.Lock()
	cb.req[119] = 19 << 3
	tw := cb.timewaitLocked()
	b.cm.mu.Unlock()
	if tw != 2048*time.Millisecond {
		t.Errorf("timewait after a REQ with ACK timeout 19: %v, want 2048ms", tw)
	}
	b.cm.mu.Lock()
	cb.req[119] = 17 << 3
	b.cm.mu.Unlock()
	start := time.Now()
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(EventDisconnected, 0)
	if err := cb.Disconnect(); err != nil {
		t.Fatal(err)
	}
	a.want(EventDisconnected, 0)
	a.want(EventTimewaitExit, 0)
	b.want(EventTimewaitExit, 0)
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("TIMEWAIT_EXIT %v after the disconnect, want 512 ms", d)
	}
}

// TestTransactionIDsAsKernel: the REQ's and each side's DREQ's TIDs are
// cm_form_tid's: the CM agent's hi_tid above the sender's communication
// ID as a little-endian kernel widens it (a Linux 6.12 REQ with Local
// Communication ID 0x21c6aa84 carries TID 0x0000000284aac621).
func TestTransactionIDsAsKernel(t *testing.T) {
	if got := formTID(0x21c6aa84); got != 0x0000000284aac621 {
		t.Fatalf("formTID(0x21c6aa84) = %#016x", got)
	}
	var mu sync.Mutex
	sent := map[mad.AttrID][]mad.MAD{}
	tap := func(m mad.MAD) bool {
		mu.Lock()
		sent[m.AttributeID()] = append(sent[m.AttributeID()], append(mad.MAD(nil), m...))
		mu.Unlock()
		return false
	}
	a, b := newPair(t, Config{Seed: 1, DropTx: tap, Timewait: 10 * time.Millisecond}, Config{Seed: 2, DropTx: tap, Timewait: 10 * time.Millisecond})
	ca, cb := established(t, a, b, 7174)
	if err := cb.Disconnect(); err != nil { // the passive side's DREQ
		t.Fatal(err)
	}
	a.want(EventDisconnected, 0)
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(EventDisconnected, 0)
	mu.Lock()
	defer mu.Unlock()
	req, rep, dreq := sent[mad.AttrREQ], sent[mad.AttrREP], sent[mad.AttrDREQ]
	if len(req) != 1 || len(rep) != 1 || len(dreq) != 1 {
		t.Fatalf("%d REQs, %d REPs, %d DREQs", len(req), len(rep), len(dreq))
	}
	if tid := req[0].TransactionID(); tid != formTID(req[0].LocalCommID()) || rep[0].TransactionID() != tid {
		t.Errorf("REQ TID %#x for communication ID %#x, REP TID %#x", tid, req[0].LocalCommID(), rep[0].TransactionID())
	}
	if tid := dreq[0].TransactionID(); tid != formTID(rep[0].LocalCommID()) {
		t.Errorf("passive DREQ TID %#x, want %#x", tid, formTID(rep[0].LocalCommID()))
	}
}
