package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// side is one device of a loopback pair with a CM, a PD, a CQ and an RC
// QP in RESET.
type side struct {
	dev *emu.Device
	cm  *CM
	pd  *emu.PD
	cq  *emu.CQ
	qp  *emu.QP
}

func newPair(t testing.TB, ca, cb Config) (*workload.Loopback, *side, *side) {
	t.Helper()
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	mk := func(dev *emu.Device, cfg Config) *side {
		cfg.Dev = dev
		cm, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		s := &side{dev: dev, cm: cm}
		if s.pd, err = dev.AllocPD(0); err != nil {
			t.Fatal(err)
		}
		if s.cq, err = dev.CreateCQ(emu.CQInitAttr{CQE: 16}); err != nil {
			t.Fatal(err)
		}
		if s.qp, err = s.pd.CreateQP(&emu.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: qpstate.TypeRC,
			Cap: qpstate.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return lb, mk(lb.A.Dev, ca), mk(lb.B.Dev, cb)
}

var rpingParam = Param{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// connect runs Connect on a and Listen+Accept on b concurrently.
func connect(t *testing.T, lb *workload.Loopback, a, b *side, port uint16, pa, pb Param) (ca, cb *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := b.cm.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	var errB error
	var req *Request
	wg.Go(func() {
		req, errB = l.Accept(ctx)
		if errB == nil {
			cb, errB = req.Accept(ctx, b.qp, pb)
		}
	})
	ca, errA := a.cm.Connect(ctx, a.qp, lb.B.IP, port, pa)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("connect: %v; accept: %v", errA, errB)
	}
	if req.Src.Addr() != lb.A.IP || req.Src.Port() < 0xc000 {
		t.Errorf("request from %v, want %v:ephemeral", req.Src, lb.A.IP)
	}
	return ca, cb
}

func qpAttr(t *testing.T, qp *emu.QP) qpstate.Attr {
	t.Helper()
	a, _, err := qp.Query(qpstate.AttrState | qpstate.AttrDestQPN | qpstate.AttrSQPSN | qpstate.AttrRQPSN |
		qpstate.AttrMaxQPRdAtomic | qpstate.AttrMaxDestRdAtomic | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry |
		qpstate.AttrTimeout | qpstate.AttrPathMTU | qpstate.AttrAV)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestConnect connects two devices and checks the QP attributes the CM
// set against each other (as cm_init_qp_*_attr gives them), then moves
// data both ways over the connection: a SEND each way and an RDMA READ.
func TestConnect(t *testing.T) {
	cases := []struct {
		name   string
		pa, pb Param
		depth  [2]uint8 // a's max_rd_atomic, b's max_rd_atomic
	}{
		{"rping", rpingParam, rpingParam, [2]uint8{1, 1}},
		{"depths cut to the peer's", Param{ResponderResources: 4, InitiatorDepth: 2, RetryCount: 3, RNRRetryCount: 5, PrivateData: []byte("hello")},
			Param{ResponderResources: 8, InitiatorDepth: 8, RNRRetryCount: 6, PrivateData: []byte("world")}, [2]uint8{2, 4}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var req, rep mad.MAD
			record := func(m mad.MAD) bool {
				mu.Lock()
				defer mu.Unlock()
				switch m.AttributeID() {
				case mad.AttrREQ:
					req = m
				case mad.AttrREP:
					rep = m
				}
				return false
			}
			lb, a, b := newPair(t, Config{Seed: 1, dropTx: record}, Config{Seed: 2, dropTx: record})
			ca, cb := connect(t, lb, a, b, uint16(7000+i), c.pa, c.pb)
			if ca.State() != StateEstablished || cb.State() != StateEstablished {
				t.Fatalf("states %v %v", ca.State(), cb.State())
			}
			qa, qb := qpAttr(t, a.qp), qpAttr(t, b.qp)
			if qa.QPState != qpstate.StateRTS || qb.QPState != qpstate.StateRTS {
				t.Fatalf("QP states %v %v", qa.QPState, qb.QPState)
			}
			if qa.DestQPNum != b.qp.QPNum() || qb.DestQPNum != a.qp.QPNum() || ca.RemoteQPN() != b.qp.QPNum() {
				t.Errorf("dest QPNs %#x %#x, QPNs %#x %#x", qa.DestQPNum, qb.DestQPNum, a.qp.QPNum(), b.qp.QPNum())
			}
			if qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN {
				t.Errorf("PSNs: a sq %#x rq %#x, b sq %#x rq %#x", qa.SQPSN, qa.RQPSN, qb.SQPSN, qb.RQPSN)
			}
			// As between two kernel rxe (mad/testdata/rping-rxe.pcap):
			// the REQ's Starting PSN is what the active side receives
			// with, the REP's what the passive side does.
			mu.Lock()
			if REQ := mad.REQ(req); REQ.StartingPSN() != qa.RQPSN || mad.REP(rep).StartingPSN() != qb.RQPSN {
				t.Errorf("REQ PSN %#x, REP PSN %#x; a rq %#x, b rq %#x", REQ.StartingPSN(), mad.REP(rep).StartingPSN(), qa.RQPSN, qb.RQPSN)
			}
			mu.Unlock()
			if qa.MaxRdAtomic != c.depth[0] || qb.MaxRdAtomic != c.depth[1] || qa.MaxDestRdAtomic != qb.MaxRdAtomic || qb.MaxDestRdAtomic != qa.MaxRdAtomic {
				t.Errorf("depths: a rd %d dest %d, b rd %d dest %d, want a %d b %d", qa.MaxRdAtomic, qa.MaxDestRdAtomic, qb.MaxRdAtomic, qb.MaxDestRdAtomic, c.depth[0], c.depth[1])
			}
			if qa.RetryCnt != c.pa.RetryCount || qb.RetryCnt != c.pa.RetryCount || qa.RNRRetry != c.pb.RNRRetryCount || qb.RNRRetry != c.pa.RNRRetryCount {
				t.Errorf("retries: a %d/%d b %d/%d", qa.RetryCnt, qa.RNRRetry, qb.RetryCnt, qb.RNRRetry)
			}
			if qa.Timeout != packetLifeTime+1 || qa.PathMTU != ib.MTU4096 || qb.PathMTU != ib.MTU4096 {
				t.Errorf("timeout %d, MTUs %v %v", qa.Timeout, qa.PathMTU, qb.PathMTU)
			}
			if pd := ca.PeerParam().PrivateData; !bytes.HasPrefix(pd, c.pb.PrivateData) {
				t.Errorf("REP private data %q", pd[:8])
			}
			if pd := cb.PeerParam().PrivateData; !bytes.HasPrefix(pd, c.pa.PrivateData) || len(pd) != mad.REQPrivateDataSize-mad.CMAHeaderSize {
				t.Errorf("REQ private data %q (%d bytes)", pd[:8], len(pd))
			}
			traffic(t, a, b)
			traffic(t, b, a)
		})
	}
}

// traffic: from SENDs a message to to, and to RDMA READs it back from
// from's buffer.
func traffic(t *testing.T, from, to *side) {
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
	if _, err := to.qp.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{{Addr: ta, Length: n, LKey: tmr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := from.qp.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: fa, Length: n, LKey: fmr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	pollOne(t, to.cq, emu.WCRecv)
	pollOne(t, from.cq, emu.WCSend)
	if !bytes.Equal(tb, fb) {
		t.Fatalf("SEND moved % x", tb[:8])
	}
	clear(tb)
	if _, err := to.qp.PostSend([]emu.SendWR{{WRID: 3, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
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
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cq.Poll(wc) == 1 {
			if wc[0].Status != emu.WCSuccess || wc[0].Opcode != op {
				t.Fatalf("completion %v %v, want %v success", wc[0].Opcode, wc[0].Status, op)
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no %v completion", op)
}

// TestDisconnect: either side's Disconnect sends a DREQ, the other
// answers with a DREP and sees its Conn end with ECONNRESET; both QPs end
// in ERR.
func TestDisconnect(t *testing.T) {
	for _, activeFirst := range []bool{true, false} {
		name := map[bool]string{true: "active", false: "passive"}[activeFirst]
		t.Run(name, func(t *testing.T) {
			lb, a, b := newPair(t, Config{Seed: 3}, Config{Seed: 4})
			ca, cb := connect(t, lb, a, b, 7100, rpingParam, rpingParam)
			first, second := ca, cb
			if !activeFirst {
				first, second = cb, ca
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := first.Disconnect(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-second.Done():
			case <-ctx.Done():
				t.Fatal("peer not disconnected")
			}
			if !errors.Is(second.Err(), unix.ECONNRESET) || first.State() != StateTimeWait {
				t.Errorf("peer err %v, first state %v", second.Err(), first.State())
			}
			if err := second.Disconnect(ctx); err != nil {
				t.Errorf("second disconnect: %v", err)
			}
			for _, s := range []*side{a, b} {
				if st := qpAttr(t, s.qp).QPState; st != qpstate.StateErr {
					t.Errorf("QP state %v, want ERR", st)
				}
			}
		})
	}
}

// TestReject: a REQ for a port nobody listens on gets REJ reason 8 (the
// kernel's invalid service ID: rping's "RDMA_CM_EVENT_REJECTED, error
// 8"); a consumer's Reject gives 28 with its private data.
func TestReject(t *testing.T) {
	cases := []struct {
		name   string
		listen bool
		reason mad.RejReason
		pd     []byte
	}{
		{"no listener", false, mad.RejInvalidServiceID, nil},
		{"consumer", true, mad.RejConsumerDefined, []byte("go away")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lb, a, b := newPair(t, Config{Seed: 5}, Config{Seed: 6})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if c.listen {
				l, err := b.cm.Listen(7200)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					if r, err := l.Accept(ctx); err == nil {
						r.Reject(c.pd)
					}
				}()
			}
			_, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7200, rpingParam)
			var rej *RejectError
			if !errors.As(err, &rej) || rej.Reason != c.reason || !errors.Is(err, unix.ECONNREFUSED) {
				t.Fatalf("err %v, want reject %v", err, c.reason)
			}
			if !bytes.HasPrefix(rej.PrivateData, c.pd) {
				t.Errorf("private data %q", rej.PrivateData[:8])
			}
		})
	}
}

// TestRetransmit drops the first copies of REQ, REP and DREQ on the wire
// (virtual time: a Manual clock fires the retry timers) and checks the
// connection still comes up and goes down, and that with every copy
// dropped Connect fails with ETIMEDOUT after MaxRetries.
func TestRetransmit(t *testing.T) {
	cases := []struct {
		name     string
		drop     map[mad.AttrID]int // how many copies to drop
		wantErr  error
		attempts int
		sent     map[mad.AttrID]int // copies sent in all (dropped included); -n: at least n
	}{
		{"REQ lost twice", map[mad.AttrID]int{mad.AttrREQ: 2}, nil, 0, map[mad.AttrID]int{mad.AttrREQ: 3, mad.AttrREP: 1, mad.AttrRTU: 1}},
		// The REQ's timer may fire too, and its duplicate gets the REP again.
		{"REP lost", map[mad.AttrID]int{mad.AttrREP: 1}, nil, 0, map[mad.AttrID]int{mad.AttrREQ: -1, mad.AttrREP: -2, mad.AttrRTU: -1}},
		// The passive side resends its REP; the active side answers the
		// duplicate with the RTU again.
		{"RTU lost", map[mad.AttrID]int{mad.AttrRTU: 1}, nil, 0, map[mad.AttrID]int{mad.AttrREQ: 1, mad.AttrREP: 2, mad.AttrRTU: 2}},
		{"DREQ lost", map[mad.AttrID]int{mad.AttrDREQ: 1}, nil, 0, map[mad.AttrID]int{mad.AttrDREQ: 2, mad.AttrDREP: 1}},
		{"REQ always lost", map[mad.AttrID]int{mad.AttrREQ: 1000}, unix.ETIMEDOUT, 6, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(time.Unix(0, 0))
			var mu sync.Mutex
			sent := map[mad.AttrID]int{}
			drop := func(m mad.MAD) bool {
				mu.Lock()
				defer mu.Unlock()
				sent[m.AttributeID()]++
				if c.drop[m.AttributeID()] > 0 {
					c.drop[m.AttributeID()]--
					return true
				}
				return false
			}
			cfg := Config{Clock: clk, RetryInterval: time.Second, MaxRetries: 5, dropTx: drop}
			cfgA, cfgB := cfg, cfg
			cfgA.Seed, cfgB.Seed = 7, 8
			lb, a, b := newPair(t, cfgA, cfgB)
			stop := make(chan struct{})
			defer close(stop)
			go func() { // virtual time passes while anything waits
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						clk.Advance(time.Second)
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if c.wantErr != nil {
				_, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7300, rpingParam)
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err %v, want %v", err, c.wantErr)
				}
				mu.Lock()
				defer mu.Unlock()
				if sent[mad.AttrREQ] != c.attempts {
					t.Errorf("%d REQs sent, want %d", sent[mad.AttrREQ], c.attempts)
				}
				return
			}
			ca, cb := connect(t, lb, a, b, 7300, rpingParam, rpingParam)
			traffic(t, a, b)
			if err := ca.Disconnect(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-cb.Done():
			case <-ctx.Done():
				t.Fatal("passive side not disconnected")
			}
			mu.Lock()
			defer mu.Unlock()
			for a, n := range c.sent {
				if n >= 0 && sent[a] != n || n < 0 && sent[a] < -n {
					t.Errorf("%v sent %d times, want %d", a, sent[a], n)
				}
			}
		})
	}
}

// TestListen: a port is listened on once; a closed listener's port
// rejects again.
func TestListen(t *testing.T) {
	lb, a, b := newPair(t, Config{Seed: 9}, Config{Seed: 10})
	l, err := b.cm.Listen(7400)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.cm.Listen(7400); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("second listen: %v", err)
	}
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, unix.ECONNABORTED) {
		t.Errorf("accept on closed listener: %v", err)
	}
	var rej *RejectError
	if _, err := a.cm.Connect(ctx, a.qp, lb.B.IP, 7400, rpingParam); !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
		t.Errorf("connect to closed port: %v", err)
	}
}
