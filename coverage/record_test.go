package coverage_test

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/workload"
	"golang.org/x/sys/unix"
)

// newLoopback returns two devices on an in-memory link, each with its
// recorder.
func newLoopback(t *testing.T) (*workload.Loopback, [2]*coverage.Recorder) {
	t.Helper()
	recs := [2]*coverage.Recorder{coverage.NewRecorder("rxe0"), coverage.NewRecorder("rxe1")}
	lb, err := workload.NewLoopback(workload.LoopbackConfig{Seed: 7, Recorders: [2]emu.Recorder{recs[0], recs[1]}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	return lb, recs
}

func mustMask(t *testing.T, s string) qpstate.AttrMask {
	t.Helper()
	m, err := qpstate.ParseAttrMask(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ibv_rc_pingpong (rc_pingpong.c) makes three modifies per side, each with
// the attributes it sets: pp_init_ctx moves the QP to INIT, pp_connect_ctx
// to RTR and then RTS. Each side sends and receives Iters messages, all
// successfully.
func TestPingpongProfileHasExactlyItsTransitions(t *testing.T) {
	lb, recs := newLoopback(t)
	const iters = 20
	client, server, err := lb.Pingpong(workload.PingpongConfig{Mode: oob.PingpongRC, Iters: iters,
		GIDIndex: workload.LoopbackGIDIndex})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := server.Run(); done <- err }()
	if _, err := client.Run(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	client.Close()
	server.Close()

	want := map[coverage.ModifyKey]uint64{
		{Type: qpstate.TypeRC, Cur: qpstate.StateReset, Next: qpstate.StateInit,
			Mask: mustMask(t, "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS")}: 1,
		{Type: qpstate.TypeRC, Cur: qpstate.StateInit, Next: qpstate.StateRTR,
			Mask: mustMask(t, "STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER")}: 1,
		{Type: qpstate.TypeRC, Cur: qpstate.StateRTR, Next: qpstate.StateRTS,
			Mask: mustMask(t, "STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|SQ_PSN|MAX_QP_RD_ATOMIC")}: 1,
	}
	var merged coverage.Profile
	for i, r := range recs {
		if err := r.ReadCounters([]*emu.Device{lb.A.Dev, lb.B.Dev}[i]); err != nil {
			t.Fatal(err)
		}
		p := r.Profile()
		if len(p.Modify) != len(want) {
			t.Errorf("device %d: %d modify cells, want %d: %v", i, len(p.Modify), len(want), p.Modify)
		}
		for k, n := range want {
			if p.Modify[k] != n {
				t.Errorf("device %d: %v %v->%v %v: count %d, want %d", i, k.Type, k.Cur, k.Next, k.Mask, p.Modify[k], n)
			}
		}
		wantWC := map[coverage.CompletionKey]uint64{{Opcode: emu.WCSend}: iters, {Opcode: emu.WCRecv}: iters}
		if len(p.Completions) != len(wantWC) {
			t.Errorf("device %d: completions %v, want %v", i, p.Completions, wantWC)
		}
		for k, n := range wantWC {
			if p.Completions[k] != n {
				t.Errorf("device %d: %v %v: %d completions, want %d", i, k.Opcode, k.Status, p.Completions[k], n)
			}
		}
		if len(p.Verbs) != 0 {
			t.Errorf("device %d: failed verbs %v, want none", i, p.Verbs)
		}
		merged.Merge(p)
	}

	rep := coverage.NewReport(&merged)
	if len(rep.Types) != 1 || rep.Types[0].Type != "IB_QPT_RC" {
		t.Fatalf("report types %+v, want RC only", rep.Types)
	}
	if rep.Types[0].Taken != 3 || rep.Types[0].Valid != 22 {
		t.Errorf("RC: %d of %d taken, want 3 of 22", rep.Types[0].Taken, rep.Types[0].Valid)
	}
	for _, x := range rep.Types[0].Transitions {
		n, _ := rep.Taken(qpstate.TypeRC, mustState(t, x.Cur), mustState(t, x.Next))
		wantN := uint64(0)
		switch x.Cur + "->" + x.Next {
		case "RESET->INIT", "INIT->RTR", "RTR->RTS":
			wantN = 2 // one per side
		}
		if n != wantN || x.Count != wantN {
			t.Errorf("RC %s->%s taken %d (%d), want %d", x.Cur, x.Next, n, x.Count, wantN)
		}
	}
	if len(rep.Types[0].Invalid) != 0 {
		t.Errorf("invalid attempts %v, want none", rep.Types[0].Invalid)
	}
}

func mustState(t *testing.T, s string) qpstate.State {
	t.Helper()
	st, err := qpstate.ParseState(s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Modifies the kernel refuses are recorded with the errno the caller got:
// pairs outside the table and valid pairs missing a required attribute.
// Moving a QP with a posted receive to ERR flushes it (IB_WC_WR_FLUSH_ERR).
func TestIllegalTransitionsRecordedWithErrno(t *testing.T) {
	lb, recs := newLoopback(t)
	d := lb.A.Dev
	pd, err := d.AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(emu.CQInitAttr{CQE: 16})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	modify := func(next qpstate.State, mask string) error {
		return qp.Modify(&qpstate.Attr{QPState: next, PortNum: 1, QPAccessFlags: ib.AccessLocalWrite},
			mustMask(t, mask))
	}
	steps := []struct {
		next  qpstate.State
		mask  string
		errno unix.Errno
	}{
		{qpstate.StateRTS, "STATE", unix.EINVAL},       // RESET->RTS: not in the table
		{qpstate.StateInit, "STATE|PORT", unix.EINVAL}, // RESET->INIT without PKEY_INDEX, ACCESS_FLAGS
		{qpstate.StateInit, "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS", 0},
		{qpstate.StateSQD, "STATE", unix.EINVAL}, // INIT->SQD: not in the table
		{qpstate.StateErr, "STATE", 0},
	}
	for i, s := range steps {
		if i == 4 {
			if _, err := qp.PostRecv([]emu.RecvWR{{WRID: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		err := modify(s.next, s.mask)
		if s.errno == 0 && err != nil || s.errno != 0 && !errors.Is(err, s.errno) {
			t.Fatalf("step %d: modify to %v with %s: %v, want errno %v", i, s.next, s.mask, err, s.errno)
		}
	}
	p := recs[0].Profile()
	want := map[coverage.ModifyKey]uint64{
		{qpstate.TypeRC, qpstate.StateReset, qpstate.StateRTS, qpstate.AttrState, unix.EINVAL}:                        1,
		{qpstate.TypeRC, qpstate.StateReset, qpstate.StateInit, mustMask(t, "STATE|PORT"), unix.EINVAL}:               1,
		{qpstate.TypeRC, qpstate.StateReset, qpstate.StateInit, mustMask(t, "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS"), 0}: 1,
		{qpstate.TypeRC, qpstate.StateInit, qpstate.StateSQD, qpstate.AttrState, unix.EINVAL}:                         1,
		{qpstate.TypeRC, qpstate.StateInit, qpstate.StateErr, qpstate.AttrState, 0}:                                   1,
	}
	if len(p.Modify) != len(want) {
		t.Errorf("modify cells %v, want %v", p.Modify, want)
	}
	for k, n := range want {
		if p.Modify[k] != n {
			t.Errorf("%v %v->%v %v %v: count %d, want %d", k.Type, k.Cur, k.Next, k.Mask, k.Errno, p.Modify[k], n)
		}
	}
	if n := p.Verbs[coverage.VerbKey{Verb: "modify_qp", Errno: unix.EINVAL}]; n != 3 {
		t.Errorf("failed modify_qp EINVAL: %d, want 3 (%v)", n, p.Verbs)
	}
	if n := p.Completions[coverage.CompletionKey{Opcode: emu.WCRecv, Status: emu.WCWRFlushErr}]; n != 1 {
		t.Errorf("flushed receives: %d, want 1 (%v)", n, p.Completions)
	}
	rep := coverage.NewReport(p)
	att := rep.Attempts(qpstate.TypeRC)
	wantAtt := []coverage.Attempt{{Cur: "RESET", Next: "RTS", Errno: "EINVAL", Count: 1},
		{Cur: "INIT", Next: "SQD", Errno: "EINVAL", Count: 1}}
	if len(att) != len(wantAtt) {
		t.Fatalf("invalid attempts %v, want %v", att, wantAtt)
	}
	for i := range att {
		if att[i] != wantAtt[i] {
			t.Errorf("invalid attempt %d: %+v, want %+v", i, att[i], wantAtt[i])
		}
	}
	if n, _ := rep.Taken(qpstate.TypeRC, qpstate.StateReset, qpstate.StateInit); n != 1 {
		t.Errorf("RESET->INIT taken %d, want 1", n)
	}
	// Other verbs record their failures too: rxe refuses more SGEs than
	// the QP's max_send_sge (rxe_verbs.c validate_send_wr).
	if _, err := qp.PostSend([]emu.SendWR{{Opcode: emu.WRSend, SGList: make([]emu.SGE, 2)}}); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("post send with 2 SGEs on a 1-SGE QP: %v, want EINVAL", err)
	}
	if n := recs[0].Profile().Verbs[coverage.VerbKey{Verb: "post_send", Errno: unix.EINVAL}]; n != 1 {
		t.Errorf("failed post_send EINVAL: %d, want 1", n)
	}
}

// An async event is recorded as it is dispatched: a CQ too small for the
// receives a move to ERR flushes overflows and raises IB_EVENT_CQ_ERR
// (rxe_cq_post).
func TestEventRecorded(t *testing.T) {
	lb, recs := newLoopback(t)
	d := lb.A.Dev
	pd, err := d.AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan emu.EventType, 4)
	cq, err := d.CreateCQ(emu.CQInitAttr{CQE: 1, EventHandler: func(ev emu.Event) { events <- ev.Type }})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeRC,
		Cap: qpstate.Cap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	init := qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1}
	if err := qp.Modify(&init, mustMask(t, "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS")); err != nil {
		t.Fatal(err)
	}
	wrs := make([]emu.RecvWR, 8)
	if _, err := qp.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev != emu.EventCQErr {
		t.Fatalf("event %v, want IB_EVENT_CQ_ERR", ev)
	}
	p := recs[0].Profile()
	if p.Events[emu.EventCQErr] == 0 {
		t.Errorf("events %v, want IB_EVENT_CQ_ERR", p.Events)
	}
	if n := p.Completions[coverage.CompletionKey{Opcode: emu.WCRecv, Status: emu.WCWRFlushErr}]; n != uint64(cq.CQE) {
		t.Errorf("%d flushed receives recorded, want the CQ's %d entries (the rest overflowed)", n, cq.CQE)
	}
}

// A userspace caller's modify (the uverbs path, with udata) is recorded
// like a kernel caller's.
func TestUserModifyRecorded(t *testing.T) {
	lb, recs := newLoopback(t)
	d := lb.B.Dev
	pd, err := d.AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(emu.CQInitAttr{CQE: 4})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateUserQP(&emu.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: qpstate.TypeUD,
		Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}, &emu.UData{})
	if err != nil {
		t.Fatal(err)
	}
	err = qp.ModifyWithUdata(&qpstate.Attr{QPState: qpstate.StateRTR}, qpstate.AttrState, &emu.UData{})
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("user modify RESET->RTR: %v, want EINVAL", err)
	}
	k := coverage.ModifyKey{Type: qpstate.TypeUD, Cur: qpstate.StateReset, Next: qpstate.StateRTR,
		Mask: qpstate.AttrState, Errno: unix.EINVAL}
	if p := recs[1].Profile(); p.Modify[k] != 1 || len(p.Modify) != 1 {
		t.Errorf("modify cells %v, want %+v once", p.Modify, k)
	}
}
