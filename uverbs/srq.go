//go:build linux

package uverbs

import (
	"sync/atomic"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// usrq is an SRQ of the file: the emu SRQ and rxe's user receive ring.
type usrq struct {
	f      *File
	srq    *emu.SRQ
	rq     *queue
	maxSGE uint32
	num    uint32 // srq_num of rxe's response
	events evCounter
	// mmapInfo is where the MODIFY_SRQ in progress wants the mminfo of a
	// resized ring (struct rxe_modify_srq_cmd's mmap_info_addr).
	mmapInfo uint64
	handle   uint32      // the SRQ's handle, as findings name it
	armed    atomic.Bool // the client armed the limit event at least once
}

// takeRecv moves the oldest receive WQE of the ring into wr (the
// responder calls it under the device lock).
func (u *usrq) takeRecv(wr *emu.RecvWR) bool {
	slot := u.rq.consume()
	if slot == nil {
		return false
	}
	recvWR(slot, u.maxSGE, wr)
	u.rq.advance()
	return true
}

// createSRQ is ib_uverbs_create_srq with rxe_create_srq: rxe wants room
// for its struct rxe_create_srq_resp (EINVAL) and answers with the ring's
// mminfo and the SRQ number.
func (c *call) createSRQ() error {
	cmd, err := request[CreateSrq](c)
	if err != nil {
		return err
	}
	f := c.f
	pdo, err := f.get(kindPD, cmd.Pd_handle)
	if err != nil {
		return err
	}
	if c.drvOutLen < sizeOf[RxeCreateSrqResp]() {
		return errorf(unix.EINVAL, "create SRQ: driver response room %d bytes", c.drvOutLen)
	}
	u := &usrq{f: f}
	attr := &emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: cmd.Max_wr, MaxSGE: cmd.Max_sge, SRQLimit: cmd.Srq_limit},
		Type: emu.SRQBasic, RecvRing: u.takeRecv, RecvRingResize: u.resizeRing,
		EventHandler: func(e emu.Event) { f.asyncEvent(cmd.User_handle, e.Type, &u.events) }}
	srq, err := pdo.pd.CreateSRQ(attr)
	if err != nil {
		return wrap("create SRQ", err)
	}
	u.srq, u.maxSGE = srq, attr.Attr.MaxSGE
	f.srqNum++
	u.num = f.srqNum
	o := &object{kind: kindSRQ, srq: u, userHandle: cmd.User_handle}
	f.newObject(o)
	u.handle = o.handle
	u.armed.Store(cmd.Srq_limit != 0)
	if u.rq, _, err = newQueue(attr.Attr.MaxWR, u.wqeSize()); err != nil {
		f.destroySRQ(o)
		return err
	}
	dresp := RxeCreateSrqResp{Mi: f.addQueue(u.rq), Num: u.num}
	if err := c.driverRespond(bytesOf(&dresp)); err != nil {
		f.destroySRQ(o)
		return err
	}
	resp := CreateSrqResp{Srq_handle: o.handle, Max_wr: attr.Attr.MaxWR, Max_sge: attr.Attr.MaxSGE}
	if err := c.respond(bytesOf(&resp)); err != nil {
		f.destroySRQ(o)
		return err
	}
	return nil
}

// wqeSize is the size of one receive WQE of the SRQ's ring.
func (u *usrq) wqeSize() uint32 { return uint32(recvWqeSize) + u.maxSGE*uint32(sgeSize) }

// modifySRQ is ib_uverbs_modify_srq with rxe_modify_srq: the driver's
// request is struct rxe_modify_srq_cmd (shorter is EINVAL, whatever the
// mask); a resize (IB_SRQ_MAX_WR) moves the SRQ to a new ring, whose
// mminfo goes to the address the request names, and librxe maps it in
// place of the old.
func (c *call) modifySRQ() error {
	cmd, err := request[ModifySrq](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindSRQ, cmd.Srq_handle)
	if err != nil {
		return err
	}
	if len(c.drvIn) < sizeOf[RxeModifySrqCmd]() {
		return errorf(unix.EINVAL, "MODIFY_SRQ: driver request of %d bytes", len(c.drvIn))
	}
	drv := load[RxeModifySrqCmd](c.drvIn)
	u := o.srq
	u.mmapInfo = drv.Info_addr
	err = u.srq.Modify(&emu.SRQAttr{MaxWR: cmd.Max_wr, SRQLimit: cmd.Srq_limit}, emu.SRQAttrMask(cmd.Attr_mask))
	u.mmapInfo = 0
	if err != nil {
		return wrap("MODIFY_SRQ", err)
	}
	if emu.SRQAttrMask(cmd.Attr_mask)&emu.SRQLimit != 0 && cmd.Srq_limit != 0 {
		u.armed.Store(true)
	}
	return nil
}

// resizeRing moves the SRQ to a ring of maxWR entries (rxe_queue_resize
// on a user queue): the WQEs between the device's consumer index and the
// client's producer index, more than room of them being EINVAL
// (resize_finish), go in order to the start of a new ring, whose mminfo is
// written to the address of the MODIFY_SRQ request (EFAULT if it cannot
// be); the old ring is forgotten (the client's mapping of it stays valid
// until it unmaps it). It runs under the device lock, inside MODIFY_SRQ
// (f.mu held).
func (u *usrq) resizeRing(maxWR, room uint32) error {
	old := u.rq
	prod := old.load(qbProducer) & old.mask
	count := (prod - old.index) & old.mask
	if count > room {
		return errorf(unix.EINVAL, "resize SRQ: %d entries below the %d WQEs posted", maxWR, count)
	}
	q, _, err := newQueue(maxWR, u.wqeSize())
	if err != nil {
		return err
	}
	mi := u.f.addQueue(q)
	if _, err := u.f.mem.WriteAt(bytesOf(&mi), u.mmapInfo); err != nil {
		u.f.dropQueue(q)
		return errorf(unix.EFAULT, "resize SRQ: mminfo at %#x: %v", u.mmapInfo, err)
	}
	for i := range count {
		copy(q.slot(i), old.slot(old.index+i))
	}
	q.store(qbProducer, count)
	u.rq = q
	u.f.dropQueue(old)
	return nil
}

// querySRQ is ib_uverbs_query_srq.
func (c *call) querySRQ() error {
	cmd, err := request[QuerySrq](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindSRQ, cmd.Handle)
	if err != nil {
		return err
	}
	a, err := o.srq.srq.Query()
	if err != nil {
		return wrap("QUERY_SRQ", err)
	}
	resp := QuerySrqResp{Max_wr: a.MaxWR, Max_sge: a.MaxSGE, Srq_limit: a.SRQLimit}
	return c.respond(bytesOf(&resp))
}

// destroySRQ is ib_uverbs_destroy_srq: EBUSY while QPs use it.
func (c *call) destroySRQ() error {
	cmd, err := request[DestroySrq](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindSRQ, cmd.Handle)
	if err != nil {
		return err
	}
	if err := c.f.destroySRQ(o); err != nil {
		return err
	}
	resp := DestroySrqResp{Reported: o.srq.events.n.Load()}
	return c.respond(bytesOf(&resp))
}

// destroySRQ destroys an SRQ object with its ring; f.mu held.
func (f *File) destroySRQ(o *object) error {
	if err := o.srq.srq.DestroyUser(&emu.UData{}); err != nil {
		return wrap("destroy SRQ", err)
	}
	f.takeBackAsync(&o.srq.events, o.userHandle, srqEvents...)
	f.dropQueue(o.srq.rq)
	delete(f.objects, o.handle)
	return nil
}
