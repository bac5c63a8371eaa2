package cma

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// rpingParam is what librdmacm's rping connects with.
var rpingParam = ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// conn is one side of a connection made by connected: its ID and QP.
type conn struct {
	id *ID
	qp *emu.QP
}

// listen makes b listen on the IPv4 wildcard at port.
func (s *side) listen(port uint16) *ID {
	s.t.Helper()
	l := s.id(PSTCP)
	if err := l.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), port)); err != nil {
		s.t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		s.t.Fatal(err)
	}
	return l
}

// connected runs librdmacm's sequence between a (active, connecting
// with pa) and a listener of b at port (accepting with pb), each QP moved
// with the attributes InitQPAttr gives, and returns both sides.
func connected(t *testing.T, a, b *side, port uint16, pa, pb ConnParam) (ca, cb conn) {
	t.Helper()
	b.listen(port)
	ca = conn{a.resolved(b.ip, port), a.qp()}
	modify(t, ca.id, ca.qp, qpstate.StateInit)
	pa.QPNum = ca.qp.QPNum()
	if err := ca.id.Connect(&pa); err != nil {
		t.Fatal(err)
	}
	cb = conn{b.want(EventConnectRequest, 0).ID, b.qp()}
	modify(t, cb.id, cb.qp, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS)
	pb.QPNum = cb.qp.QPNum()
	if err := cb.id.Accept(&pb); err != nil {
		t.Fatal(err)
	}
	a.want(EventConnectResponse, 0)
	modify(t, ca.id, ca.qp, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS)
	if err := ca.id.Accept(nil); err != nil {
		t.Fatal(err)
	}
	b.want(EventEstablished, 0)
	return ca, cb
}

func qpAttr(t *testing.T, qp *emu.QP) qpstate.Attr {
	t.Helper()
	a, _, err := qp.Query(qpstate.AttrState)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// traffic: from SENDs a message to to, and to RDMA READs it back from
// from's buffer.
func traffic(t *testing.T, from, to *side, fq, tq *emu.QP) {
	t.Helper()
	const n = 64
	fa, fb := from.dev.Memory().Alloc(n)
	ta, tb := to.dev.Memory().Alloc(n)
	acc := ib.AccessLocalWrite | ib.AccessRemoteRead | ib.AccessRemoteWrite
	fmr, err := from.pd.RegUserMR(fa, n, fa, acc)
	if err != nil {
		t.Fatal(err)
	}
	tmr, err := to.pd.RegUserMR(ta, n, ta, acc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fb {
		fb[i] = byte(i + 1)
	}
	if _, err := tq.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{{Addr: ta, Length: n, LKey: tmr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fq.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: fa, Length: n, LKey: fmr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	pollOne(t, to.cq, emu.WCRecv)
	pollOne(t, from.cq, emu.WCSend)
	if !bytes.Equal(tb, fb) {
		t.Fatalf("SEND moved % x", tb[:8])
	}
	clear(tb)
	if _, err := tq.PostSend([]emu.SendWR{{WRID: 3, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: ta, Length: n, LKey: tmr.LKey()}}, RemoteAddr: fa, RKey: fmr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	pollOne(t, to.cq, emu.WCRDMARead)
	if !bytes.Equal(tb, fb) {
		t.Fatalf("READ moved % x", tb[:8])
	}
}

func pollOne(t *testing.T, cq *emu.CQ, op emu.WCOpcode) {
	t.Helper()
	wc := make([]emu.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cq.Poll(wc) == 1 {
			if wc[0].Status != emu.WCSuccess || wc[0].Opcode != op {
				t.Fatalf("completion %v %v, want %v success", wc[0].Opcode, wc[0].Status, op)
			}
			return
		}
	}
	t.Fatalf("no %v completion", op)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// txLog records each MAD a CM sends with the time on clk, and drops the
// first drop[attr] copies of each attribute (-1: all of them).
type txLog struct {
	mu   sync.Mutex
	clk  clock.Clock
	sent []mad.MAD
	at   map[mad.AttrID][]time.Duration
	drop map[mad.AttrID]int
}

func newTxLog(clk clock.Clock, drop map[mad.AttrID]int) *txLog {
	if drop == nil {
		drop = map[mad.AttrID]int{}
	}
	return &txLog{clk: clk, at: map[mad.AttrID][]time.Duration{}, drop: drop}
}

// record is a Config.DropTx.
func (l *txLog) record(m mad.MAD) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := m.AttributeID()
	l.sent = append(l.sent, append(mad.MAD(nil), m...))
	l.at[a] = append(l.at[a], l.clk.Now().Sub(time.Unix(0, 0)))
	switch n := l.drop[a]; {
	case n < 0:
		return true
	case n > 0:
		l.drop[a]--
		return true
	}
	return false
}

func (l *txLog) times(a mad.AttrID) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.at[a]...)
}

// count returns how many MADs were sent.
func (l *txLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sent)
}

// last returns the last MAD of attribute a sent, or nil.
func (l *txLog) last(a mad.AttrID) mad.MAD {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.sent) - 1; i >= 0; i-- {
		if l.sent[i].AttributeID() == a {
			return l.sent[i]
		}
	}
	return nil
}

// TestConnectQPAttributes: the attributes InitQPAttr gives each side (as
// cm_init_qp_rtr_attr and cm_init_qp_rts_attr do) fit each other: the QP
// numbers and PSNs crossed as between two kernel rxe (the REQ's Starting
// PSN is what the active side receives with, the REP's what the passive
// side does), the depths each side offered, the REQ's retry count on
// both sides, each side's RNR retry count from the other's message,
// timeout 17 (the packet life time + 1), path MTU 4096; then data moves
// both ways, RDMA READ included.
func TestConnectQPAttributes(t *testing.T) {
	clk := clock.Real{}
	for i, c := range []struct {
		name   string
		pa, pb ConnParam
	}{
		{"rping", rpingParam, rpingParam},
		{"asymmetric", ConnParam{ResponderResources: 4, InitiatorDepth: 2, RetryCount: 3, RNRRetryCount: 5, PrivateData: []byte("hello")},
			ConnParam{ResponderResources: 2, InitiatorDepth: 4, RNRRetryCount: 6, PrivateData: []byte("world")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			la, lb := newTxLog(clk, nil), newTxLog(clk, nil)
			a, b := newPair(t, Config{Seed: 11, DropTx: la.record}, Config{Seed: 12, DropTx: lb.record})
			ca, cb := connected(t, a, b, uint16(7000+i), c.pa, c.pb)
			qa, qb := qpAttr(t, ca.qp), qpAttr(t, cb.qp)
			if qa.QPState != qpstate.StateRTS || qb.QPState != qpstate.StateRTS {
				t.Fatalf("QP states %v %v", qa.QPState, qb.QPState)
			}
			if qa.DestQPNum != cb.qp.QPNum() || qb.DestQPNum != ca.qp.QPNum() {
				t.Errorf("dest QPNs %#x %#x, QPNs %#x %#x", qa.DestQPNum, qb.DestQPNum, ca.qp.QPNum(), cb.qp.QPNum())
			}
			req, rep := mad.REQ(la.last(mad.AttrREQ)), mad.REP(lb.last(mad.AttrREP))
			if qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN || req.StartingPSN() != qa.RQPSN || rep.StartingPSN() != qb.RQPSN {
				t.Errorf("PSNs: a sq %#x rq %#x, b sq %#x rq %#x; REQ %#x, REP %#x",
					qa.SQPSN, qa.RQPSN, qb.SQPSN, qb.RQPSN, req.StartingPSN(), rep.StartingPSN())
			}
			// The active side may have as many READs outstanding at b as
			// b's REP grants, and b as many at a as a's REQ offers.
			if qa.MaxRdAtomic != c.pb.ResponderResources || qb.MaxDestRdAtomic != c.pa.InitiatorDepth ||
				qb.MaxRdAtomic != c.pa.ResponderResources || qa.MaxDestRdAtomic != c.pb.InitiatorDepth {
				t.Errorf("depths: a rd %d dest %d, b rd %d dest %d", qa.MaxRdAtomic, qa.MaxDestRdAtomic, qb.MaxRdAtomic, qb.MaxDestRdAtomic)
			}
			if qa.RetryCnt != c.pa.RetryCount || qb.RetryCnt != c.pa.RetryCount || qa.RNRRetry != c.pb.RNRRetryCount || qb.RNRRetry != c.pa.RNRRetryCount {
				t.Errorf("retries: a %d/%d b %d/%d", qa.RetryCnt, qa.RNRRetry, qb.RetryCnt, qb.RNRRetry)
			}
			if qa.Timeout != packetLifeTime+1 || qb.Timeout != packetLifeTime+1 || qa.PathMTU != ib.MTU4096 || qb.PathMTU != ib.MTU4096 {
				t.Errorf("timeouts %d %d, MTUs %v %v", qa.Timeout, qb.Timeout, qa.PathMTU, qb.PathMTU)
			}
			traffic(t, a, b, ca.qp, cb.qp)
			traffic(t, b, a, cb.qp, ca.qp)
		})
	}
}

// TestRetransmitLost drops the first copies of REQ, REP, RTU and DREQ
// (virtual time fires the timers) and checks that the connection still
// comes up and goes down: a lost REP is sent again on the REP timer (the
// REQ's duplicates are dropped meanwhile), a lost RTU is answered from
// the REP's retransmission, a lost DREQ is sent again.
func TestRetransmitLost(t *testing.T) {
	for _, c := range []struct {
		name string
		drop map[mad.AttrID]int
		// copies sent at least, the dropped ones included (virtual
		// time runs on while the test waits, so a slow run may resend
		// more)
		sent map[mad.AttrID]int
	}{
		{"REQ lost twice", map[mad.AttrID]int{mad.AttrREQ: 2}, map[mad.AttrID]int{mad.AttrREQ: 3, mad.AttrREP: 1, mad.AttrRTU: 1}},
		{"REP lost", map[mad.AttrID]int{mad.AttrREP: 1}, map[mad.AttrID]int{mad.AttrREQ: 1, mad.AttrREP: 2, mad.AttrRTU: 1}},
		{"RTU lost", map[mad.AttrID]int{mad.AttrRTU: 1}, map[mad.AttrID]int{mad.AttrREQ: 1, mad.AttrREP: 2, mad.AttrRTU: 2}},
		{"DREQ lost", map[mad.AttrID]int{mad.AttrDREQ: 1}, map[mad.AttrID]int{mad.AttrDREQ: 2, mad.AttrDREP: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(time.Unix(0, 0))
			log := newTxLog(clk, c.drop)
			cfg := Config{Clock: clk, DropTx: log.record}
			cfgA, cfgB := cfg, cfg
			cfgA.Seed, cfgB.Seed = 13, 14
			a, b := newPair(t, cfgA, cfgB)
			stop := make(chan struct{})
			defer close(stop)
			go func() { // virtual time passes while anything waits
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
						clk.AdvanceToNext()
					}
				}
			}()
			ca, cb := connected(t, a, b, 7300, rpingParam, rpingParam)
			traffic(t, a, b, ca.qp, cb.qp)
			if err := ca.id.Disconnect(); err != nil {
				t.Fatal(err)
			}
			b.want(EventDisconnected, 0)
			if err := cb.id.Disconnect(); err != nil {
				t.Fatal(err)
			}
			a.want(EventDisconnected, 0)
			for attr, n := range c.sent {
				if got := len(log.times(attr)); got < n {
					t.Errorf("%v sent %d times, want at least %d", attr, got, n)
				}
			}
		})
	}
}

// TestRequesterGivesUpREJ: the REJ an active ID destroyed in REQ_SENT
// sends, as cm_format_rej makes it there: the requester's communication
// ID, no remote ID, message "other", reason "timeout", an 8-byte ARI
// holding the requester's CA GUID (by which the passive side finds the
// request: TestDestroyWhileConnecting).
func TestRequesterGivesUpREJ(t *testing.T) {
	log := newTxLog(clock.Real{}, map[mad.AttrID]int{mad.AttrREQ: -1})
	a, b := newPair(t, Config{Seed: 15, DropTx: log.record}, Config{Seed: 16})
	ca := a.resolved(b.ip, 7951)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	ca.Destroy()
	m := log.last(mad.AttrREJ)
	if m == nil {
		t.Fatal("no REJ")
	}
	f := mad.REJ(m).Fields()
	if f.LocalCommID == 0 || f.RemoteCommID != 0 || f.MessageREJected != mad.MsgOther || f.Reason != mad.RejTimeout ||
		f.RejectInfoLength != 8 || binary.BigEndian.Uint64(f.ARI) != a.cm.guid || m.TransactionID() != log.last(mad.AttrREQ).TransactionID() {
		t.Errorf("REJ %+v", f)
	}
}

// testREQ builds a REQ from a's CA to b's port with communication ID id
// from QP qpn, as Connect makes one.
func testREQ(a, b *side, id, qpn uint32, port uint16) mad.MAD {
	pd := make([]byte, mad.REQPrivateDataSize)
	mad.CMAHeader(pd).Encode(&mad.CMAHeaderFields{Version: mad.CMAVersion, SrcPort: 0xc001, Src: a.ip, Dst: b.ip})
	m := mad.NewCM(mad.AttrREQ, uint64(id))
	mad.REQ(m).Encode(&mad.REQFields{LocalCommID: id, ServiceID: serviceID(PSTCP, port), LocalCAGUID: a.cm.guid,
		LocalQPN: qpn, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		StartingPSN: id & 0xffffff, LocalCMResponseTimeout: 20, RetryCount: 7, PartitionKey: 0xffff, PathMTU: 3,
		RNRRetryCount: 7, MaxCMRetries: 15, PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID: emu.GIDFromAddr(a.ip), PrimaryRemoteGID: emu.GIDFromAddr(b.ip), PrimaryHopLimit: 64,
		PrimaryLocalACKTimeout: 19, PrivateData: pd})
	return m
}

// TestStaleConnection: a REQ from a QP (CA GUID and QPN) that still has
// an established connection here is stale (cm_match_req): REJ "stale
// connection" with no local ID, and the old connection gets a DREQ
// (DISCONNECTED there; the peer consumer's rdma_disconnect answers it
// with the DREP, DISCONNECTED here). The listener never sees the
// request.
func TestStaleConnection(t *testing.T) {
	lb := newTxLog(clock.Real{}, nil)
	a, b := newPair(t, Config{Seed: 17}, Config{Seed: 18, DropTx: lb.record})
	ca, _ := connected(t, a, b, 7960, rpingParam, rpingParam)
	b.listen(7961)
	a.cm.send(emu.GIDFromAddr(b.ip), testREQ(a, b, 0x5151, ca.qp.QPNum(), 7961))
	a.want(EventDisconnected, 0)               // the DREQ
	if err := ca.id.Disconnect(); err != nil { // the DREP
		t.Fatal(err)
	}
	b.want(EventDisconnected, 0)
	rej := lb.last(mad.AttrREJ)
	if rej == nil {
		t.Fatal("no REJ")
	}
	if f := mad.REJ(rej).Fields(); f.Reason != mad.RejStaleConn || f.RemoteCommID != 0x5151 || f.LocalCommID != 0 ||
		f.MessageREJected != mad.MsgREQ || rej.TransactionID() != 0x5151 {
		t.Errorf("REJ %+v", f)
	}
	if len(lb.times(mad.AttrDREQ)) != 1 {
		t.Errorf("%d DREQs sent, want 1", len(lb.times(mad.AttrDREQ)))
	}
	select {
	case ev := <-b.evs:
		t.Errorf("event %v after the stale REQ", ev.Type)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestReconnectFromTheSameQPN: once a connection is over (the peer
// disconnected it and this side is in timewait), a REQ from the same QP
// is a new connection, not a stale one.
func TestReconnectFromTheSameQPN(t *testing.T) {
	lb := newTxLog(clock.Real{}, nil)
	a, b := newPair(t, Config{Seed: 19}, Config{Seed: 20, DropTx: lb.record})
	ca, cb := connected(t, a, b, 7970, rpingParam, rpingParam)
	if err := ca.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(EventDisconnected, 0)
	if err := cb.id.Disconnect(); err != nil { // the DREP: b is in timewait
		t.Fatal(err)
	}
	a.want(EventDisconnected, 0)
	b.listen(7971)
	a.cm.send(emu.GIDFromAddr(b.ip), testREQ(a, b, 0x6161, ca.qp.QPNum(), 7971))
	req := b.want(EventConnectRequest, 0)
	if in := req.ID.Info(); in.Dst.Addr() != a.ip || req.Conn.QPNum != ca.qp.QPNum() {
		t.Errorf("request from %v QPN %#x", in.Dst, req.Conn.QPNum)
	}
	if n := len(lb.times(mad.AttrREJ)); n != 0 {
		t.Errorf("%d REJs sent", n)
	}
}

// checkEvery fails t unless ts are n sends, every step apart.
func checkEvery(t *testing.T, what string, ts []time.Duration, n int, step time.Duration) {
	t.Helper()
	if len(ts) != n {
		t.Fatalf("%s sent %d times, want %d: %v", what, len(ts), n, ts)
	}
	for i := 1; i < n; i++ {
		if d := ts[i] - ts[i-1]; d != step {
			t.Errorf("%s %d went out %v after the one before, want %v", what, i, d, step)
		}
	}
}

// TestKernelTimers: with the kernel's times, an unanswered REQ goes out
// 16 times, every 4608 ms (twice the packet life time of 16 plus the
// response timeout of 20), then the consumer gets UNREACHABLE −ETIMEDOUT;
// an unanswered REP every 4096 ms (the REQ's Local CM Response Timeout),
// as many times as the REQ's Max CM Retries allow, then the passive
// consumer gets UNREACHABLE −ETIMEDOUT too. (The active side's REQ
// copies meanwhile are duplicates, dropped.)
func TestKernelTimers(t *testing.T) {
	if cmTimeout(20) != 4096*time.Millisecond || cmTimeout(3) != time.Millisecond || cmTimeout(24) != 65536*time.Millisecond {
		t.Fatalf("cmTimeout(20) = %v", cmTimeout(20))
	}
	advance := func(clk *clock.Manual) func() {
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
					clk.AdvanceToNext()
				}
			}
		}()
		return func() { close(stop) }
	}
	t.Run("REQ", func(t *testing.T) {
		clk := clock.NewManual(time.Unix(0, 0))
		log := newTxLog(clk, map[mad.AttrID]int{mad.AttrREQ: -1})
		a, b := newPair(t, Config{Seed: 21, Clock: clk, DropTx: log.record}, Config{Seed: 22})
		ca := a.resolved(b.ip, 7800)
		if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
			t.Fatal(err)
		}
		defer advance(clk)()
		a.want(EventUnreachable, -int32(unix.ETIMEDOUT))
		checkEvery(t, "REQ", log.times(mad.AttrREQ), 16, DefaultREQTimeout)
	})
	t.Run("REP", func(t *testing.T) {
		clk := clock.NewManual(time.Unix(0, 0))
		log := newTxLog(clk, map[mad.AttrID]int{mad.AttrREP: -1})
		a, b := newPair(t, Config{Seed: 23, Clock: clk}, Config{Seed: 24, Clock: clk, DropTx: log.record})
		b.listen(7801)
		ca := a.resolved(b.ip, 7801)
		if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
			t.Fatal(err)
		}
		// The consumer accepts before any time passes: the REP is out
		// before the REQ's first retransmission.
		cb := b.want(EventConnectRequest, 0).ID
		if err := cb.Accept(&ConnParam{QPNum: b.qp().QPNum()}); err != nil {
			t.Fatal(err)
		}
		defer advance(clk)()
		b.want(EventUnreachable, -int32(unix.ETIMEDOUT))
		checkEvery(t, "REP", log.times(mad.AttrREP), 16, DefaultREPTimeout)
	})
}

// TestMRA: a consumer slow to accept. The active side's REQ times out
// after 4608 ms and goes out again; the passive side, still holding the
// first copy for its consumer, answers the duplicate with an MRA (service
// timeout 24); the active side then waits 2^(24−8) + 2^(17−8) ms (its
// path's ACK timeout, the packet life time + 1) before its next copy, and
// the connection comes up when the consumer accepts.
func TestMRA(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	la, lb := newTxLog(clk, nil), newTxLog(clk, nil)
	a, b := newPair(t, Config{Seed: 25, Clock: clk, DropTx: la.record}, Config{Seed: 26, Clock: clk, DropTx: lb.record})
	b.listen(7802)
	ca := a.resolved(b.ip, 7802)
	qa := a.qp()
	modify(t, ca, qa, qpstate.StateInit)
	p := rpingParam
	p.QPNum = qa.QPNum()
	if err := ca.Connect(&p); err != nil {
		t.Fatal(err)
	}
	cb := b.want(EventConnectRequest, 0).ID
	clk.AdvanceToNext() // 4608 ms: the REQ again
	waitFor(t, "the MRA", func() bool { return len(lb.times(mad.AttrMRA)) == 1 })
	if f := mad.MRA(lb.last(mad.AttrMRA)).Fields(); f.MessageMRAed != mad.MsgREQ || f.ServiceTimeout != mraServiceTimeout {
		t.Errorf("MRA %+v", f)
	}
	waitFor(t, "the REQ timer", func() bool {
		d, ok := clk.NextDeadline()
		return ok && d.Sub(time.Unix(0, 0)) == DefaultREQTimeout+65536*time.Millisecond+512*time.Millisecond
	})
	clk.AdvanceToNext()
	want := []time.Duration{0, DefaultREQTimeout, DefaultREQTimeout + 65536*time.Millisecond + 512*time.Millisecond}
	waitFor(t, "the third REQ", func() bool { return len(la.times(mad.AttrREQ)) == 3 })
	if got := la.times(mad.AttrREQ); got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("REQs at %v, want %v", got, want)
	}
	waitFor(t, "the second MRA", func() bool { return len(lb.times(mad.AttrMRA)) == 2 })
	qb := b.qp()
	modify(t, cb, qb, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS)
	if err := cb.Accept(&ConnParam{QPNum: qb.QPNum(), ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	a.want(EventConnectResponse, 0)
	modify(t, ca, qa, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS)
	if err := ca.Accept(nil); err != nil {
		t.Fatal(err)
	}
	b.want(EventEstablished, 0)
}

// TestStatelessReplies: a REP naming no REQ is dropped, as cm_rep_handler
// drops it; a DREQ for an unknown connection gets a DREP with the IDs
// swapped and its TID; a DREQ naming another QP is dropped while the
// connection stays up.
func TestStatelessReplies(t *testing.T) {
	lb := newTxLog(clock.Real{}, nil)
	a, b := newPair(t, Config{Seed: 27}, Config{Seed: 28, DropTx: lb.record})
	bgid := emu.GIDFromAddr(b.ip)
	r := mad.NewCM(mad.AttrREP, 0x78)
	mad.REP(r).Encode(&mad.REPFields{LocalCommID: 0x1111, RemoteCommID: 0x2222, LocalQPN: 0x33})
	a.cm.send(bgid, r)
	waitFor(t, "the REP", func() bool { return b.cm.Stats().Unmatched == 1 })
	d := mad.NewCM(mad.AttrDREQ, 0x7a)
	mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: 0x3333, RemoteCommID: 0x4444, RemoteQPN: 0x55})
	a.cm.send(bgid, d)
	waitFor(t, "the DREP", func() bool { return lb.last(mad.AttrDREP) != nil })
	drep := lb.last(mad.AttrDREP)
	if f := mad.DREP(drep).Fields(); drep.TransactionID() != 0x7a || f.LocalCommID != 0x4444 || f.RemoteCommID != 0x3333 {
		t.Errorf("DREP %+v tid %#x", f, drep.TransactionID())
	}
	if n := lb.count(); n != 1 {
		t.Errorf("%d MADs sent, want the DREP only", n)
	}
	ca, cb := connected(t, a, b, 7700, rpingParam, rpingParam)
	d = mad.NewCM(mad.AttrDREQ, 0x79)
	mad.DREQ(d).Encode(&mad.DREQFields{LocalCommID: ca.id.localID, RemoteCommID: cb.id.localID, RemoteQPN: cb.qp.QPNum() + 1})
	before := b.cm.Stats().Received
	a.cm.send(bgid, d)
	waitFor(t, "the DREQ", func() bool { return b.cm.Stats().Received == before+1 })
	if n := len(lb.times(mad.AttrDREP)); n != 1 {
		t.Errorf("%d DREPs sent, want 1", n)
	}
	traffic(t, a, b, ca.qp, cb.qp)
	select {
	case ev := <-b.evs:
		t.Errorf("event %v after a DREQ for another QP", ev.Type)
	default:
	}
}

// TestPrivateDataLimits: Connect, Accept and Reject refuse more private
// data than the kernel's cm sends (56 bytes in a REQ after the rdma_cm
// header, 196 in a REP, 148 in a REJ) with EINVAL, nothing sent; at the
// limits the data arrives whole.
func TestPrivateDataLimits(t *testing.T) {
	la := newTxLog(clock.Real{}, nil)
	a, b := newPair(t, Config{Seed: 29, DropTx: la.record}, Config{Seed: 30})
	b.listen(7900)
	ca := a.resolved(b.ip, 7900)
	if err := ca.Connect(&ConnParam{QPNum: 1, PrivateData: make([]byte, 57)}); !errorsIs(err, unix.EINVAL) {
		t.Errorf("Connect with 57 bytes: %v, want EINVAL", err)
	}
	if n := la.count(); n != 0 {
		t.Errorf("%d MADs sent", n)
	}
	pa, pb := bytes.Repeat([]byte{0xa5}, 56), bytes.Repeat([]byte{0x5a}, 196)
	if err := ca.Connect(&ConnParam{QPNum: 1, PrivateData: pa}); err != nil {
		t.Fatal(err)
	}
	req := b.want(EventConnectRequest, 0)
	if !bytes.Equal(req.Conn.PrivateData, pa) {
		t.Errorf("REQ private data %x", req.Conn.PrivateData)
	}
	if err := req.ID.Reject(make([]byte, 149), 0); !errorsIs(err, unix.EINVAL) {
		t.Errorf("Reject with 149 bytes: %v, want EINVAL", err)
	}
	if err := req.ID.Accept(&ConnParam{QPNum: 2, PrivateData: pb}); err != nil {
		t.Fatal(err)
	}
	if ev := a.want(EventConnectResponse, 0); !bytes.Equal(ev.Conn.PrivateData, pb) {
		t.Errorf("REP private data %x", ev.Conn.PrivateData)
	}
	// A REJ at its limit, from a second request.
	cc := a.resolved(b.ip, 7900)
	if err := cc.Connect(&ConnParam{QPNum: 3}); err != nil {
		t.Fatal(err)
	}
	pr := bytes.Repeat([]byte{0x3c}, 148)
	if err := b.want(EventConnectRequest, 0).ID.Reject(pr, 0); err != nil {
		t.Fatal(err)
	}
	if ev := a.want(EventRejected, int32(mad.RejConsumerDefined)); !bytes.Equal(ev.Conn.PrivateData, pr) {
		t.Errorf("REJ private data %x", ev.Conn.PrivateData)
	}
}

// TestListenedPortGoesAway: a port has one listener (EADDRNOTAVAIL for a
// second wildcard, cma_check_port); once the listener is destroyed, a REQ for the port gets REJ
// "invalid service ID" again.
func TestListenedPortGoesAway(t *testing.T) {
	a, b := newPair(t, Config{Seed: 31}, Config{Seed: 32})
	l := b.listen(7400)
	if err := b.id(PSTCP).Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 7400)); !errorsIs(err, unix.EADDRNOTAVAIL) {
		t.Errorf("second bind: %v, want EADDRNOTAVAIL", err)
	}
	l.Destroy()
	ca := a.resolved(b.ip, 7400)
	if err := ca.Connect(&ConnParam{QPNum: a.qp().QPNum()}); err != nil {
		t.Fatal(err)
	}
	a.want(EventRejected, int32(mad.RejInvalidServiceID))
}
