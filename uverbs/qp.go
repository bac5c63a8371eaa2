//go:build linux

package uverbs

import (
	"encoding/binary"
	"errors"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"
	"unsafe"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// uqp is a QP of the file (struct ib_uqp_object): the emu QP and rxe's
// user send and receive rings.
//
// The rings are bridged to the emulated rxe rather than executed in place:
// on the POST_SEND doorbell the file converts each rxe_send_wqe the client
// produced into an emu.SendWR and posts it (consuming the slot once the
// driver holds the WR), the responder pulls rxe_recv_wqe entries from the
// receive ring when its own queue is empty (emu.QPInitAttr.RecvRing, since
// librxe posts receives with no doorbell), and the CQ rings receive every
// completion (emu.CQInitAttr.Ring). That keeps one transport engine for
// kernel and user QPs, as rxe has, with the smallest hook in the driver.
type uqp struct {
	f          *File
	qp         *emu.QP
	sq, rq     *queue
	sqMaxSGE   uint32
	sqInline   uint32
	stage      uint32 // bytes of staging per WQE: max_inline_data, at least an ATOMIC_WRITE's 8
	rqMaxSGE   uint32
	staging    uint64 // device memory the inline data of a WQE is copied to
	cookie     uint64
	events     evCounter
	sqCapacity uint32
	// With check: the CQs the QP feeds and its SRQ (cq-can-overflow).
	scq, rcq *ucq
	srq      *usrq
	stalled  bool         // WQEs wait on the ring for room in the device's queue; f.mu
	mcast    []mcastEntry // the multicast groups attached (ib_uqp_object's mcast_list)
	// The doorbell's WRs and their SGE arrays, reused (the device copies
	// them when posted).
	wrs  [doorbellBatch]emu.SendWR
	sges [doorbellBatch][]emu.SGE
}

var (
	sendWqeSize = sizeOf[RxeSendWqe]()
	recvWqeSize = sizeOf[RxeRecvWqe]()
	sgeSize     = sizeOf[RxeSge]()
	dmaOffSend  = int(unsafe.Offsetof(RxeSendWqe{}.Dma))
	dmaOffRecv  = int(unsafe.Offsetof(RxeRecvWqe{}.Dma))
	dmaHdr      = sizeOf[RxeDmaInfo]()
)

// createQP is ib_uverbs_create_qp.
func (c *call) createQP() error {
	cmd, err := request[CreateQp](c)
	if err != nil {
		return err
	}
	ex := ExCreateQp{User_handle: cmd.User_handle, Pd_handle: cmd.Pd_handle, Send_cq_handle: cmd.Send_cq_handle,
		Recv_cq_handle: cmd.Recv_cq_handle, Srq_handle: cmd.Srq_handle, Max_send_wr: cmd.Max_send_wr,
		Max_recv_wr: cmd.Max_recv_wr, Max_send_sge: cmd.Max_send_sge, Max_recv_sge: cmd.Max_recv_sge,
		Max_inline_data: cmd.Max_inline_data, Sq_sig_all: cmd.Sq_sig_all, Qp_type: cmd.Qp_type, Is_srq: cmd.Is_srq}
	o, resp, err := c.makeQP(&ex)
	if err != nil {
		return err
	}
	if err := c.respond(bytesOf(&resp)); err != nil {
		c.f.destroyQP(o)
		return err
	}
	return nil
}

// exCreateQP is ib_uverbs_ex_create_qp: comp_mask bits past
// IB_UVERBS_CREATE_QP_SUP_COMP_MASK are EINVAL, and rxe has no RWQ
// indirection tables.
func (c *call) exCreateQP() error {
	cmd, err := request[ExCreateQp](c)
	if err != nil {
		return err
	}
	if cmd.Comp_mask != 0 {
		return errorf(unix.EINVAL, "EX_CREATE_QP: comp_mask %#x", cmd.Comp_mask)
	}
	o, base, err := c.makeQP(&cmd)
	if err != nil {
		return err
	}
	resp := ExCreateQpResp{Base: base}
	resp.Response_length = c.respLen(sizeOf[ExCreateQpResp]())
	if err := c.respond(bytesOf(&resp)); err != nil {
		c.f.destroyQP(o)
		return err
	}
	return nil
}

// makeQP is the kernel's create_qp with rxe_create_qp: every handle must
// be an object of this file (EINVAL), rxe takes no driver input and wants
// room for its struct rxe_create_qp_resp (EINVAL).
func (c *call) makeQP(cmd *ExCreateQp) (*object, CreateQpResp, error) {
	f := c.f
	var none CreateQpResp
	// The types a user may create (create_qp): a raw packet QP needs
	// CAP_NET_RAW, which a client of the daemon does not have; QP0 and QP1
	// belong to the kernel.
	switch qpstate.Type(cmd.Qp_type) {
	case qpstate.TypeRawPacket:
		return nil, none, errorf(unix.EPERM, "create QP: a raw packet QP needs CAP_NET_RAW")
	case qpstate.TypeRC, qpstate.TypeUC, qpstate.TypeUD, qpstate.TypeXRCIni, qpstate.TypeXRCTgt, qptDriver:
	default:
		return nil, none, errorf(unix.EINVAL, "create QP: type %d", cmd.Qp_type)
	}
	pdo, err := f.get(kindPD, cmd.Pd_handle)
	if err != nil {
		return nil, none, err
	}
	var srq *usrq
	if cmd.Is_srq != 0 {
		so, err := f.get(kindSRQ, cmd.Srq_handle)
		if err != nil {
			return nil, none, err
		}
		srq = so.srq
	}
	rco, err := f.get(kindCQ, cmd.Recv_cq_handle)
	if err != nil {
		return nil, none, err
	}
	sco, err := f.get(kindCQ, cmd.Send_cq_handle)
	if err != nil {
		return nil, none, err
	}
	if len(c.drvIn) > 0 {
		return nil, none, errorf(unix.EINVAL, "create QP: %d bytes of driver input", len(c.drvIn))
	}
	if c.drvOutLen < sizeOf[RxeCreateQpResp]() {
		return nil, none, errorf(unix.EINVAL, "create QP: driver response room %d bytes", c.drvOutLen)
	}
	u := &uqp{f: f, cookie: cmd.User_handle}
	init := &emu.QPInitAttr{SendCQ: sco.cq.cq, RecvCQ: rco.cq.cq, QPType: qpstate.Type(cmd.Qp_type),
		CreateFlags: cmd.Create_flags, SQSigType: emu.SignalReqWR,
		Cap: qpstate.Cap{MaxSendWR: cmd.Max_send_wr, MaxRecvWR: cmd.Max_recv_wr, MaxSendSGE: cmd.Max_send_sge,
			MaxRecvSGE: cmd.Max_recv_sge, MaxInlineData: cmd.Max_inline_data},
		EventHandler: func(e emu.Event) { f.asyncEvent(u.cookie, e.Type, &u.events) }}
	if cmd.Sq_sig_all != 0 {
		init.SQSigType = emu.SignalAllWR
	}
	if srq != nil {
		init.SRQ = srq.srq
	} else {
		init.RecvRing = u.takeRecv
	}
	qp, err := pdo.pd.CreateUserQP(init, &emu.UData{})
	if err != nil {
		return nil, none, wrap("create QP", err)
	}
	u.qp = qp
	cp := init.Cap
	u.sqMaxSGE, u.sqInline, u.rqMaxSGE, u.sqCapacity = cp.MaxSendSGE, cp.MaxInlineData, cp.MaxRecvSGE, cp.MaxSendWR
	o := &object{kind: kindQP, qp: u, userHandle: cmd.User_handle}
	f.newObject(o)
	fail := func(err error) (*object, CreateQpResp, error) {
		f.destroyQP(o)
		return nil, none, err
	}
	var dresp RxeCreateQpResp
	if u.sq, _, err = newQueue(cp.MaxSendWR, uint32(sendWqeSize)+cp.MaxInlineData); err != nil {
		return fail(err)
	}
	dresp.Sq_mi = f.addQueue(u.sq)
	if srq == nil {
		if u.rq, _, err = newQueue(cp.MaxRecvWR, uint32(recvWqeSize)+cp.MaxRecvSGE*uint32(sgeSize)); err != nil {
			return fail(err)
		}
		dresp.Rq_mi = f.addQueue(u.rq)
	}
	u.stage = max(cp.MaxInlineData, atomicWriteLen)
	u.staging, _ = f.dev.Memory().Alloc(int(u.stage) * doorbellBatch)
	if err := c.driverRespond(bytesOf(&dresp)); err != nil {
		return fail(err)
	}
	if f.check != nil {
		f.checkQPCreated(u, srq)
		u.checkFeeds(sco.cq, rco.cq, srq)
	}
	return o, CreateQpResp{Qp_handle: o.handle, Qpn: qp.QPNum(), Max_send_wr: cp.MaxSendWR, Max_recv_wr: cp.MaxRecvWR,
		Max_send_sge: cp.MaxSendSGE, Max_recv_sge: cp.MaxRecvSGE, Max_inline_data: cp.MaxInlineData}, nil
}

// recvWR decodes the rxe_recv_wqe in slot into wr; the SGE count is bounded
// by the queue's and by the slot.
func recvWR(slot []byte, maxSGE uint32, wr *emu.RecvWR) {
	w := load[RxeRecvWqe](slot)
	n := min(w.Dma.Num_sge, maxSGE, uint32((len(slot)-dmaOffRecv-dmaHdr)/sgeSize))
	wr.WRID = w.Id
	wr.SGList = make([]emu.SGE, n)
	for i := range wr.SGList {
		s := load[RxeSge](slot[dmaOffRecv+dmaHdr+i*sgeSize:])
		wr.SGList[i] = emu.SGE{Addr: s.Addr, Length: s.Length, LKey: s.Lkey}
	}
}

// takeRecv moves the oldest receive WQE of the ring into wr (the
// responder calls it under the device lock).
func (u *uqp) takeRecv(wr *emu.RecvWR) bool {
	slot := u.rq.consume()
	if slot == nil {
		return false
	}
	recvWR(slot, u.rqMaxSGE, wr)
	u.rq.advance()
	return true
}

// qptDriver is IB_QPT_DRIVER, a driver-specific QP type (rxe has none).
const qptDriver = 0xFF

// Send flags of rxe_send_wr (IBV_SEND_*).
const sendInline = 1 << 3

// flushTypeOff is the offset of wr.flush.type in rxe_send_wr's union:
// right after the 16 bytes it shares with wr.rdma.
const flushTypeOff = int(unsafe.Sizeof(RxeSendWrRdma{}))

// atomicWriteLen is the length of ATOMIC_WRITE's data.
const atomicWriteLen = 8

// sendWR decodes the rxe_send_wqe in slot, the i'th of a doorbell batch,
// into wr; inline data goes to the i'th part of the QP's staging buffer in
// device memory (the device copies it when the WR is posted). It fails for
// a WQE the device cannot take (an unknown AH).
func (u *uqp) sendWR(slot []byte, i int, wr *emu.SendWR) error {
	w := load[RxeSendWqe](slot)
	*wr = emu.SendWR{WRID: w.Wr.Wr_id, Opcode: emu.WROpcode(w.Wr.Opcode), SendFlags: emu.SendFlags(w.Wr.Send_flags)}
	// ex.imm_data is a __be32 (the wire's bytes), ex.invalidate_rkey a
	// host-order __u32.
	wr.ImmData, wr.InvalidateRKey = binary.BigEndian.Uint32(w.Wr.Ex[:]), binary.NativeEndian.Uint32(w.Wr.Ex[:])
	switch wr.Opcode {
	case emu.WRAtomicCmpAndSwp, emu.WRAtomicFetchAndAdd:
		a := load[RxeSendWrAtomic](w.Wr.Wr[:])
		wr.RemoteAddr, wr.CompareAdd, wr.Swap, wr.RKey = a.Remote_addr, a.Compare_add, a.Swap, a.Rkey
	case emu.WRBindMW:
		u.f.bindWR(load[RxeSendWrMw](w.Wr.Wr[:]), wr)
		return nil
	case emu.WRFlush:
		// wr.flush (Linux 6.2's uapi, newer than the header of the
		// types here): remote_addr, length, rkey, type, level. Its
		// first 16 bytes overlay wr.rdma's remote_addr, rkey and
		// reserved: the rkey is in the slot of rdma's reserved, type
		// and level follow. librxe's wr_flush leaves length 0 and puts
		// the flush's length in dma.length, as rxe's requester reads it.
		r := load[RxeSendWrRdma](w.Wr.Wr[:])
		wr.RemoteAddr, wr.RKey = r.Addr, r.Reserved
		wr.FlushType, wr.FlushLevel = w.Wr.Wr[flushTypeOff], w.Wr.Wr[flushTypeOff+1]
		wr.FlushLen = w.Dma.Length
		return nil
	default:
		r := load[RxeSendWrRdma](w.Wr.Wr[:])
		wr.RemoteAddr, wr.RKey = r.Addr, r.Rkey
	}
	if u.qp.QPType == qpstate.TypeUD || u.qp.QPType == qpstate.TypeGSI {
		ud := load[RxeSendWrUd](w.Wr.Wr[:])
		wr.RemoteQPN, wr.RemoteQKey = ud.Remote_qpn, ud.Remote_qkey
		ah, ok := u.f.ahNums[ud.Ah_num]
		if !ok || ah.PD != u.qp.PD {
			return errorf(unix.EINVAL, "UD WQE: ah_num %d is no AH of the QP's PD", ud.Ah_num)
		}
		wr.AH = ah
	}
	data := slot[dmaOffSend+dmaHdr:]
	if wr.Opcode == emu.WRAtomicWrite {
		// The 8 bytes are in the WQE (dma.atomic_wr, no SGEs): the
		// device takes them at post time, as inline data. A slot with
		// no room for them (a QP of no SGE and no inline data) holds
		// no ATOMIC_WRITE.
		if len(data) < atomicWriteLen {
			return errorf(unix.EINVAL, "ATOMIC_WRITE WQE: its 8 bytes lie past the %d-byte slot", len(slot))
		}
		at := u.staging + uint64(i)*uint64(u.stage)
		if _, err := u.f.dev.Memory().WriteAt(data[:atomicWriteLen], at); err != nil {
			return err
		}
		wr.SendFlags |= emu.SendInline
		wr.SGList = append(u.sges[i][:0], emu.SGE{Addr: at, Length: atomicWriteLen})
		u.sges[i] = wr.SGList
		return nil
	}
	if wr.SendFlags&sendInline != 0 {
		n := min(w.Dma.Length, u.sqInline, uint32(len(data)))
		if n > 0 {
			at := u.staging + uint64(i)*uint64(u.stage)
			if _, err := u.f.dev.Memory().WriteAt(data[:n], at); err != nil {
				return err
			}
			wr.SGList = append(u.sges[i][:0], emu.SGE{Addr: at, Length: n})
			u.sges[i] = wr.SGList
		}
		return nil
	}
	n := min(w.Dma.Num_sge, u.sqMaxSGE, uint32(len(data)/sgeSize))
	sgl := u.sges[i][:0]
	for k := range int(n) {
		s := load[RxeSge](data[k*sgeSize:])
		sgl = append(sgl, emu.SGE{Addr: s.Addr, Length: s.Length, LKey: s.Lkey})
	}
	wr.SGList, u.sges[i] = sgl, sgl
	return nil
}

// doorbell hands the WQEs the client produced on the send ring to the
// device (the requester task rxe runs on librxe's "null post send") and
// returns how many it took. A QP before RTS keeps them until a modify
// takes it there; a WR the device refuses moves the QP to ERR, which
// flushes its send queue; f.mu held.
func (u *uqp) doorbell() (took int) {
	if u.sq == nil {
		return 0
	}
	attr, _, err := u.qp.Query(qpstate.AttrState)
	if err != nil || attr.QPState < qpstate.StateRTS {
		return 0
	}
	if u.f.check != nil && attr.QPState == qpstate.StateErr {
		if slot := u.sq.peek(0); slot != nil && len(slot) >= sendWqeSize {
			u.f.check.PostedInError(u.qp.QPNum(), load[RxeSendWqe](slot).Wr.Wr_id, u.sq.load(qbProducer)&u.sq.mask)
		}
	}
	u.stalled = false
	for {
		// Up to doorbellBatch WQEs in one post; a WQE that does not decode
		// ends the batch, and is refused on its own.
		n := 0
		var bad error
		for n < doorbellBatch {
			slot := u.sq.peek(uint32(n))
			if slot == nil {
				break
			}
			if bad = u.sendWR(slot, n, &u.wrs[n]); bad != nil {
				break
			}
			n++
		}
		if n == 0 {
			if bad == nil {
				return took
			}
			u.sq.advance()
			took++
			u.refuse(u.wrs[0].WRID)
			continue
		}
		if u.f.check != nil {
			// Before the post: a QP in ERR completes them within it.
			for k := range n {
				u.f.check.Posted(u.qp.QPNum(), &u.wrs[k])
			}
			u.checkCQDepth()
		}
		posted, err := u.qp.PostSend(u.wrs[:n])
		if err == nil {
			posted = n
		}
		if u.f.check != nil && posted < n {
			u.f.check.Unposted(u.qp.QPNum(), n-posted)
		}
		for range posted {
			u.sq.advance()
		}
		took += posted
		if err != nil {
			if errors.Is(err, unix.ENOMEM) {
				// The device's queue is full: the next completion on
				// this file rings the doorbell again.
				u.stalled = true
				u.f.stalled.Store(true)
				return took
			}
			u.sq.advance()
			took++
			u.refuse(u.wrs[posted].WRID)
		}
	}
}

// doorbellBatch is how many WQEs one doorbell posts to the device at a
// time.
const doorbellBatch = 16

// refuse handles a WQE the device cannot take (an AH that is not the QP's,
// an opcode or SGE count it refuses): as rxe's requester does, the QP goes
// to ERR and the WQE completes in error, so the client never waits for it.
// rxe reports IB_WC_LOC_QP_OP_ERR for it; here it is flushed with the rest
// of the send queue (IB_WC_WR_FLUSH_ERR).
func (u *uqp) refuse(wrID uint64) {
	_ = u.qp.ModifyWithUdata(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState, &emu.UData{})
	wr := [1]emu.SendWR{{WRID: wrID, Opcode: emu.WRSend, SendFlags: emu.SendSignaled}}
	if u.qp.QPType == qpstate.TypeUD || u.qp.QPType == qpstate.TypeGSI {
		for _, o := range u.f.objects {
			if o.kind == kindAH && o.ah.PD == u.qp.PD {
				wr[0].AH = o.ah // any AH of the PD: the WR is only flushed
				break
			}
		}
	}
	_, _ = u.qp.PostSend(wr[:])
}

// ring rings QP object o's send doorbell (rxe_post_send): a QP before RTS
// is EINVAL, its WQEs staying on the ring for a doorbell after a modify
// takes it to RTS. It returns how many WQEs the doorbell took. f.mu held.
func (f *File) ring(o *object, handle uint32) (took int, err error) {
	if attr, _, qerr := o.qp.qp.Query(qpstate.AttrState); qerr != nil || attr.QPState < qpstate.StateRTS {
		return 0, errorf(unix.EINVAL, "POST_SEND: QP handle %d is not ready to send", handle)
	}
	if f.settle != nil {
		f.settle(func() { took = o.qp.doorbell() })
	} else {
		took = o.qp.doorbell()
	}
	return took, nil
}

// Doorbell rings QP handle's send doorbell as a POST_SEND with no WRs
// (librxe's post_send_db) does, without its response: for a client that
// answered the command itself, knowing the kernel's answer (the QP was at
// RTS or later at its last answered POST_SEND and has not been modified
// since). A handle that names no QP, or a QP before RTS, is EINVAL. It
// returns how many WQEs it took from the send ring: none when the client
// produced none since the last doorbell, or when the device's send queue
// is full (the WQEs wait on the ring for a completion to make room).
func (f *File) Doorbell(handle uint32) (took int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || !f.context {
		return 0, errorf(unix.EINVAL, "doorbell: no context")
	}
	o, err := f.get(kindQP, handle)
	if err != nil {
		return 0, err
	}
	return f.ring(o, handle)
}

// modifyQP is ib_uverbs_modify_qp.
func (c *call) modifyQP() error {
	cmd, err := request[ModifyQp](c)
	if err != nil {
		return err
	}
	// Legacy modify knows IB_QP_ATTR_STANDARD_BITS.
	if qpstate.AttrMask(cmd.Attr_mask)&^qpstate.AttrStandardBits != 0 {
		return errorf(unix.EOPNOTSUPP, "MODIFY_QP: attr_mask %#x", cmd.Attr_mask)
	}
	return c.modify(&cmd, 0)
}

// exModifyQP is ib_uverbs_ex_modify_qp.
func (c *call) exModifyQP() error {
	cmd, err := request[ExModifyQp](c)
	if err != nil {
		return err
	}
	if qpstate.AttrMask(cmd.Base.Attr_mask)&^(qpstate.AttrStandardBits|qpstate.AttrRateLimit) != 0 {
		return errorf(unix.EOPNOTSUPP, "EX_MODIFY_QP: attr_mask %#x", cmd.Base.Attr_mask)
	}
	if err := c.modify(&cmd.Base, cmd.Limit); err != nil {
		return err
	}
	resp := ExModifyQpResp{}
	resp.Response_length = c.respLen(sizeOf[ExModifyQpResp]())
	return c.respond(bytesOf(&resp))
}

// ahFromDest converts struct ib_uverbs_qp_dest (copy_ah_attr_from_uverbs).
func (f *File) ahFromDest(d *QpDest) ib.AHAttr {
	a := ib.AHAttr{Type: kverbs.AHFindType(f.dev, uint32(d.Port_num)), SL: d.Sl, StaticRate: d.Static_rate,
		PortNum: uint32(d.Port_num)}
	if d.Is_global != 0 {
		a.AHFlags = ib.AHGRH
		a.GRH = ib.GlobalRoute{DGID: d.Dgid, FlowLabel: d.Flow_label, SGIDIndex: d.Sgid_index,
			HopLimit: d.Hop_limit, TrafficClass: d.Traffic_class}
	}
	return a
}

// modify is the kernel's modify_qp: ports named by PORT, AV or ALT_PATH
// must exist and states be known (EINVAL); then ib_modify_qp_with_udata.
func (c *call) modify(cmd *ModifyQp, rateLimit uint32) error {
	f := c.f
	o, err := f.get(kindQP, cmd.Qp_handle)
	if err != nil {
		return err
	}
	mask := qpstate.AttrMask(cmd.Attr_mask)
	switch {
	case mask&qpstate.AttrPort != 0 && !f.dev.IsPortValid(uint32(cmd.Port_num)):
		return errorf(unix.EINVAL, "MODIFY_QP: port %d", cmd.Port_num)
	case mask&qpstate.AttrAV != 0 && !f.dev.IsPortValid(uint32(cmd.Dest.Port_num)):
		return errorf(unix.EINVAL, "MODIFY_QP: AV port %d", cmd.Dest.Port_num)
	case mask&qpstate.AttrAltPath != 0 && !f.dev.IsPortValid(uint32(cmd.Alt_port_num)):
		return errorf(unix.EINVAL, "MODIFY_QP: alternate port %d", cmd.Alt_port_num)
	case mask&qpstate.AttrState != 0 && cmd.Qp_state > uint8(qpstate.StateErr):
		return errorf(unix.EINVAL, "MODIFY_QP: qp_state %d", cmd.Qp_state)
	case mask&qpstate.AttrCurState != 0 && cmd.Cur_qp_state > uint8(qpstate.StateErr):
		return errorf(unix.EINVAL, "MODIFY_QP: cur_qp_state %d", cmd.Cur_qp_state)
	}
	attr := qpstate.Attr{QPState: qpstate.State(cmd.Qp_state), CurQPState: qpstate.State(cmd.Cur_qp_state),
		PathMTU: ib.MTU(cmd.Path_mtu), PathMigState: qpstate.MigState(cmd.Path_mig_state), QKey: cmd.Qkey,
		RQPSN: cmd.Rq_psn, SQPSN: cmd.Sq_psn, DestQPNum: cmd.Dest_qp_num, QPAccessFlags: ib.AccessFlags(cmd.Qp_access_flags),
		PKeyIndex: cmd.Pkey_index, AltPKeyIndex: cmd.Alt_pkey_index, EnSQDAsyncNotify: cmd.En_sqd_async_notify,
		MaxRdAtomic: cmd.Max_rd_atomic, MaxDestRdAtomic: cmd.Max_dest_rd_atomic, MinRNRTimer: cmd.Min_rnr_timer,
		PortNum: uint32(cmd.Port_num), Timeout: cmd.Timeout, RetryCnt: cmd.Retry_cnt, RNRRetry: cmd.Rnr_retry,
		AltPortNum: uint32(cmd.Alt_port_num), AltTimeout: cmd.Alt_timeout, RateLimit: rateLimit}
	if mask&qpstate.AttrAV != 0 {
		attr.AHAttr = f.ahFromDest(&cmd.Dest)
	}
	if mask&qpstate.AttrAltPath != 0 {
		attr.AltAHAttr = f.ahFromDest(&cmd.Alt_dest)
	}
	u := c.udata()
	if err := o.qp.qp.ModifyWithUdata(&attr, mask, u); err != nil {
		return wrap("MODIFY_QP", err)
	}
	f.checkModify(o.qp, mask, attr.QPState)
	o.qp.doorbell()
	return nil
}

// destFromAH converts back to struct ib_uverbs_qp_dest (copy_ah_attr_to_uverbs).
func destFromAH(a *ib.AHAttr) QpDest {
	d := QpDest{Sl: a.SL, Static_rate: a.StaticRate, Port_num: uint8(a.PortNum)}
	if a.AHFlags&ib.AHGRH != 0 {
		d.Is_global = 1
		d.Dgid, d.Flow_label, d.Sgid_index = a.GRH.DGID, a.GRH.FlowLabel, a.GRH.SGIDIndex
		d.Hop_limit, d.Traffic_class = a.GRH.HopLimit, a.GRH.TrafficClass
	}
	return d
}

// queryQP is ib_uverbs_query_qp.
func (c *call) queryQP() error {
	cmd, err := request[QueryQp](c)
	if err != nil {
		return err
	}
	o, err := c.f.get(kindQP, cmd.Qp_handle)
	if err != nil {
		return err
	}
	a, init, err := o.qp.qp.Query(qpstate.AttrMask(cmd.Attr_mask))
	if err != nil {
		return wrap("QUERY_QP", err)
	}
	resp := QueryQpResp{Dest: destFromAH(&a.AHAttr), Alt_dest: destFromAH(&a.AltAHAttr),
		Max_send_wr: init.Cap.MaxSendWR, Max_recv_wr: init.Cap.MaxRecvWR, Max_send_sge: init.Cap.MaxSendSGE,
		Max_recv_sge: init.Cap.MaxRecvSGE, Max_inline_data: init.Cap.MaxInlineData,
		Qkey: a.QKey, Rq_psn: a.RQPSN, Sq_psn: a.SQPSN, Dest_qp_num: a.DestQPNum, Qp_access_flags: uint32(a.QPAccessFlags),
		Pkey_index: a.PKeyIndex, Alt_pkey_index: a.AltPKeyIndex, Qp_state: uint8(a.QPState), Cur_qp_state: uint8(a.CurQPState),
		Path_mtu: uint8(a.PathMTU), Path_mig_state: uint8(a.PathMigState), Sq_draining: a.SQDraining,
		Max_rd_atomic: a.MaxRdAtomic, Max_dest_rd_atomic: a.MaxDestRdAtomic, Min_rnr_timer: a.MinRNRTimer,
		Port_num: uint8(a.PortNum), Timeout: a.Timeout, Retry_cnt: a.RetryCnt, Rnr_retry: a.RNRRetry,
		Alt_port_num: uint8(a.AltPortNum), Alt_timeout: a.AltTimeout}
	if init.SQSigType == emu.SignalAllWR {
		resp.Sq_sig_all = 1
	}
	return c.respond(bytesOf(&resp))
}

// destroyQP is ib_uverbs_destroy_qp.
func (c *call) destroyQP() error {
	cmd, err := request[DestroyQp](c)
	if err != nil {
		return err
	}
	o, err := c.f.lookup(kindQP, cmd.Handle)
	if err != nil {
		return err
	}
	if len(o.qp.mcast) > 0 {
		// uverbs_free_qp: a QP still attached to a group stays.
		return errorf(unix.EBUSY, "destroy QP %d: attached to %d multicast groups", cmd.Handle, len(o.qp.mcast))
	}
	checked := c.f.checkQPDestroy(o.qp)
	if err := c.f.destroyQP(o); err != nil {
		return err
	}
	checked()
	resp := DestroyQpResp{Reported: o.qp.events.n.Load()}
	return c.respond(bytesOf(&resp))
}

// destroyQP destroys a QP object with its rings; f.mu held.
func (f *File) destroyQP(o *object) error {
	u := o.qp
	u.detachAll()
	if err := u.qp.DestroyUser(&emu.UData{}); err != nil {
		return wrap("destroy QP", err)
	}
	f.takeBackAsync(&u.events, u.cookie, qpEvents...)
	f.checkQPs.Delete(u.qp.QPNum())
	u.checkFeeds(nil, nil, nil)
	f.dropQueue(u.sq)
	f.dropQueue(u.rq)
	if u.staging != 0 {
		f.dev.Memory().Free(u.staging)
	}
	delete(f.objects, o.handle)
	return nil
}

// NullPostSend reports whether buf is a POST_SEND command with no WRs,
// librxe's doorbell (post_send_db), and returns the QP handle it names.
func NullPostSend(buf []byte) (handle uint32, ok bool) {
	if len(buf) < hdrSize+sizeOf[PostSend]() {
		return 0, false
	}
	if hdr := load[CmdHdr](buf); hdr.Command != CmdPostSend {
		return 0, false
	}
	cmd := load[PostSend](buf[hdrSize:])
	if cmd.Wr_count != 0 {
		return 0, false
	}
	return cmd.Qp_handle, true
}
