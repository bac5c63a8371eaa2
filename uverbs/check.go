//go:build linux

package uverbs

import (
	"fmt"
	"slices"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
)

// SetCheck has p check what the client does with this file (softroce run
// --check): its posts, completions and object lifetimes. Call it before
// the first command; nil checks nothing. Close releases p.
func (f *File) SetCheck(p *check.Program) { f.check = p }

// checkQPCreated starts the checker's tracking of QP u, of SRQ srq or
// its own RQ (srq nil).
func (f *File) checkQPCreated(u *uqp, srq *usrq) {
	qpn, c := u.qp.QPNum(), f.check
	if srq != nil {
		name := fmt.Sprintf("SRQ handle %d", srq.handle)
		u.qp.RNRNAKSent = func() { c.RNRNAKSent(qpn, name, srq.armed.Load()) }
	} else {
		u.qp.RNRNAKSent = func() { c.RNRNAKSent(qpn, "", false) }
	}
	u.qp.PayloadSent = func(psn uint32, wrID uint64, b []byte) { c.PayloadSent(qpn, psn, wrID, b) }
	_, init, err := u.qp.Query(0)
	if err != nil {
		return
	}
	f.check.QPCreated(u.qp.QPNum(), int(u.sqCapacity), init.SQSigType == emu.SignalAllWR)
	if u.sq != nil {
		f.checkQPs.Store(u.qp.QPNum(), u)
	}
}

// checkCompletion tells the checker of a completion of QP qpn written to
// a CQ ring (the device's lock held, f.mu perhaps not).
func (f *File) checkCompletion(qpn uint32, wc *emu.WC) {
	if wc.Opcode >= emu.WCRecv {
		return
	}
	f.check.Completed(qpn, wc.WRID, wc.Status)
	if wc.Status != emu.WCSuccess && wc.Status != emu.WCWRFlushErr {
		if v, ok := f.checkQPs.Load(qpn); ok {
			u := v.(*uqp)
			f.check.ErrorCompleted(qpn, u.sq.load(qbProducer)&u.sq.mask)
		}
	}
}

// checkRing returns how many WQEs on QP u's send ring the device never
// took are signalled, and the first one's wr_id; f.mu held.
func (u *uqp) checkRing(sigAll bool) (n int, first uint64) {
	if u.sq == nil {
		return 0, 0
	}
	for k := range u.sq.count() {
		slot := u.sq.peek(k)
		if slot == nil || len(slot) < sendWqeSize {
			break
		}
		w := load[RxeSendWqe](slot)
		if sigAll || emu.SendFlags(w.Wr.Send_flags)&emu.SendSignaled != 0 {
			if n == 0 {
				first = w.Wr.Wr_id
			}
			n++
		}
	}
	return n, first
}

// checkQPDestroy returns what tells the checker of a QP the client
// destroys, to call once the destroy succeeded (the ring is read now,
// before it goes); f.mu held.
func (f *File) checkQPDestroy(u *uqp) func() {
	if f.check == nil {
		return func() {}
	}
	attr, init, err := u.qp.Query(qpstate.AttrState)
	if err != nil {
		return func() {}
	}
	qpn := u.qp.QPNum()
	var n int
	var first uint64
	// WQEs on the ring of a QP before RTS were refused with their
	// doorbell (EINVAL): the program knows they were not posted.
	if attr.QPState >= qpstate.StateRTS {
		n, first = u.checkRing(init.SQSigType == emu.SignalAllWR)
	}
	return func() { f.check.QPDestroyed(qpn, n, first) }
}

// checkUnpolled tells the checker of the completions left unpolled in CQ
// u's ring; f.mu held.
func (f *File) checkUnpolled(handle uint32, u *ucq) {
	if f.check == nil || u.ring == nil {
		return
	}
	q := u.ring
	cons := q.load(qbConsumer) & q.mask
	for i := cons; i != q.index; i = (i + 1) & q.mask {
		w := load[Wc](q.slot(i))
		f.check.Unpolled(handle, w.Qp_num, w.Wr_id, emu.WCStatus(w.Status))
	}
}

// checkClose tells the checker of the objects the client left for close
// to destroy, and of the completions left in its CQs; f.mu held.
func (f *File) checkClose() {
	if f.check == nil {
		return
	}
	handles := make([]uint32, 0, len(f.objects))
	for h := range f.objects {
		handles = append(handles, h)
	}
	slices.Sort(handles)
	for _, h := range handles {
		o := f.objects[h]
		what := ""
		switch o.kind {
		case kindMR:
			what = fmt.Sprintf("lkey 0x%x", o.mr.LKey())
		case kindQP:
			what = check.QPName(o.qp.qp.QPNum())
		case kindCQ:
			f.checkUnpolled(h, o.cq)
		}
		f.check.Leaked(o.kind.String(), h, what)
	}
}

// checkModify tells the checker of a modify of QP u the client asked for.
func (f *File) checkModify(u *uqp, mask qpstate.AttrMask, state qpstate.State) {
	if f.check != nil && mask&qpstate.AttrState != 0 {
		f.check.QPModified(u.qp.QPNum(), state == qpstate.StateErr)
	}
}

// checkFeeds records (with check) that QP u feeds CQs scq and rcq, with
// SRQ srq or its own RQ; all nil: u goes away. f.mu held.
func (u *uqp) checkFeeds(scq, rcq *ucq, srq *usrq) {
	for _, c := range []*ucq{u.scq, u.rcq} {
		if c != nil {
			c.feeders = slices.DeleteFunc(c.feeders, func(q *uqp) bool { return q == u })
		}
	}
	u.scq, u.rcq, u.srq = scq, rcq, srq
	for _, c := range []*ucq{scq, rcq} {
		if c != nil && !slices.Contains(c.feeders, u) {
			c.feeders = append(c.feeders, u)
		}
	}
}

// pending returns how many WQEs the client produced on q and the device
// has not taken, from the ring's shared indices (the device's own index
// belongs to its lock).
func (q *queue) pending() int {
	return int((q.load(qbProducer) - q.load(qbConsumer)) & q.mask)
}

// checkCQDepth tells the checker when the completions that QP u's CQs may
// have to hold at once exceed their depth: unpolled ones, the signalled
// send WRs and the receive WRs outstanding on every QP feeding them; f.mu
// held.
func (u *uqp) checkCQDepth() {
	for i, c := range []*ucq{u.scq, u.rcq} {
		if c == nil || c.ring == nil || (i == 1 && c == u.scq) {
			continue
		}
		unpolled, sends, recvs := c.ring.pending(), 0, 0
		var srqs []*usrq
		for _, q := range c.feeders {
			if q.scq == c {
				sends += u.f.check.Signalled(q.qp.QPNum())
			}
			if q.rcq != c {
				continue
			}
			switch {
			case q.rq != nil:
				recvs += q.rq.pending()
			case q.srq != nil && q.srq.rq != nil && !slices.Contains(srqs, q.srq):
				srqs = append(srqs, q.srq)
				recvs += q.srq.rq.pending()
			}
		}
		if depth := c.cq.CQE; unpolled+sends+recvs > depth {
			u.f.check.CQMayOverflow(c.handle, depth, unpolled, sends, recvs, u.qp.QPNum())
		}
	}
}
