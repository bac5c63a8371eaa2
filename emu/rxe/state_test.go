package rxe

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestStateSideEffects holds the side effects of state transitions
// (rxe_qp_reset, rxe_qp_error, rxe_qp_drain): what is flushed, discarded,
// drained and which async events fire.
func TestStateSideEffects(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"RTS_to_RESET_discards_without_completions", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			sge, _ := e.buf(64)
			if _, err := qp.PostSend([]emu.SendWR{send(1, sge, emu.SendSignaled), send(2, sge, emu.SendSignaled)}); err != nil {
				t.Fatal(err)
			}
			if _, err := qp.PostRecv([]emu.RecvWR{recv(3, sge), recv(4, sge)}); err != nil {
				t.Fatal(err)
			}
			before, _, _ := qp.Query(0)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateReset}, qpstate.AttrState)
			after, _, _ := qp.Query(0)
			if n := len(e.poll(e.scq)) + len(e.poll(e.rcq)); n != 0 {
				t.Fatalf("%d completions after RESET, want none", n)
			}
			if q := qpOf(qp); len(q.sq) != 0 || len(q.rq) != 0 {
				t.Fatalf("queues not empty: sq %d rq %d", len(q.sq), len(q.rq))
			}
			if after.SQPSN != before.SQPSN || after.RQPSN != before.RQPSN || after.QPState != qpstate.StateReset {
				t.Fatalf("PSNs sq %#x->%#x rq %#x->%#x state %v", before.SQPSN, after.SQPSN, before.RQPSN, after.RQPSN, after.QPState)
			}
			// Nothing comes back later either: INIT -> ERR flushes nothing.
			e.toInit(qp)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			if n := len(e.poll(e.scq)) + len(e.poll(e.rcq)); n != 0 {
				t.Fatalf("%d completions from discarded WQEs", n)
			}
		}},
		{"ERR_to_ERR_then_INIT", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			sge, _ := e.buf(8)
			qp.PostRecv([]emu.RecvWR{recv(9, sge)}) // flushed at once in ERR
			err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			wantErrno(t, "ERR->ERR", err, 0)
			err = qp.Modify(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1}, qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags)
			wantErrno(t, "ERR->INIT", err, unix.EINVAL)
			if s := e.state(qp); s != qpstate.StateErr {
				t.Fatalf("state %v after a refused modify", s)
			}
			if got := statuses(e.poll(e.rcq)); !equal(got, []idStatus{{9, emu.WCWRFlushErr}}) {
				t.Fatalf("recv completions %v", got)
			}
		}},
		{"SQD_while_draining_only_ERR", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			sge, _ := e.buf(3000)
			if _, err := qp.PostSend([]emu.SendWR{send(1, sge, emu.SendSignaled), send(2, sge, emu.SendSignaled)}); err != nil {
				t.Fatal(err)
			}
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateSQD}, qpstate.AttrState)
			if ev := e.takeEvents(); len(ev) != 0 {
				t.Fatalf("events %v while WQEs are unacknowledged", ev)
			}
			a, _, _ := qp.Query(0)
			if a.SQDraining != 1 || a.QPState != qpstate.StateSQD {
				t.Fatalf("query: state %v draining %d", a.QPState, a.SQDraining)
			}
			for _, next := range []qpstate.State{qpstate.StateRTS, qpstate.StateSQD, qpstate.StateReset} {
				err := qp.Modify(&qpstate.Attr{QPState: next}, qpstate.AttrState)
				wantErrno(t, "SQD->"+next.Name()+" while draining", err, unix.EINVAL)
			}
			// A WQE posted in SQD is held and does not delay the drain.
			if _, err := qp.PostSend([]emu.SendWR{send(3, sge, emu.SendSignaled)}); err != nil {
				t.Fatal(err)
			}
			// 3000 bytes at MTU 1024 = 3 packets each: PSNs 200..205.
			if err := e.r.Ack(qp.QPNum(), 205); err != nil {
				t.Fatal(err)
			}
			if ev := e.takeEvents(); !equal(ev, []emu.EventType{emu.EventSQDrained}) {
				t.Fatalf("events %v, want SQ_DRAINED", ev)
			}
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCSuccess}, {2, emu.WCSuccess}}) {
				t.Fatalf("completions %v", got)
			}
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState)
			if w := qpOf(qp).sq[0]; w.state != wqePending || w.firstPSN != 206 {
				t.Fatalf("held WQE after SQD->RTS: state %d psn %d", w.state, w.firstPSN)
			}
		}},
		{"SQD_draining_to_ERR_allowed", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			sge, _ := e.buf(8)
			qp.PostSend([]emu.SendWR{send(1, sge, 0)})
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateSQD}, qpstate.AttrState)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCWRFlushErr}}) {
				t.Fatalf("completions %v", got)
			}
		}},
		{"SQD_on_empty_SQ_drains_without_SQDN", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateSQD}, qpstate.AttrState)
			if ev := e.takeEvents(); !equal(ev, []emu.EventType{emu.EventSQDrained}) {
				t.Fatalf("events %v", ev)
			}
			if a, _, _ := qp.Query(0); a.SQDraining != 0 {
				t.Fatal("still draining")
			}
		}},
		{"SQD_to_SQD_drains_again", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateSQD}, qpstate.AttrState)
			e.takeEvents()
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateSQD, Timeout: 20}, qpstate.AttrState|qpstate.AttrTimeout)
			if ev := e.takeEvents(); !equal(ev, []emu.EventType{emu.EventSQDrained}) {
				t.Fatalf("events %v, want a second SQ_DRAINED", ev)
			}
			if a, _, _ := qp.Query(0); a.Timeout != 20 {
				t.Fatalf("timeout %d", a.Timeout)
			}
		}},
		{"ERR_flushes_unsignaled_in_order", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			sge, _ := e.buf(64)
			qp.PostSend([]emu.SendWR{send(1, sge, 0), send(2, sge, 0), send(3, sge, 0)})
			qp.PostRecv([]emu.RecvWR{recv(4, sge), recv(5, sge)})
			if n := len(e.poll(e.scq)); n != 0 {
				t.Fatalf("%d completions while in flight", n)
			}
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{1, emu.WCWRFlushErr}, {2, emu.WCWRFlushErr}, {3, emu.WCWRFlushErr}}) {
				t.Fatalf("send completions %v", got)
			}
			rc := e.poll(e.rcq)
			if got := statuses(rc); !equal(got, []idStatus{{4, emu.WCWRFlushErr}, {5, emu.WCWRFlushErr}}) {
				t.Fatalf("recv completions %v", got)
			}
			if rc[0].Opcode != emu.WCRecv || rc[0].QP != qp {
				t.Fatalf("recv flush opcode %v qp %v", rc[0].Opcode, rc[0].QP)
			}
			if ev := e.takeEvents(); len(ev) != 0 {
				t.Fatalf("async events %v: rxe raises none on ERR", ev)
			}
		}},
		{"post_in_states_below_RTS", func(t *testing.T, e *env) {
			sge, _ := e.buf(8)
			qp := e.qp(qpstate.TypeRC, nil)
			bad, err := qp.PostRecv([]emu.RecvWR{recv(1, sge)})
			wantErrno(t, "post_recv in RESET", err, unix.EINVAL)
			e.toInit(qp)
			_, err = qp.PostRecv([]emu.RecvWR{recv(1, sge)})
			wantErrno(t, "post_recv in INIT", err, 0)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateRTR, AHAttr: av(), PathMTU: ib.MTU1024, DestQPNum: 5, MaxDestRdAtomic: 1},
				qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer)
			bad, err = qp.PostSend([]emu.SendWR{send(2, sge, 0), send(3, sge, 0)})
			wantErrno(t, "post_send in RTR", err, unix.EINVAL)
			if bad != 0 || len(qpOf(qp).sq) != 0 {
				t.Fatalf("bad %d, %d queued", bad, len(qpOf(qp).sq))
			}
		}},
		{"post_send_in_ERR_flushes", func(t *testing.T, e *env) {
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTS(qp)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			sge, _ := e.buf(8)
			_, err := qp.PostSend([]emu.SendWR{send(7, sge, 0)})
			wantErrno(t, "post_send in ERR", err, 0)
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{7, emu.WCWRFlushErr}}) {
				t.Fatalf("completions %v", got)
			}
		}},
		{"SRQ_QP_to_ERR_raises_LAST_WQE_REACHED", func(t *testing.T, e *env) {
			srq, err := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 8, MaxSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			sge, _ := e.buf(8)
			srq.PostRecv([]emu.RecvWR{recv(1, sge), recv(2, sge)})
			qp := e.qp(qpstate.TypeRC, srq)
			e.toRTS(qp)
			e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
			if ev := e.takeEvents(); !equal(ev, []emu.EventType{emu.EventQPLastWQEReached}) {
				t.Fatalf("events %v", ev)
			}
			if n := len(srqOf(srq).wqes); n != 2 {
				t.Fatalf("SRQ has %d WQEs, want 2 untouched", n)
			}
			if n := len(e.poll(e.rcq)); n != 0 {
				t.Fatalf("%d receive completions", n)
			}
			// A later post in ERR flushes the send but raises no second event.
			qp.PostSend([]emu.SendWR{send(5, sge, 0)})
			if ev := e.takeEvents(); len(ev) != 0 {
				t.Fatalf("events %v after a post in ERR", ev)
			}
			if got := statuses(e.poll(e.scq)); !equal(got, []idStatus{{5, emu.WCWRFlushErr}}) {
				t.Fatalf("send completions %v", got)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newEnv(t)) })
	}
}

// TestModifyAtomic checks that a refused modify changes nothing: state,
// attributes and PSNs are as before, whichever check refused it.
func TestModifyAtomic(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	e.toRTR(qp)
	before, _, _ := qp.Query(0)
	for _, tc := range []struct {
		name string
		attr qpstate.Attr
		mask qpstate.AttrMask
		want unix.Errno
	}{
		{"timeout_32", qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: 5, Timeout: 32, MaxRdAtomic: 1},
			qpstate.AttrState | qpstate.AttrSQPSN | qpstate.AttrTimeout | qpstate.AttrRetryCnt | qpstate.AttrRNRRetry | qpstate.AttrMaxQPRdAtomic, unix.EINVAL},
		{"missing_required", qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: 5}, qpstate.AttrState | qpstate.AttrSQPSN, unix.EINVAL},
		{"reserved_bit", qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState | qpstate.AttrReserved1, unix.EOPNOTSUPP},
		{"empty_sgid", qpstate.Attr{AHAttr: func() ib.AHAttr { a := av(); a.GRH.SGIDIndex = 200; return a }()},
			qpstate.AttrAV, unix.ENODATA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.attr
			wantErrno(t, "modify", qp.Modify(&a, tc.mask), tc.want)
			after, _, _ := qp.Query(0)
			if after != before {
				t.Fatalf("QP changed by a refused modify:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// TestQueryQP checks rxe's query overrides (rxe_qp_to_attr): rounded rd_atomic
// values, masked PSNs, real capacities, RoCE AV with GRH, PSNs advancing
// with traffic.
func TestQueryQP(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	e.toRTR(qp)
	e.modify(qp, qpstate.Attr{QPState: qpstate.StateRTS, SQPSN: 0x1000001, Timeout: 14, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 3},
		qpstate.AttrState|qpstate.AttrSQPSN|qpstate.AttrTimeout|qpstate.AttrRetryCnt|qpstate.AttrRNRRetry|qpstate.AttrMaxQPRdAtomic)
	a, init, err := qp.Query(qpstate.AttrStandardBits)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"max_rd_atomic_rounded", a.MaxRdAtomic, uint8(4)},
		{"max_dest_rd_atomic_rounded", a.MaxDestRdAtomic, uint8(4)},
		{"sq_psn_masked", a.SQPSN, uint32(1)},
		{"rq_psn", a.RQPSN, uint32(100)},
		{"cur_qp_state", a.CurQPState, qpstate.StateRTS},
		{"ah type", a.AHAttr.Type, ib.AHAttrTypeRoCE},
		{"ah grh", a.AHAttr.AHFlags, ib.AHGRH},
		{"path mtu", a.PathMTU, ib.MTU1024},
		{"dest qpn", a.DestQPNum, uint32(0x22)},
		{"cap send wr", a.Cap.MaxSendWR, uint32(31)},
		{"init cap", init.Cap, a.Cap},
		{"init port", init.PortNum, uint32(1)},
		{"init type", init.QPType, qpstate.TypeRC},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	sge, _ := e.buf(2048)
	qp.PostSend([]emu.SendWR{send(1, sge, 0)})
	if a, _, _ := qp.Query(0); a.SQPSN != 3 {
		t.Errorf("sq_psn after a 2-packet send = %d, want 3", a.SQPSN)
	}
}

// TestModifyPolicies checks the policy knob reaches the device: an
// attribute-only modify in RTR is accepted by rxe >= 6.4 and refused by
// the pre-6.4 and hardware policies.
func TestModifyPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy qpstate.Policy
		want   unix.Errno
	}{
		{qpstate.PolicyRxe, 0},
		{qpstate.PolicyRxePre64, unix.EINVAL},
		{qpstate.PolicyHardware, unix.EINVAL},
	} {
		t.Run(""+tc.policy.String(), func(t *testing.T) {
			e := newEnv(t)
			e.r.cfg.Policy = tc.policy
			qp := e.qp(qpstate.TypeRC, nil)
			e.toRTR(qp)
			err := qp.Modify(&qpstate.Attr{Timeout: 9}, qpstate.AttrTimeout)
			wantErrno(t, "TIMEOUT only in RTR", err, tc.want)
			a, _, _ := qp.Query(0)
			if (tc.want == 0) != (a.Timeout == 9) {
				t.Fatalf("timeout %d after err %v", a.Timeout, err)
			}
		})
	}
}

// TestModifyUDPSport checks the UDP source port a QP sends from
// (rdma_get_udp_sport, rxe_qp_init_req): hash of the QPN at creation, flow label
// of the QPN pair after an AV with GRH.
func TestModifyUDPSport(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	if qp.QPNum() != 17 {
		t.Fatalf("first QPN %d, want 17 (16 is the MAD layer's GSI QP)", qp.QPNum())
	}
	if p, _ := e.r.UDPSport(17); p != 0xDF94 {
		t.Fatalf("sport at create %#x, want 0xDF94", p)
	}
	e.toInit(qp)
	e.modify(qp, qpstate.Attr{QPState: qpstate.StateRTR, AHAttr: av(), PathMTU: ib.MTU1024, DestQPNum: 18, MaxDestRdAtomic: 1},
		qpstate.AttrState|qpstate.AttrAV|qpstate.AttrPathMTU|qpstate.AttrDestQPN|qpstate.AttrRQPSN|qpstate.AttrMaxDestRdAtomic|qpstate.AttrMinRNRTimer)
	if p, _ := e.r.UDPSport(17); p != 0xC132 {
		t.Fatalf("sport after INIT->RTR to 18: %#x, want 0xC132", p)
	}
}

// TestModifyQPWithUdata checks the userspace path: the MAC of the AV is
// resolved and the route's hop limit replaces the caller's; without a
// resolver the modify fails with EHOSTUNREACH and nothing changes; a
// privileged Q_Key is EPERM.
func TestModifyQPWithUdata(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	e.toInit(qp)
	a := qpstate.Attr{QPState: qpstate.StateRTR, AHAttr: av(), PathMTU: ib.MTU1024, DestQPNum: 5, MaxDestRdAtomic: 1}
	m := qpstate.AttrState | qpstate.AttrAV | qpstate.AttrPathMTU | qpstate.AttrDestQPN | qpstate.AttrRQPSN | qpstate.AttrMaxDestRdAtomic | qpstate.AttrMinRNRTimer
	wantErrno(t, "no resolver", qp.ModifyWithUdata(&a, m, &emu.UData{}), unix.EHOSTUNREACH)
	if s := e.state(qp); s != qpstate.StateInit {
		t.Fatalf("state %v", s)
	}
	cfg := testConfig()
	cfg.Device.Resolver = fixedResolver{}
	e2 := newEnvWith(t, cfg)
	qp = e2.qp(qpstate.TypeRC, nil)
	e2.toInit(qp)
	a.AHAttr.DMAC = [6]byte{}
	if err := qp.ModifyWithUdata(&a, m, &emu.UData{}); err != nil {
		t.Fatal(err)
	}
	q, _, _ := qp.Query(0)
	if q.AHAttr.DMAC != testMAC || q.AHAttr.GRH.HopLimit != 64 || a.AHAttr.DMAC != testMAC {
		t.Fatalf("dmac %v hop %d", q.AHAttr.DMAC, q.AHAttr.GRH.HopLimit)
	}
	ud := e2.qp(qpstate.TypeUD, nil)
	err := ud.ModifyWithUdata(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QKey: 0x80000001},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrQKey, &emu.UData{})
	wantErrno(t, "privileged qkey", err, unix.EPERM)
	err = ud.ModifyWithUdata(&qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QKey: 0x80000001},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrQKey, &emu.UData{Privileged: true})
	wantErrno(t, "privileged caller", err, 0)
}

var testMAC = [6]byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}

type fixedResolver struct{}

func (fixedResolver) Resolve(context.Context, netip.Addr) ([6]byte, error) { return testMAC, nil }

// TestConcurrentVerbs runs posts, polls, queries and a move to ERR from
// several goroutines (run with -race): every posted receive completes
// exactly once, and nothing deadlocks on the event and completion callbacks.
func TestConcurrentVerbs(t *testing.T) {
	e := newEnv(t)
	rcq := e.cq(1024)
	init := &emu.QPInitAttr{SendCQ: e.scq, RecvCQ: rcq, QPType: qpstate.TypeUD,
		Cap: qpstate.Cap{MaxSendWR: 64, MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qp, err := e.pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	e.toRTS(qp)
	sge, _ := e.buf(64)
	var posted, polled atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if _, err := qp.PostRecv([]emu.RecvWR{recv(uint64(g*1000+i), sge)}); err == nil {
					posted.Add(1)
				}
				qp.Query(0)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wc := make([]emu.WC, 16)
		for range 200 {
			polled.Add(int64(rcq.Poll(wc)))
		}
	}()
	wg.Wait()
	e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
	polled.Add(int64(len(e.poll(rcq))))
	if posted.Load() != 400 || polled.Load() != posted.Load() {
		t.Fatalf("posted %d, completed %d", posted.Load(), polled.Load())
	}
}
