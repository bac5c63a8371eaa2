//go:build linux

package uverbs

import (
	"encoding/binary"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// cqeSize is the size of one slot of a CQ ring: rxe sizes its CQ elements
// as the kernel's struct rxe_cqe (the union of struct ib_wc and struct
// ib_uverbs_wc), 72 bytes on 64-bit kernels, rounded up to a power of two.
// librxe reads the stride from the ring's log2_elem_size.
const cqeSize = 72

// ucq is a CQ of the file (struct ib_ucq_object): the emu CQ, its ring
// and its completion channel.
type ucq struct {
	f        *File
	cq       *emu.CQ
	ring     *queue
	channel  *eventFile
	cookie   uint64    // user_handle: cq_context in events
	compSent evCounter // completion events written to the channel
	async    evCounter // async events reported
	resizing *call     // the RESIZE_CQ in progress, whose response gets the new ring's mminfo
	handle   uint32    // the CQ's handle, as findings name it
	feeders  []*uqp    // with check: the QPs whose send or receive CQ it is; f.mu
}

// post writes a completion into the ring (the device calls it under its
// lock); false when the client has not consumed room for it.
func (u *ucq) post(wc emu.WC) bool {
	slot := u.ring.produce()
	if u.f.check != nil && wc.QP != nil {
		if slot == nil {
			u.f.check.CQOverflowed(u.handle, int(u.ring.mask), wc.QP.QPNum(), wc.WRID)
		} else {
			u.f.checkCompletion(wc.QP.QPNum(), &wc)
		}
	}
	if slot == nil {
		return false
	}
	// A user CQE carries the flags rxe sets for one (rxe_resp.c
	// do_complete): GRH, immediate data, invalidate; the rest of ib_wc's
	// flags (network header type, SMAC) are kernel-only and mean other
	// things to libibverbs.
	flags := wc.WCFlags & (emu.WCGRH | emu.WCWithImm | emu.WCWithInvalidate)
	w := Wc{Wr_id: wc.WRID, Status: uint32(wc.Status), Opcode: uint32(wc.Opcode), Vendor_err: wc.VendorErr,
		Byte_len: wc.ByteLen, Src_qp: wc.SrcQP, Wc_flags: uint32(flags), Pkey_index: wc.PKeyIndex,
		Slid: uint16(wc.SLID), Sl: wc.SL, Dlid_path_bits: wc.DLIDPathBits, Port_num: uint8(wc.PortNum)}
	if wc.QP != nil {
		w.Qp_num = wc.QP.QPNum()
	}
	// ex.imm_data is a __be32 (the wire's bytes), ex.invalidate_rkey a
	// host-order __u32.
	switch {
	case flags&emu.WCWithInvalidate != 0:
		binary.NativeEndian.PutUint32(w.Ex[:], wc.InvalidateRKey)
	case flags&emu.WCWithImm != 0:
		binary.BigEndian.PutUint32(w.Ex[:], wc.ImmData)
	}
	copy(slot, bytesOf(&w))
	u.ring.publish()
	if u.f.stalled.Load() && u.f.retrying.CompareAndSwap(false, true) {
		go u.f.retryDoorbells() // not here: the device's lock is held
	}
	return true
}

// retryDoorbells rings the doorbell of every QP whose WQEs waited for room
// in the device's send queue.
func (f *File) retryDoorbells() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retrying.Store(false)
	f.stalled.Store(false)
	if f.closed {
		return
	}
	for _, o := range f.objects {
		if o.kind == kindQP && o.qp.stalled {
			o.qp.doorbell()
		}
	}
}

// createCQ is ib_uverbs_create_cq.
func (c *call) createCQ() error {
	cmd, err := request[CreateCq](c)
	if err != nil {
		return err
	}
	u, err := c.makeCQ(cmd.User_handle, cmd.Cqe, cmd.Comp_vector, cmd.Comp_channel, 0)
	if err != nil {
		return err
	}
	resp := CreateCqResp{Handle: u.handle, Cqe: uint32(u.cq.cq.CQE)}
	if err := c.respond(bytesOf(&resp)); err != nil {
		c.f.destroyCQ(u)
		return err
	}
	return nil
}

// exCreateCQ is ib_uverbs_ex_create_cq: comp_mask must be zero (EINVAL).
func (c *call) exCreateCQ() error {
	cmd, err := request[ExCreateCq](c)
	if err != nil {
		return err
	}
	if cmd.Comp_mask != 0 || cmd.Reserved != 0 {
		return errorf(unix.EINVAL, "EX_CREATE_CQ: comp_mask %#x", cmd.Comp_mask)
	}
	u, err := c.makeCQ(cmd.User_handle, cmd.Cqe, cmd.Comp_vector, cmd.Comp_channel, cmd.Flags)
	if err != nil {
		return err
	}
	resp := ExCreateCqResp{Base: CreateCqResp{Handle: u.handle, Cqe: uint32(u.cq.cq.CQE)}}
	resp.Response_length = c.respLen(sizeOf[ExCreateCqResp]())
	if err := c.respond(bytesOf(&resp)); err != nil {
		c.f.destroyCQ(u)
		return err
	}
	return nil
}

// makeCQ is the kernel's create_cq with rxe's rxe_create_cq: the comp
// vector must exist and the channel be one of the file's (EINVAL); rxe
// wants room for its struct rxe_create_cq_resp (EINVAL) and answers with
// the mminfo of the ring.
func (c *call) makeCQ(cookie uint64, cqe, vector uint32, channel int32, flags uint32) (*object, error) {
	f := c.f
	if int(vector) >= f.dev.Query().NumCompVectors {
		return nil, errorf(unix.EINVAL, "create CQ: comp_vector %d", vector)
	}
	ch, err := f.channelOf(channel)
	if err != nil {
		return nil, err
	}
	if c.drvOutLen < sizeOf[RxeCreateCqResp]() {
		return nil, errorf(unix.EINVAL, "create CQ: driver response room %d bytes", c.drvOutLen)
	}
	u := &ucq{f: f, channel: ch, cookie: cookie}
	cq, err := f.dev.CreateCQ(emu.CQInitAttr{CQE: int(int32(cqe)), CompVector: int(vector), Flags: flags,
		CompHandler: func(*emu.CQ) { u.notify() }, EventHandler: func(e emu.Event) { u.event(e) },
		Ring: u.post, RingResize: u.resizeRing})
	if err != nil {
		return nil, wrap("create CQ", err)
	}
	ring, _, err := newQueue(uint32(cq.CQE), cqeSize)
	if err != nil {
		cq.Destroy()
		return nil, err
	}
	u.cq, u.ring = cq, ring
	o := &object{kind: kindCQ, cq: u, userHandle: cookie}
	u.handle = f.newObject(o)
	resp := RxeCreateCqResp{Mi: f.addQueue(ring)}
	if err := c.driverRespond(bytesOf(&resp)); err != nil {
		f.destroyCQ(o)
		return nil, err
	}
	return o, nil
}

// resizeCQ is ib_uverbs_resize_cq with rxe_resize_cq: rxe wants room for
// its struct rxe_resize_cq_resp (EINVAL) and answers with the mminfo of a
// new ring holding the completions the client has not polled; librxe
// unmaps the old ring and maps the new one. The response's cqe is the new
// capacity.
func (c *call) resizeCQ() error {
	cmd, err := request[ResizeCq](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindCQ, cmd.Handle)
	if err != nil {
		return err
	}
	if c.drvOutLen < sizeOf[RxeResizeCqResp]() {
		return errorf(unix.EINVAL, "RESIZE_CQ: driver response room %d bytes", c.drvOutLen)
	}
	u := o.cq
	u.resizing = c
	err = u.cq.Resize(int(int32(cmd.Cqe)))
	u.resizing = nil
	if err != nil {
		return wrap("RESIZE_CQ", err)
	}
	resp := ResizeCqResp{Cqe: uint32(u.cq.CQE)}
	return c.respond(bytesOf(&resp))
}

// resizeRing moves the CQ to a ring of n entries (rxe_queue_resize on a
// user queue): the completions between the client's consumer index and
// the device's producer index, more than cqe of them being EINVAL
// (rxe_cq_chk_attr), go in order to the start of a new ring, whose mminfo
// the RESIZE_CQ response carries (EFAULT if it cannot be written); the old
// ring is forgotten (the client's mapping of it stays valid until it
// unmaps it). It runs under the device lock, inside RESIZE_CQ (f.mu held).
func (u *ucq) resizeRing(cqe, n int) error {
	c := u.resizing
	if c == nil {
		return errorf(unix.EOPNOTSUPP, "resize CQ: not through RESIZE_CQ")
	}
	old := u.ring
	cons := old.load(qbConsumer)
	count := (old.index - cons) & old.mask
	if uint32(cqe) < count {
		return errorf(unix.EINVAL, "resize CQ: cqe %d below the %d completions not polled", cqe, count)
	}
	q, _, err := newQueue(uint32(n), cqeSize)
	if err != nil {
		return err
	}
	resp := RxeResizeCqResp{Mi: u.f.addQueue(q)}
	if err := c.driverRespond(bytesOf(&resp)); err != nil {
		u.f.dropQueue(q)
		return err
	}
	for i := range count {
		copy(q.slot(i), old.slot(cons+i))
	}
	q.index = count
	q.store(qbProducer, count)
	u.ring = q
	u.f.dropQueue(old)
	return nil
}

// notify is the CQ's completion handler (ib_uverbs_comp_handler): one
// ib_uverbs_comp_event_desc on the channel.
//
// Event handlers run wherever the device completes work, possibly inside a
// command of this file: they take no lock of the file.
func (u *ucq) notify() {
	if u.channel != nil {
		u.channel.sendComp(u.cookie, &u.compSent)
	}
}

// event is the CQ's async event handler (ib_uverbs_cq_event_handler).
func (u *ucq) event(e emu.Event) {
	u.f.asyncEvent(u.cookie, e.Type, &u.async)
}

// asyncEvent queues an object's event on the async event file.
func (f *File) asyncEvent(cookie uint64, t emu.EventType, counter *evCounter) {
	if async := f.async.Load(); async != nil {
		async.sendAsync(cookie, uint32(t), counter)
	}
}

// reqNotifyCQ is ib_uverbs_req_notify_cq.
func (c *call) reqNotifyCQ() error {
	cmd, err := request[ReqNotifyCq](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindCQ, cmd.Cq_handle)
	if err != nil {
		return err
	}
	flags := emu.CQNextComp
	if cmd.Solicited_only != 0 {
		flags = emu.CQSolicited
	}
	o.cq.cq.ReqNotify(flags)
	return nil
}

// destroyCQ is ib_uverbs_destroy_cq: EBUSY while a QP uses the CQ; the
// response counts the events the client read.
func (c *call) destroyCQ() error {
	cmd, err := request[DestroyCq](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindCQ, cmd.Handle)
	if err != nil {
		return err
	}
	u := o.cq
	c.f.checkUnpolled(o.handle, u)
	if err := c.f.destroyCQ(o); err != nil {
		return err
	}
	resp := DestroyCqResp{Comp_events_reported: u.compSent.n.Load(), Async_events_reported: u.async.n.Load()}
	return c.respond(bytesOf(&resp))
}

// destroyCQ destroys a CQ object and takes its unread events back from the
// channel; f.mu held.
func (f *File) destroyCQ(o *object) error {
	u := o.cq
	if err := u.cq.DestroyUser(&emu.UData{}); err != nil {
		return wrap("destroy CQ", err)
	}
	if u.channel != nil {
		u.channel.unread(func(rec []byte) bool { return cookieOf(rec) == u.cookie }, &u.compSent)
	}
	f.takeBackAsync(&u.async, u.cookie, cqEvents...)
	f.dropQueue(u.ring)
	delete(f.objects, o.handle)
	return nil
}

// dropQueue forgets a queue's mmap offset and unmaps it; f.mu held.
func (f *File) dropQueue(q *queue) {
	if q == nil {
		return
	}
	delete(f.mmaps, q.offset)
	q.close()
}
