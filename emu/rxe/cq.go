package rxe

import (
	"sync/atomic"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"golang.org/x/sys/unix"
)

// cq is rxe's completion queue: a bounded FIFO of completions and the armed
// notification flags.
type cq struct {
	core *emu.CQ
	cap  int
	wcs  []emu.WC
	// queued is len(wcs), read without r.mu: a poll of an empty CQ
	// takes no lock (rxe_poll_cq takes only the CQ's own lock).
	queued atomic.Int32
	notify emu.CQNotifyFlags
	ring   func(emu.WC) bool // a userspace CQ's ring (emu.CQInitAttr.Ring), else nil
	gone   bool              // destroyed: a delayed completion (SetCQFault) is dropped
	// resizeRing moves a userspace CQ to a new ring (emu.CQInitAttr.RingResize).
	resizeRing func(cqe, n int) error
}

func cqOf(c *emu.CQ) *cq { return driver.Priv(c).(*cq) }

// CreateCQ checks and rounds the size (rxe_cq_chk_attr, rxe_create_cq):
// cqe <= 0 or > 32767 is EINVAL, flags are EOPNOTSUPP; the capacity is the
// next power of two above cqe, minus one.
func (r *device) CreateCQ(c *emu.CQ, attr *emu.CQInitAttr) error {
	if attr.Flags != 0 {
		return errorf(unix.EOPNOTSUPP, "create CQ: flags %#x", attr.Flags)
	}
	if attr.CQE <= 0 || attr.CQE > r.attr.MaxCQE {
		return errorf(unix.EINVAL, "create CQ: cqe %d not in 1..%d", attr.CQE, r.attr.MaxCQE)
	}
	if !r.numCQ.take(r.attr.MaxCQ) {
		return poolLimit("create CQ", "max_cq", r.attr.MaxCQ, r.attr.MaxCQ)
	}
	n := int(roundQueue(uint32(attr.CQE)))
	c.CQE = n
	driver.SetPriv(c, &cq{core: c, cap: n, ring: attr.Ring, resizeRing: attr.RingResize})
	return nil
}

// ResizeCQ resizes the CQ (rxe_resize_cq with rxe_cq_chk_attr and
// rxe_queue_resize): cqe <= 0, above max_cqe or below the number of
// completions the CQ holds is EINVAL; the capacity becomes the next power
// of two above cqe, minus one, as at creation, and the held completions
// stay, in order. A userspace CQ moves to a new ring its consumer maps
// (emu.CQInitAttr.RingResize).
func (r *device) ResizeCQ(c *emu.CQ, cqe int) error {
	if cqe <= 0 || cqe > r.attr.MaxCQE {
		return errorf(unix.EINVAL, "resize CQ: cqe %d not in 1..%d", cqe, r.attr.MaxCQE)
	}
	r.lock()
	defer r.unlock()
	q := cqOf(c)
	n := int(roundQueue(uint32(cqe)))
	switch {
	case q.ring != nil && q.resizeRing == nil:
		return errorf(unix.EOPNOTSUPP, "resize CQ: the CQ's ring cannot move")
	case q.ring != nil:
		if err := q.resizeRing(cqe, n); err != nil {
			return err
		}
	case cqe < len(q.wcs):
		return errorf(unix.EINVAL, "resize CQ: cqe %d below the %d completions it holds", cqe, len(q.wcs))
	}
	q.cap = n
	c.CQE = n
	return nil
}

// DestroyCQ frees the CQ (the core has checked its use count).
func (r *device) DestroyCQ(c *emu.CQ) error {
	r.lock()
	defer r.unlock()
	cqOf(c).wcs = nil
	cqOf(c).queued.Store(0)
	cqOf(c).gone = true
	r.numCQ.put()
	return nil
}

// PollCQ moves up to len(wc) completions out, oldest first.
func (r *device) PollCQ(c *emu.CQ, wc []emu.WC) int {
	q := cqOf(c)
	if q.queued.Load() == 0 || len(wc) == 0 {
		// Nothing to take: a completion being posted meanwhile is
		// found by the next poll, as a CQE still being written is.
		// A busy-polling consumer does not contend for the device's
		// lock with the goroutines that process its frames.
		return 0
	}
	r.lock()
	defer r.unlock()
	n := copy(wc, q.wcs)
	q.wcs = q.wcs[:copy(q.wcs, q.wcs[n:])]
	q.queued.Store(int32(len(q.wcs)))
	return n
}

// ReqNotifyCQ ORs the solicited bits of flags into the armed set and, with
// REPORT_MISSED_EVENTS, returns 1 when completions are waiting
// (rxe_req_notify_cq).
func (r *device) ReqNotifyCQ(c *emu.CQ, flags emu.CQNotifyFlags) int {
	r.lock()
	defer r.unlock()
	q := cqOf(c)
	q.notify |= flags & emu.CQSolicitedMask
	if flags&emu.CQReportMissedEvents != 0 && len(q.wcs) > 0 {
		return 1
	}
	return 0
}

// post adds a completion (rxe_cq_post); r.mu held. A full CQ drops it,
// raises IB_EVENT_CQ_ERR and returns false. An armed CQ calls its
// completion handler once and disarms.
func (r *device) post(q *cq, wc emu.WC, solicited bool) bool {
	if r.cqFault != nil {
		return r.postFaulted(q, wc, solicited)
	}
	return r.postNow(q, wc, solicited)
}

// postFaulted is post with a completion hook (injected faults). Apart
// from post so that wc, which the hook and a delayed post take the
// address of, moves to the heap only here: post allocates nothing.
func (r *device) postFaulted(q *cq, wc emu.WC, solicited bool) bool {
	if f := r.cqFault(q.core, &wc); f.Overflow {
		r.event(emu.Event{Type: emu.EventCQErr, CQ: q.core})
		return false
	} else if f.Delay > 0 {
		r.postLater(q, wc, solicited, f.Delay)
		return true
	}
	return r.postNow(q, wc, solicited)
}

// postNow is post without the injected faults; r.mu held.
func (r *device) postNow(q *cq, wc emu.WC, solicited bool) bool {
	if q.ring != nil {
		// A userspace CQ: the completion goes to the ring the consumer
		// maps, which is what overflows (rxe_cq_post on a user queue).
		if !q.ring(wc) {
			r.event(emu.Event{Type: emu.EventCQErr, CQ: q.core})
			return false
		}
	} else {
		if len(q.wcs) >= q.cap {
			r.event(emu.Event{Type: emu.EventCQErr, CQ: q.core})
			return false
		}
		q.wcs = append(q.wcs, wc)
		q.queued.Store(int32(len(q.wcs)))
	}
	if rec := q.core.Device.Recorder(); rec != nil {
		rec.Completion(wc.Opcode, wc.Status)
	}
	if q.notify&emu.CQNextComp != 0 || q.notify&emu.CQSolicited != 0 && solicited {
		q.notify = 0
		if q.core.CompHandler != nil {
			r.laterComp(q.core)
		}
	}
	return true
}
