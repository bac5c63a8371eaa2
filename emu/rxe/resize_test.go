package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// flushInto fills cq with n flushed receive completions (WR IDs 1..n): an
// RC QP in INIT takes n receives and moves to ERR.
func (e *env) flushInto(cq *emu.CQ, n int) {
	e.t.Helper()
	init := &emu.QPInitAttr{SendCQ: e.scq, RecvCQ: cq, QPType: qpstate.TypeRC, SQSigType: emu.SignalReqWR,
		Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: uint32(n), MaxSendSGE: 1, MaxRecvSGE: 1}}
	qp, err := e.pd.CreateQP(init)
	if err != nil {
		e.t.Fatal(err)
	}
	e.toInit(qp)
	sge, _ := e.buf(8)
	for i := 1; i <= n; i++ {
		if _, err := qp.PostRecv([]emu.RecvWR{recv(uint64(i), sge)}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.modify(qp, qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState)
}

// TestResizeCQKeepsCompletionsInOrder: rxe_resize_cq checks the new size
// (1..max_cqe, not below the completions held: EINVAL), rounds it as
// create does and keeps the unpolled completions in order; the new
// capacity is what overflows.
func TestResizeCQKeepsCompletionsInOrder(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(8)
	e.flushInto(cq, 5)
	for _, c := range []struct {
		cqe   int
		errno unix.Errno
	}{{0, unix.EINVAL}, {-1, unix.EINVAL}, {32768, unix.EINVAL}, {4, unix.EINVAL}} {
		wantErrno(t, "resize", cq.Resize(c.cqe), c.errno)
		if cq.CQE != 15 {
			t.Fatalf("a failed resize to %d changed CQE to %d", c.cqe, cq.CQE)
		}
	}
	for _, c := range []struct{ cqe, want int }{{5, 7}, {100, 127}, {32767, 32767}, {6, 7}} {
		wantErrno(t, "resize", cq.Resize(c.cqe), 0)
		if cq.CQE != c.want {
			t.Fatalf("resize to %d: CQE %d, want %d", c.cqe, cq.CQE, c.want)
		}
	}
	wcs := e.poll(cq)
	if len(wcs) != 5 {
		t.Fatalf("%d completions after the resizes, want 5", len(wcs))
	}
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != emu.WCWRFlushErr {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	// Capacity 1: the second completion overflows (IB_EVENT_CQ_ERR).
	wantErrno(t, "resize to 1", cq.Resize(1), 0)
	e.takeEvents()
	e.flushInto(cq, 2)
	if wcs := e.poll(cq); len(wcs) != 1 || wcs[0].WRID != 1 {
		t.Fatalf("capacity 1 holds %+v", wcs)
	}
	if ev := e.takeEvents(); !equal(ev, []emu.EventType{emu.EventCQErr}) {
		t.Fatalf("events %v, want CQ_ERR", ev)
	}
}

// TestResizeUserCQCallsItsRing: a userspace CQ is resized by moving its
// ring (the hook gets the asked and the rounded size); the hook's error is
// the resize's and leaves CQE alone; a ring CQ without the hook cannot be
// resized.
func TestResizeUserCQCallsItsRing(t *testing.T) {
	e := newEnv(t)
	var got [][2]int
	fail := error(nil)
	cq, err := e.dev.CreateCQ(emu.CQInitAttr{CQE: 4, Ring: func(emu.WC) bool { return true },
		RingResize: func(cqe, n int) error {
			got = append(got, [2]int{cqe, n})
			return fail
		}})
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "resize 9", cq.Resize(9), 0)
	if cq.CQE != 15 || len(got) != 1 || got[0] != [2]int{9, 15} {
		t.Fatalf("CQE %d, hook calls %v", cq.CQE, got)
	}
	wantErrno(t, "resize 0", cq.Resize(0), unix.EINVAL)
	fail = errorf(unix.EINVAL, "ring holds more")
	wantErrno(t, "resize the hook refuses", cq.Resize(2), unix.EINVAL)
	if cq.CQE != 15 || len(got) != 2 {
		t.Fatalf("CQE %d after a refused resize, hook calls %v", cq.CQE, got)
	}
	fixed, err := e.dev.CreateCQ(emu.CQInitAttr{CQE: 4, Ring: func(emu.WC) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "resize a ring that cannot move", fixed.Resize(8), unix.EOPNOTSUPP)
}

// TestResizeSRQ: rxe_modify_srq resizes an SRQ with its WRs kept; the
// limit is held against the capacity before the modify, even with a
// resize in the same modify; a userspace SRQ moves its ring, with room
// for what the device does not hold already.
func TestResizeSRQ(t *testing.T) {
	e := newEnv(t)
	srq, err := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 4, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sge, _ := e.buf(8)
	for i := range 3 {
		if _, err := srq.PostRecv([]emu.RecvWR{recv(uint64(i), sge)}); err != nil {
			t.Fatal(err)
		}
	}
	wantErrno(t, "shrink below the 3 queued", srq.Modify(&emu.SRQAttr{MaxWR: 1}, emu.SRQMaxWR), unix.EINVAL)
	wantErrno(t, "grow and arm above the old capacity 7", srq.Modify(&emu.SRQAttr{MaxWR: 100, SRQLimit: 20},
		emu.SRQMaxWR|emu.SRQLimit), unix.EINVAL)
	a := &emu.SRQAttr{MaxWR: 100}
	wantErrno(t, "grow", srq.Modify(a, emu.SRQMaxWR), 0)
	if a.MaxWR != 127 {
		t.Fatalf("max_wr after the resize %d, want 127", a.MaxWR)
	}
	wantErrno(t, "arm above the old capacity now held", srq.Modify(&emu.SRQAttr{SRQLimit: 20}, emu.SRQLimit), 0)
	for i := 3; i < 10; i++ {
		if _, err := srq.PostRecv([]emu.RecvWR{recv(uint64(i), sge)}); err != nil {
			t.Fatalf("post %d after the resize: %v", i, err)
		}
	}
	e.r.lock()
	for i := range 10 {
		if w, ok := e.r.takeSRQ(srqOf(srq)); !ok || w.wrID != uint64(i) {
			t.Fatalf("receive %d: %+v %v", i, w, ok)
		}
	}
	e.r.unlock()

	var calls [][2]uint32
	ring := []emu.RecvWR{recv(100, sge), recv(101, sge), recv(102, sge)}
	user, err := e.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 8, MaxSGE: 1},
		RecvRing: func(wr *emu.RecvWR) bool {
			if len(ring) == 0 {
				return false
			}
			*wr, ring = ring[0], ring[1:]
			return true
		},
		RecvRingResize: func(maxWR, room uint32) error {
			calls = append(calls, [2]uint32{maxWR, room})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.r.lock()
	w, ok := e.r.takeSRQ(srqOf(user)) // the device takes all three, hands out one
	e.r.unlock()
	if !ok || w.wrID != 100 {
		t.Fatalf("first user SRQ receive %+v %v", w, ok)
	}
	wantErrno(t, "resize user SRQ", user.Modify(&emu.SRQAttr{MaxWR: 20}, emu.SRQMaxWR), 0)
	if len(calls) != 1 || calls[0] != [2]uint32{31, 29} {
		t.Fatalf("ring resize calls %v, want [[31 29]]", calls)
	}
	if q, _ := user.Query(); q.MaxWR != 31 {
		t.Fatalf("user SRQ max_wr %d", q.MaxWR)
	}
}
