//go:build linux

package uverbs

import (
	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// usrq is an SRQ of the file: the emu SRQ and rxe's user receive ring.
type usrq struct {
	srq    *emu.SRQ
	rq     *queue
	maxSGE uint32
	num    uint32 // srq_num of rxe's response
	events evCounter
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
	u := &usrq{}
	attr := &emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: cmd.Max_wr, MaxSGE: cmd.Max_sge, SRQLimit: cmd.Srq_limit},
		Type: emu.SRQBasic, RecvRing: u.takeRecv,
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
	if u.rq, _, err = newQueue(attr.Attr.MaxWR, uint32(recvWqeSize)+attr.Attr.MaxSGE*uint32(sgeSize)); err != nil {
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

// modifySRQ is ib_uverbs_modify_srq. Arming the limit works; resizing a
// user SRQ would move its ring (rxe maps a new one), which this device
// does not do: EOPNOTSUPP.
func (c *call) modifySRQ() error {
	cmd, err := request[ModifySrq](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindSRQ, cmd.Srq_handle)
	if err != nil {
		return err
	}
	mask := emu.SRQAttrMask(cmd.Attr_mask)
	if mask&emu.SRQMaxWR != 0 {
		return errorf(unix.EOPNOTSUPP, "MODIFY_SRQ: resizing a user SRQ")
	}
	if err := o.srq.srq.Modify(&emu.SRQAttr{MaxWR: cmd.Max_wr, SRQLimit: cmd.Srq_limit}, mask); err != nil {
		return wrap("MODIFY_SRQ", err)
	}
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
