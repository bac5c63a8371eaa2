package rxe

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"golang.org/x/sys/unix"
)

// recvWQE is a posted receive work request.
type recvWQE struct {
	wrID   uint64
	sgl    []emu.SGE
	length uint64
}

// srq is rxe's shared receive queue.
type srq struct {
	core   *emu.SRQ
	cap    uint32
	maxSGE uint32
	limit  uint32
	wqes   []recvWQE
	// recvRing is a userspace SRQ (emu.SRQInitAttr.RecvRing): the
	// responder takes WRs from it when wqes is empty.
	recvRing func(*emu.RecvWR) bool
	// resizeRing moves a userspace SRQ to a new ring
	// (emu.SRQInitAttr.RecvRingResize).
	resizeRing func(maxWR, room uint32) error
	err        bool // rxe has no path into the SRQ error state; kept for its checks
}

func srqOf(s *emu.SRQ) *srq { return driver.Priv(s).(*srq) }

// CreateSRQ checks and rounds an SRQ (rxe_srq_chk_init, rxe_srq_from_init):
// only BASIC (EOPNOTSUPP), max_wr 1..2^20 and max_sge <= 27 (EINVAL); a
// max_sge of 0 becomes 1; attr.Attr.MaxWR gets the rounded capacity.
func (r *device) CreateSRQ(s *emu.SRQ, attr *emu.SRQInitAttr, udata *emu.UData) error {
	if attr.Type != emu.SRQBasic {
		return errorf(unix.EOPNOTSUPP, "create SRQ: type %d, rxe has BASIC SRQs only", attr.Type)
	}
	a := &attr.Attr
	if a.MaxWR == 0 || a.MaxWR > uint32(r.attr.MaxSRQWR) {
		return errorf(unix.EINVAL, "create SRQ: max_wr %d not in 1..%d", a.MaxWR, r.attr.MaxSRQWR)
	}
	if a.MaxSGE > uint32(r.attr.MaxSRQSGE) {
		return errorf(unix.EINVAL, "create SRQ: max_sge %d > %d", a.MaxSGE, r.attr.MaxSRQSGE)
	}
	if a.MaxSGE == 0 {
		a.MaxSGE = 1
	}
	if !r.numSRQ.take(r.attr.MaxSRQ) {
		return poolLimit("create SRQ", "max_srq", r.attr.MaxSRQ, r.attr.MaxSRQ)
	}
	a.MaxWR = roundQueue(a.MaxWR)
	driver.SetPriv(s, &srq{core: s, cap: a.MaxWR, maxSGE: a.MaxSGE, limit: a.SRQLimit, recvRing: attr.RecvRing,
		resizeRing: attr.RecvRingResize})
	return nil
}

// ModifySRQ resizes and/or arms the limit (rxe_modify_srq,
// rxe_srq_chk_attr): MAX_WR 0, > 2^20 or below the armed limit and LIMIT
// above 2^20 or the capacity before the modify are EINVAL; a resize below
// the queued count is EINVAL too (the ring cannot shrink under its
// contents). A userspace SRQ moves to a new ring its consumer maps
// (emu.SRQInitAttr.RecvRingResize). A resize that fails leaves the SRQ as
// it was, where rxe_srq_from_attr frees the SRQ's queue (the kernel then
// faults on its next use of the SRQ).
func (r *device) ModifySRQ(s *emu.SRQ, attr *emu.SRQAttr, mask emu.SRQAttrMask) error {
	r.lock()
	defer r.unlock()
	q := srqOf(s)
	if q.err {
		return errorf(unix.EINVAL, "modify SRQ: in error state")
	}
	if mask&emu.SRQMaxWR != 0 {
		switch {
		case attr.MaxWR == 0 || attr.MaxWR > uint32(r.attr.MaxSRQWR):
			return errorf(unix.EINVAL, "modify SRQ: max_wr %d not in 1..%d", attr.MaxWR, r.attr.MaxSRQWR)
		case q.limit != 0 && attr.MaxWR < q.limit:
			return errorf(unix.EINVAL, "modify SRQ: max_wr %d below the armed limit %d", attr.MaxWR, q.limit)
		case roundQueue(attr.MaxWR) < uint32(len(q.wqes)):
			return errorf(unix.EINVAL, "modify SRQ: max_wr %d below the %d queued WQEs", attr.MaxWR, len(q.wqes))
		}
	}
	if mask&emu.SRQLimit != 0 {
		// rxe_srq_chk_attr holds the limit against the queue's
		// index_mask before any resize of the same modify.
		if attr.SRQLimit > uint32(r.attr.MaxSRQWR) || attr.SRQLimit > q.cap {
			return errorf(unix.EINVAL, "modify SRQ: limit %d above the capacity %d", attr.SRQLimit, q.cap)
		}
	}
	if mask&emu.SRQMaxWR != 0 {
		n := roundQueue(attr.MaxWR)
		if q.recvRing != nil {
			if q.resizeRing == nil {
				return errorf(unix.EOPNOTSUPP, "modify SRQ: the SRQ's ring cannot move")
			}
			if err := q.resizeRing(n, n-uint32(len(q.wqes))); err != nil {
				return err
			}
		}
		q.cap = n
		attr.MaxWR = n
	}
	if mask&emu.SRQLimit != 0 {
		q.limit = attr.SRQLimit
	}
	return nil
}

// QuerySRQ returns the capacity, max_sge and the armed limit (0 after the
// limit event fired).
func (r *device) QuerySRQ(s *emu.SRQ) (emu.SRQAttr, error) {
	r.lock()
	defer r.unlock()
	q := srqOf(s)
	if q.err {
		return emu.SRQAttr{}, errorf(unix.EINVAL, "query SRQ: in error state")
	}
	return emu.SRQAttr{MaxWR: q.cap, MaxSGE: q.maxSGE, SRQLimit: q.limit}, nil
}

// DestroySRQ frees the SRQ (the core has checked its use count).
func (r *device) DestroySRQ(s *emu.SRQ) error {
	r.lock()
	defer r.unlock()
	srqOf(s).wqes = nil
	r.numSRQ.put()
	return nil
}

// checkRecv validates one receive WR against a queue; r.mu held.
func checkRecv(wr *emu.RecvWR, maxSGE uint32) (uint64, error) {
	if uint32(len(wr.SGList)) > maxSGE {
		return 0, errorf(unix.EINVAL, "post recv: %d SGEs > max %d", len(wr.SGList), maxSGE)
	}
	var n uint64
	for _, s := range wr.SGList {
		n += uint64(s.Length)
	}
	if n > maxMsgSize {
		return 0, errorf(unix.EINVAL, "post recv: %d bytes > 2^31", n)
	}
	return n, nil
}

// PostSRQRecv queues receive WRs (rxe_post_srq_recv): a full ring is
// ENOMEM, too many SGEs or more than 2^31 bytes EINVAL; bad is the failing
// WR's index and earlier WRs stay posted.
func (r *device) PostSRQRecv(s *emu.SRQ, wrs []emu.RecvWR) (int, error) {
	r.lock()
	defer r.unlock()
	q := srqOf(s)
	for i := range wrs {
		if uint32(len(q.wqes)) >= q.cap {
			return i, errorf(unix.ENOMEM, "post SRQ recv: queue full (%d)", q.cap)
		}
		n, err := checkRecv(&wrs[i], q.maxSGE)
		if err != nil {
			return i, err
		}
		q.wqes = append(q.wqes, recvWQE{wrID: wrs[i].WRID, sgl: append([]emu.SGE(nil), wrs[i].SGList...), length: n})
	}
	return 0, nil
}

// refill moves the WRs a userspace SRQ holds onto wqes (up to the SRQ's
// capacity) and reports whether wqes holds any, so that the limit event
// counts every posted WR; r.mu held.
func (q *srq) refill() bool {
	if q.recvRing == nil {
		return len(q.wqes) > 0
	}
	for uint32(len(q.wqes)) < q.cap {
		var wr emu.RecvWR
		if !q.recvRing(&wr) {
			break
		}
		q.wqes = append(q.wqes, takeRingWQE(&wr, q.maxSGE))
	}
	return len(q.wqes) > 0
}

// takeSRQ removes the oldest SRQ WQE for the responder (get_srq_wqe) and
// fires IB_EVENT_SRQ_LIMIT_REACHED once when an armed limit is crossed:
// the limit is disarmed (0) and the event goes to the SRQ's handler;
// r.mu held.
func (r *device) takeSRQ(q *srq) (recvWQE, bool) {
	if !q.refill() {
		return recvWQE{}, false
	}
	w := q.wqes[0]
	q.wqes = q.wqes[1:]
	if q.limit != 0 && q.core.EventHandler != nil && uint32(len(q.wqes)) < q.limit {
		q.limit = 0
		r.event(emu.Event{Type: emu.EventSRQLimitReached, SRQ: q.core})
	}
	return w, true
}
