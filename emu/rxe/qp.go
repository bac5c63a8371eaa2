package rxe

import (
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// wqeState is where a send WQE is in its life (enum wqe_state).
type wqeState uint8

const (
	wqePosted  wqeState = iota // queued, not started (held in SQD)
	wqePending                 // started: packets going out (next < npkts) or awaiting the response
	wqeDone                    // finished (status set), waiting for in-order completion
)

// sendWQE is a posted send work request with its transport state.
type sendWQE struct {
	wr       emu.SendWR
	inline   []byte
	length   uint64
	state    wqeState
	status   emu.WCStatus
	firstPSN uint32
	lastPSN  uint32
	npkts    uint32 // PSNs the WQE consumes (a READ: its response packets)
	next     uint32 // index of the next packet to send (npkts: all sent)
	ssn      uint32
	signaled bool
}

// qp is rxe's queue pair context (struct rxe_qp).
type qp struct {
	r      *device
	core   *emu.QP
	typ    qpstate.Type
	qpn    uint32 // on the wire (1 for GSI)
	idx    uint32 // pool index
	pd     *emu.PD
	scq    *cq
	rcq    *cq
	srq    *srq
	sigAll bool
	valid  bool
	// recvRing is a userspace receive queue (emu.QPInitAttr.RecvRing):
	// the responder takes WRs from it when rq is empty.
	recvRing func(*emu.RecvWR) bool

	state    qpstate.State
	attr     qpstate.Attr // the stored attribute block (rxe qp->attr)
	draining bool

	sq          []*sendWQE
	sqCap       uint32
	sqMaxSGE    uint32
	sqMaxInline uint32
	rq          []recvWQE
	rqCap       uint32
	rqMaxSGE    uint32

	reqPSN    uint32 // requester: next PSN to send
	compPSN   uint32 // completer: oldest unacknowledged PSN
	respPSN   uint32 // responder: next expected PSN
	ssn       uint32 // send sequence number
	msn       uint32 // responder message sequence number
	credits   int    // initiator depth left (max_rd_atomic, rounded)
	respRes   int    // responder resources (max_dest_rd_atomic, rounded): slots of the replay ring
	retryLeft uint8
	rnrLeft   uint8
	sport     uint16     // UDP source port
	ahead     *readAhead // the requester's read ahead (nil until it reads from another address space)

	xport // transport state (transport.go, req.go, resp.go, comp.go)
}

func qpOf(c *emu.QP) *qp { return driver.Priv(c).(*qp) }

// CreateQP checks and creates a QP (rxe_create_qp, rxe_qp_chk_init,
// rxe_qp_from_init), rounding capacities as rxe does and
// writing them back into init.Cap.
func (r *device) CreateQP(c *emu.QP, init *emu.QPInitAttr, udata *emu.UData) error {
	if init.CreateFlags != 0 {
		return errorf(unix.EOPNOTSUPP, "create QP: create_flags %#x", init.CreateFlags)
	}
	switch init.QPType {
	case qpstate.TypeGSI, qpstate.TypeRC, qpstate.TypeUC, qpstate.TypeUD:
	default:
		return errorf(unix.EOPNOTSUPP, "create QP: type %v (rxe creates GSI, RC, UC and UD only)", init.QPType)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return errorf(unix.EINVAL, "create QP: missing send or receive CQ")
	}
	cp := &init.Cap
	switch {
	case cp.MaxSendWR > uint32(r.attr.MaxQPWR):
		return errorf(unix.EINVAL, "create QP: max_send_wr %d > %d", cp.MaxSendWR, r.attr.MaxQPWR)
	case cp.MaxSendSGE > uint32(r.attr.MaxSendSGE):
		return errorf(unix.EINVAL, "create QP: max_send_sge %d > %d", cp.MaxSendSGE, r.attr.MaxSendSGE)
	case cp.MaxInlineData > uint32(r.attr.MaxInlineData):
		return errorf(unix.EINVAL, "create QP: max_inline_data %d > %d", cp.MaxInlineData, r.attr.MaxInlineData)
	case init.SRQ == nil && cp.MaxRecvWR > uint32(r.attr.MaxQPWR):
		return errorf(unix.EINVAL, "create QP: max_recv_wr %d > %d", cp.MaxRecvWR, r.attr.MaxQPWR)
	case init.SRQ == nil && cp.MaxRecvSGE > uint32(r.attr.MaxRecvSGE):
		return errorf(unix.EINVAL, "create QP: max_recv_sge %d > %d", cp.MaxRecvSGE, r.attr.MaxRecvSGE)
	}
	if udata != nil && len(udata.In) > 0 {
		return errorf(unix.EINVAL, "create QP: %d bytes of unexpected driver input", len(udata.In))
	}
	r.lock()
	defer r.unlock()
	if init.QPType == qpstate.TypeGSI {
		if init.PortNum != 1 {
			return errorf(unix.EINVAL, "create GSI QP: port %d", init.PortNum)
		}
		if r.gsi && r.madSlot != madHandoff {
			return errorf(unix.EINVAL, "create GSI QP: port 1 already has one")
		}
	}
	q := &qp{r: r, core: c, typ: init.QPType, pd: c.PD, scq: cqOf(init.SendCQ), rcq: cqOf(init.RecvCQ),
		sigAll: init.SQSigType == emu.SignalAllWR, valid: true, recvRing: init.RecvRing}
	if init.SRQ != nil {
		q.srq = srqOf(init.SRQ)
	}
	var idx uint32
	ok := true
	if q.typ == qpstate.TypeGSI && r.madSlot == madHandoff {
		idx = minQPIndex
		r.qpPool.used[idx] = q
		r.madSlot = madNone
	} else {
		if err := poolLimit("create QP", "max_qp", len(r.qpPool.used), r.attr.MaxQP); err != nil {
			return err
		}
		idx, ok = r.qpPool.alloc(q)
	}
	if !ok {
		return errorf(unix.ENOMEM, "create QP: QP numbers exhausted")
	}
	q.idx, q.qpn = idx, idx
	if q.typ == qpstate.TypeGSI {
		q.qpn = gsiQPN
		r.gsi = true
	}
	// Send queue: depth rounded; the WQE data area is max(16 x SGEs,
	// inline) and both limits are reported from it.
	q.sqCap = roundQueue(cp.MaxSendWR)
	area := max(cp.MaxSendSGE*16, cp.MaxInlineData)
	q.sqMaxSGE, q.sqMaxInline = area/16, area
	if q.srq == nil {
		q.rqCap, q.rqMaxSGE = roundQueue(cp.MaxRecvWR), cp.MaxRecvSGE
	}
	cp.MaxSendWR, cp.MaxSendSGE, cp.MaxInlineData = q.sqCap, q.sqMaxSGE, q.sqMaxInline
	cp.MaxRecvWR, cp.MaxRecvSGE = q.rqCap, q.rqMaxSGE
	q.attr.PathMTU = ib.MTU256
	q.attr.PortNum = 1
	q.sport = wire.RXEInitialUDPSport(q.qpn)
	r.qps[q.qpn] = q
	driver.SetQPNum(c, q.qpn)
	driver.SetPriv(c, q)
	if udata != nil {
		// rxe answers with the mmap info of the user rings; the emulator
		// reports the QPN instead.
		var out [4]byte
		out[0], out[1], out[2] = byte(q.qpn), byte(q.qpn>>8), byte(q.qpn>>16)
		if len(udata.Out) >= len(out) {
			udata.CopyTo(out[:])
		}
	}
	return nil
}

// callerOf turns udata into the uverbs caller description.
func callerOf(u *emu.UData) qpstate.Caller {
	if u == nil {
		return qpstate.Caller{}
	}
	return qpstate.Caller{User: true, Extended: u.Extended, Unprivileged: !u.Privileged}
}

// ModifyQP validates with the configured qpstate.Policy and applies the modify
// (rxe_modify_qp): attributes in rxe_qp_from_attr's order with their effects,
// then the state and its side effect (rxe_qp_reset, rxe_qp_error, rxe_qp_drain).
// Everything is checked before anything changes, so a failure leaves the QP
// exactly as it was — unlike rxe, which can fail reallocating the responder
// resources after the state changed; the emulator cannot fail there.
func (r *device) ModifyQP(c *emu.QP, attr *qpstate.Attr, mask qpstate.AttrMask, udata *emu.UData) (uint32, error) {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	if !q.valid {
		return 0, errorf(unix.EINVAL, "modify QP %#x: destroyed", q.qpn)
	}
	ctx := qpstate.QPContext{State: q.state, Type: q.typ, Port: c.Port, SQDraining: q.draining,
		HasSRQ: q.srq != nil, Caller: callerOf(udata)}
	v, err := r.cfg.Policy.Validate(ctx, attr, mask, &r.limits)
	if err != nil {
		return 0, err
	}
	mask = v.Mask
	// rxe sets the state first and applies the attributes after; its
	// side effects run in tasks that see the new attributes. Applying the
	// attributes first and running the side effect synchronously after
	// gives the same result, deterministically.
	q.apply(attr, mask)
	if mask&qpstate.AttrState != 0 {
		r.enter(q, v.Next)
	}
	var port uint32
	switch {
	case mask&qpstate.AttrPort != 0:
		port = attr.PortNum
	case mask&qpstate.AttrAV != 0:
		port = attr.AHAttr.PortNum
	}
	return port, nil
}

// apply stores the attributes of mask (rxe_qp_from_attr).
func (q *qp) apply(a *qpstate.Attr, mask qpstate.AttrMask) {
	s := &q.attr
	if mask&qpstate.AttrMaxQPRdAtomic != 0 {
		s.MaxRdAtomic = uint8(qpstate.RoundUpPow2(uint32(a.MaxRdAtomic)))
		q.credits = int(s.MaxRdAtomic)
	}
	if mask&qpstate.AttrMaxDestRdAtomic != 0 {
		s.MaxDestRdAtomic = uint8(qpstate.RoundUpPow2(uint32(a.MaxDestRdAtomic)))
		q.respRes = int(s.MaxDestRdAtomic) // the replay ring is reallocated: replay state is lost
		q.res, q.resNext = nil, 0
	}
	if mask&qpstate.AttrCurState != 0 {
		s.CurQPState = a.QPState // rxe stores qp_state here (harmless kernel typo)
	}
	if mask&qpstate.AttrEnSQDAsyncNotify != 0 {
		s.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&qpstate.AttrAccessFlags != 0 {
		s.QPAccessFlags = a.QPAccessFlags
	}
	if mask&qpstate.AttrPKeyIndex != 0 {
		s.PKeyIndex = a.PKeyIndex
	}
	if mask&qpstate.AttrPort != 0 {
		s.PortNum = a.PortNum
	}
	if mask&qpstate.AttrQKey != 0 {
		s.QKey = a.QKey
	}
	if mask&qpstate.AttrAV != 0 {
		s.AHAttr = a.AHAttr
		q.pathOK = false
	}
	if mask&qpstate.AttrAltPath != 0 {
		s.AltAHAttr, s.AltPortNum, s.AltPKeyIndex, s.AltTimeout = a.AltAHAttr, a.AltPortNum, a.AltPKeyIndex, a.AltTimeout
	}
	if mask&qpstate.AttrPathMTU != 0 {
		s.PathMTU = a.PathMTU
	}
	if mask&qpstate.AttrTimeout != 0 {
		s.Timeout = a.Timeout
	}
	if mask&qpstate.AttrRetryCnt != 0 {
		s.RetryCnt, q.retryLeft = a.RetryCnt, a.RetryCnt
	}
	if mask&qpstate.AttrRNRRetry != 0 {
		s.RNRRetry, q.rnrLeft = a.RNRRetry, a.RNRRetry
	}
	if mask&qpstate.AttrRQPSN != 0 {
		s.RQPSN = a.RQPSN & ib.PSNMask
		q.respPSN = s.RQPSN
		q.ackPSN = ib.PSNAdd(s.RQPSN, ib.PSNMask)
	}
	if mask&qpstate.AttrMinRNRTimer != 0 {
		s.MinRNRTimer = a.MinRNRTimer
	}
	if mask&qpstate.AttrSQPSN != 0 {
		s.SQPSN = a.SQPSN & ib.PSNMask
		q.reqPSN, q.compPSN = s.SQPSN, s.SQPSN
	}
	if mask&qpstate.AttrPathMigState != 0 {
		s.PathMigState = a.PathMigState
	}
	if mask&qpstate.AttrDestQPN != 0 {
		s.DestQPNum = a.DestQPNum
	}
	// A new primary path with a GRH recomputes the UDP source port from
	// the flow label, or from the QPN pair when it is 0.
	if mask&qpstate.AttrAV != 0 && a.AHAttr.AHFlags&ib.AHGRH != 0 {
		q.sport = wire.GetUDPSport(a.AHAttr.GRH.FlowLabel, q.qpn, s.DestQPNum&ib.QPNMask)
	}
}

// enter moves q to next and performs the side effect; r.mu
// held.
func (r *device) enter(q *qp, next qpstate.State) {
	q.state = next
	q.attr.QPState = next
	switch next {
	case qpstate.StateReset:
		// rxe_qp_reset: discard every WQE without completions and reset
		// the sequence state; PSNs and path attributes are kept.
		q.sq, q.rq = nil, nil
		q.ssn, q.msn, q.draining = 0, 0, false
		q.credits = int(q.attr.MaxRdAtomic)
		q.respRes = int(q.attr.MaxDestRdAtomic)
		q.resetTransport()
	case qpstate.StateSQD:
		q.draining = true
		r.runSQ(q)
	case qpstate.StateErr:
		q.draining = false
		q.stopTimers()
		r.flush(q)
	case qpstate.StateRTS, qpstate.StateSQE:
		// WQEs held in SQD go out now. rxe does not kick its send task on
		// SQD->RTS (as read in rxe_qp_from_attr; not confirmed on a
		// capture): they leave at its next run (a post,
		// an ACK, a timer); starting them here is the observable superset.
		r.runSQ(q)
	}
}

// toErr moves q to ERR from inside the driver (a failed local operation,
// later a protocol error); no async event, as rxe.
func (r *device) toErr(q *qp) {
	if q.state != qpstate.StateErr {
		r.enter(q, qpstate.StateErr)
	}
}

// flushSQ completes every send WQE of a QP in ERR with
// IB_WC_WR_FLUSH_ERR, in post order, signaled or not (a WQE that failed
// completes with its own status). A full CQ makes later WQEs vanish without
// completions. r.mu held.
func (r *device) flushSQ(q *qp) {
	cqFull := false
	for _, w := range q.sq {
		st := emu.WCWRFlushErr
		if w.state == wqeDone && w.status != emu.WCSuccess {
			st = w.status
		}
		if !cqFull {
			cqFull = !r.post(q.scq, q.sendWC(w, st), false)
		}
	}
	q.sq = nil
	q.credits = int(q.attr.MaxRdAtomic)
}

// flushRQ completes every posted receive WQE of a QP in ERR with
// IB_WC_WR_FLUSH_ERR, in post order. r.mu held.
func (r *device) flushRQ(q *qp) {
	for r.refillRQ(q) {
	}
	cqFull := false
	rq := q.rq
	if q.hasCur {
		// The WQE a message in progress was writing into is still the
		// oldest on the queue (rxe pops it only when it completes).
		rq = append([]recvWQE{q.cur}, rq...)
		q.hasCur = false
	}
	for _, w := range rq {
		if !cqFull {
			cqFull = !r.post(q.rcq, emu.WC{WRID: w.wrID, Status: emu.WCWRFlushErr, Opcode: emu.WCRecv,
				QP: q.core, PortNum: 1}, false)
		}
	}
	q.rq = nil
}

// flush is the side effect of entering ERR: both queues flush; a QP on an
// SRQ gets IB_EVENT_QP_LAST_WQE_REACHED instead of receive flushes, and the
// SRQ is left alone. r.mu held.
func (r *device) flush(q *qp) {
	r.flushSQ(q)
	if q.srq != nil {
		r.event(emu.Event{Type: emu.EventQPLastWQEReached, QP: q.core})
		return
	}
	r.flushRQ(q)
}

// wcOpcode maps a send opcode to its completion opcode (wr_to_wc_opcode);
// unknown ones give 0xFF as rxe.
func wcOpcode(op emu.WROpcode) emu.WCOpcode {
	switch op {
	case emu.WRRDMAWrite, emu.WRRDMAWriteWithImm:
		return emu.WCRDMAWrite
	case emu.WRSend, emu.WRSendWithImm, emu.WRSendWithInv:
		return emu.WCSend
	case emu.WRRDMARead, emu.WRRDMAReadWithInv:
		return emu.WCRDMARead
	case emu.WRAtomicCmpAndSwp:
		return emu.WCCompSwap
	case emu.WRAtomicFetchAndAdd:
		return emu.WCFetchAdd
	case emu.WRLocalInv:
		return emu.WCLocalInv
	case emu.WRRegMR:
		return emu.WCRegMR
	case emu.WRBindMW:
		return emu.WCBindMW
	case emu.WRFlush:
		return emu.WCFlush
	case emu.WRAtomicWrite:
		return emu.WCAtomicWrite
	}
	return 0xFF
}

func (q *qp) sendWC(w *sendWQE, st emu.WCStatus) emu.WC {
	wc := emu.WC{WRID: w.wr.WRID, Status: st, Opcode: wcOpcode(w.wr.Opcode), QP: q.core, PortNum: 1}
	if st == emu.WCSuccess {
		wc.ByteLen = uint32(w.length)
	}
	return wc
}

// Opcode classes (rxe_wr_opcode_info).
func isLocal(op emu.WROpcode) bool {
	return op == emu.WRLocalInv || op == emu.WRBindMW || op == emu.WRRegMR
}

func isReadOrAtomic(op emu.WROpcode) bool {
	switch op {
	case emu.WRRDMARead, emu.WRRDMAReadWithInv, emu.WRAtomicCmpAndSwp, emu.WRAtomicFetchAndAdd, emu.WRAtomicWrite:
		return true
	}
	return false
}

func isAtomic(op emu.WROpcode) bool {
	return op == emu.WRAtomicCmpAndSwp || op == emu.WRAtomicFetchAndAdd
}

// inlineOK reports whether op's data may come inline. ATOMIC_WRITE's 8
// bytes may: rxe takes a user WQE's from the WQE itself (dma.atomic_wr),
// whatever the QP's max_inline_data.
func inlineOK(op emu.WROpcode) bool {
	switch op {
	case emu.WRRDMAWrite, emu.WRRDMAWriteWithImm, emu.WRSend, emu.WRSendWithImm, emu.WRSendWithInv, emu.WRAtomicWrite:
		return true
	}
	return false
}

// opAllowed reports whether op may be posted on a QP of type t (the
// qpt mask of rxe_wr_opcode_info).
func opAllowed(op emu.WROpcode, t qpstate.Type) bool {
	rc, uc := t == qpstate.TypeRC, t == qpstate.TypeUC
	ud := t == qpstate.TypeUD || t == qpstate.TypeGSI
	switch op {
	case emu.WRRDMAWrite, emu.WRRDMAWriteWithImm, emu.WRBindMW:
		return rc || uc
	case emu.WRSend, emu.WRSendWithImm:
		return rc || uc || ud
	case emu.WRSendWithInv:
		return rc || uc || t == qpstate.TypeUD
	case emu.WRRDMARead, emu.WRAtomicCmpAndSwp, emu.WRAtomicFetchAndAdd, emu.WRLocalInv,
		emu.WRRDMAReadWithInv, emu.WRFlush, emu.WRAtomicWrite, emu.WRRegMR:
		return rc
	}
	return false
}

// checkSend validates one send WR (validate_send_wr, init_send_wr) and
// returns its length.
func (q *qp) checkSend(wr *emu.SendWR) (uint64, error) {
	op := wr.Opcode
	if !opAllowed(op, q.typ) {
		return 0, errorf(unix.EINVAL, "post send QP %#x: %v not allowed on %v", q.qpn, op, q.typ.Name())
	}
	if (op == emu.WRFlush || op == emu.WRAtomicWrite) && !q.r.cfg.Kernel.HasFlush() {
		// wr_opcode_mask of a kernel before 6.2 knows neither.
		return 0, errorf(unix.EINVAL, "post send QP %#x: %v is not in the rxe of Linux %v", q.qpn, op, q.r.cfg.Kernel)
	}
	if (q.typ == qpstate.TypeUD || q.typ == qpstate.TypeGSI) && op != emu.WRSend && op != emu.WRSendWithImm {
		return 0, errorf(unix.EINVAL, "post send QP %#x: UD QPs send SEND and SEND_WITH_IMM only, not %v", q.qpn, op)
	}
	if uint32(len(wr.SGList)) > q.sqMaxSGE {
		return 0, errorf(unix.EINVAL, "post send QP %#x: %d SGEs > max %d", q.qpn, len(wr.SGList), q.sqMaxSGE)
	}
	if op == emu.WRFlush {
		// librxe's wr_flush: the length is the flush's, no gather list.
		return uint64(wr.FlushLen), nil
	}
	var n uint64
	for _, s := range wr.SGList {
		n += uint64(s.Length)
	}
	if n > maxMsgSize {
		return 0, errorf(unix.EINVAL, "post send QP %#x: %d bytes > 2^31", q.qpn, n)
	}
	if isAtomic(op) {
		if n != 8 {
			return 0, errorf(unix.EINVAL, "post send QP %#x: atomic of %d bytes (must be 8)", q.qpn, n)
		}
		if wr.RemoteAddr&7 != 0 {
			return 0, errorf(unix.EINVAL, "post send QP %#x: atomic at %#x not 8-byte aligned", q.qpn, wr.RemoteAddr)
		}
	}
	if wr.SendFlags&emu.SendInline != 0 {
		if !inlineOK(op) {
			return 0, errorf(unix.EINVAL, "post send QP %#x: %v cannot be inline", q.qpn, op)
		}
		if n > uint64(q.sqMaxInline) && op != emu.WRAtomicWrite {
			return 0, errorf(unix.EINVAL, "post send QP %#x: %d inline bytes > max %d", q.qpn, n, q.sqMaxInline)
		}
	}
	return n, nil
}

// PostSend queues send WRs and kicks the requester (rxe_post_send): a QP
// below RTS refuses the whole list (bad 0); each WR is validated and
// queued in turn, the first failure stopping the list with the earlier
// WRs posted; a full queue is ENOMEM. In ERR, WRs are queued and flushed
// at once.
func (r *device) PostSend(c *emu.QP, wrs []emu.SendWR) (int, error) {
	return r.postInline(func() (int, error) { return r.postSend(c, wrs) })
}

func (r *device) postSend(c *emu.QP, wrs []emu.SendWR) (int, error) {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	if !q.valid {
		return 0, errorf(unix.EINVAL, "post send QP %#x: destroyed", q.qpn)
	}
	if q.state < qpstate.StateRTS {
		return 0, errorf(unix.EINVAL, "post send QP %#x: state %v (needs RTS)", q.qpn, q.state)
	}
	defer r.kick(q)
	for i := range wrs {
		wr := &wrs[i]
		n, err := q.checkSend(wr)
		if err != nil {
			return i, err
		}
		if uint32(len(q.sq)) >= q.sqCap {
			return i, errorf(unix.ENOMEM, "post send QP %#x: send queue full (%d)", q.qpn, q.sqCap)
		}
		w := r.newWQE()
		sgl := w.wr.SGList
		*w = sendWQE{wr: *wr, length: n, ssn: q.ssn, signaled: q.sigAll || wr.SendFlags&emu.SendSignaled != 0}
		w.wr.SGList = append(sgl[:0], wr.SGList...)
		if wr.SendFlags&emu.SendInline != 0 {
			// Inline data is copied at post time from the CPU's view of
			// memory (the SGE addresses are kernel virtual addresses).
			for _, s := range wr.SGList {
				b, err := r.dev.Memory().Slice(s.Addr, int(s.Length))
				if err != nil {
					return i, errorf(unix.EFAULT, "post send QP %#x: inline SGE %#x+%d: %v", q.qpn, s.Addr, s.Length, err)
				}
				w.inline = append(w.inline, b...)
			}
		}
		q.ssn++
		q.sq = append(q.sq, w)
	}
	return 0, nil
}

// PostRecv queues receive WRs (rxe_post_recv): EINVAL when destroyed, in
// RESET or on an SRQ (bad 0); per WR ENOMEM when full, EINVAL for too many
// SGEs or more than 2^31 bytes. In ERR the WRs are flushed at once.
func (r *device) PostRecv(c *emu.QP, wrs []emu.RecvWR) (int, error) {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	switch {
	case !q.valid:
		return 0, errorf(unix.EINVAL, "post recv QP %#x: destroyed", q.qpn)
	case q.state == qpstate.StateReset:
		return 0, errorf(unix.EINVAL, "post recv QP %#x: state RESET", q.qpn)
	case q.srq != nil:
		return 0, errorf(unix.EINVAL, "post recv QP %#x: the QP receives through an SRQ", q.qpn)
	}
	defer func() {
		if q.state == qpstate.StateErr {
			r.flushRQ(q)
		}
	}()
	for i := range wrs {
		if uint32(len(q.rq)) >= q.rqCap {
			return i, errorf(unix.ENOMEM, "post recv QP %#x: receive queue full (%d)", q.qpn, q.rqCap)
		}
		n, err := checkRecv(&wrs[i], q.rqMaxSGE)
		if err != nil {
			return i, err
		}
		q.rq = append(q.rq, recvWQE{wrID: wrs[i].WRID, sgl: append([]emu.SGE(nil), wrs[i].SGList...), length: n})
	}
	return 0, nil
}

// refillRQ moves one WR from a userspace receive queue onto rq and
// reports whether there was one. A WR with more SGEs than the queue takes
// keeps the first ones (the ring's slot has room for no more). r.mu held.
func (r *device) refillRQ(q *qp) bool {
	if q.recvRing == nil {
		return false
	}
	var wr emu.RecvWR
	if !q.recvRing(&wr) {
		return false
	}
	q.rq = append(q.rq, takeRingWQE(&wr, q.rqMaxSGE))
	return true
}

// takeRingWQE turns a WR read from a userspace ring into a receive WQE.
func takeRingWQE(wr *emu.RecvWR, maxSGE uint32) recvWQE {
	if uint32(len(wr.SGList)) > maxSGE {
		wr.SGList = wr.SGList[:maxSGE]
	}
	var n uint64
	for _, s := range wr.SGList {
		n += uint64(s.Length)
	}
	return recvWQE{wrID: wr.WRID, sgl: wr.SGList, length: n}
}

// kick runs the send side after a change (the requester then the
// completer, as rxe's send task does); r.mu held.
func (r *device) kick(q *qp) {
	if q.state == qpstate.StateErr {
		r.flushSQ(q)
		return
	}
	r.runSQ(q)
}

// unfinishedBefore reports whether a WQE before w is not done (any, or
// with readsOnly, an outstanding READ or atomic).
func (q *qp) unfinishedBefore(w *sendWQE, readsOnly bool) bool {
	for _, x := range q.sq {
		if x == w {
			return false
		}
		if x.state != wqeDone && (!readsOnly || isReadOrAtomic(x.wr.Opcode) && x.state == wqePending) {
			return true
		}
	}
	return false
}

// local executes a local operation (REG_MR, LOCAL_INV, BIND_MW).
func (r *device) local(q *qp, w *sendWQE) error {
	switch w.wr.Opcode {
	case emu.WRRegMR:
		return r.regMR(q, &w.wr)
	case emu.WRLocalInv:
		return r.invalidate(w.wr.InvalidateRKey)
	case emu.WRBindMW:
		return r.bindMW(q, &w.wr)
	}
	return errorf(unix.EINVAL, "%v is not a local operation", w.wr.Opcode)
}

// complete is the completer's in-order retirement: finished WQEs at the
// head of the queue complete (signaled ones, and every failed one) and
// return their credits; a failed one moves the QP to ERR and flushes the
// rest. When an SQD drain finds nothing outstanding it ends and raises
// IB_EVENT_SQ_DRAINED (whether or not en_sqd_async_notify was set, as rxe).
// r.mu held.
func (r *device) complete(q *qp) {
	for len(q.sq) > 0 && q.sq[0].state == wqeDone {
		w := q.sq[0]
		if w.status != emu.WCSuccess {
			r.toErr(q) // flush completes w with its status, then the rest
			return
		}
		q.sq = q.sq[:copy(q.sq, q.sq[1:])]
		r.freeWQE(w)
		if isReadOrAtomic(w.wr.Opcode) {
			q.credits++
		}
		switch w.wr.Opcode {
		case emu.WRSend, emu.WRSendWithImm, emu.WRSendWithInv:
			r.counters[cntRDMASends]++
		}
		if w.signaled {
			r.post(q.scq, q.sendWC(w, emu.WCSuccess), false) // send-side overflow: dropped, QP goes on
		}
	}
	if q.state == qpstate.StateSQD && q.draining && !q.outstanding() {
		q.draining = false
		r.event(emu.Event{Type: emu.EventSQDrained, QP: q.core})
	}
}

// newWQE takes a send WQE from the device's free list (the ring slot rxe
// would reuse); r.mu held.
func (r *device) newWQE() *sendWQE {
	if n := len(r.wqeFree); n > 0 {
		w := r.wqeFree[n-1]
		r.wqeFree = r.wqeFree[:n-1]
		return w
	}
	return &sendWQE{}
}

// freeWQE returns a retired WQE to the free list; r.mu held.
func (r *device) freeWQE(w *sendWQE) {
	if len(r.wqeFree) < 4096 {
		w.inline = w.inline[:0]
		r.wqeFree = append(r.wqeFree, w)
	}
}

// outstanding reports a WQE that has started but not completed.
func (q *qp) outstanding() bool {
	for _, w := range q.sq {
		if w.state != wqePosted {
			return true
		}
	}
	return false
}

// Ack acknowledges every PSN up to psn on the QP numbered qpn, as a peer's
// ACK would (the completer's seam for the transport layer and for tests).
func (r *device) Ack(qpn, psn uint32) error {
	r.lock()
	defer r.unlock()
	q, ok := r.qps[qpn]
	if !ok {
		return errorf(unix.EINVAL, "ack: no QP %#x", qpn)
	}
	r.ackUpTo(q, psn&ib.PSNMask)
	return nil
}

// takeRecv removes the receive WQE the next incoming message consumes
// (from the QP's RQ or its SRQ, firing the SRQ limit event); the responder
// calls it. r.mu held.
func (r *device) takeRecv(q *qp) (recvWQE, bool) {
	if q.srq != nil {
		return r.takeSRQ(q.srq)
	}
	if len(q.rq) == 0 && !r.refillRQ(q) {
		return recvWQE{}, false
	}
	w := q.rq[0]
	q.rq = q.rq[1:]
	return w, true
}

// QueryQP returns the stored attributes with rxe's overrides
// (rxe_qp_to_attr): live PSNs, real capacities, the AVs rebuilt as RoCE
// with GRH, the real state as cur_qp_state (from Linux 6.13), the drain flag. It never
// fails on a live QP.
func (r *device) QueryQP(c *emu.QP, mask qpstate.AttrMask) (qpstate.Attr, emu.QPInitAttr, error) {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	if !q.valid {
		return qpstate.Attr{}, emu.QPInitAttr{}, errorf(unix.EINVAL, "query QP %#x: destroyed", q.qpn)
	}
	a := q.attr
	a.QPState = q.state
	if r.cfg.Kernel.QueryReportsCurState() {
		a.CurQPState = q.state
	}
	a.RQPSN, a.SQPSN = q.respPSN, q.reqPSN
	a.Cap = qpstate.Cap{MaxSendWR: q.sqCap, MaxRecvWR: q.rqCap, MaxSendSGE: q.sqMaxSGE,
		MaxRecvSGE: q.rqMaxSGE, MaxInlineData: q.sqMaxInline}
	for _, ah := range []*ib.AHAttr{&a.AHAttr, &a.AltAHAttr} {
		ah.Type, ah.AHFlags = ib.AHAttrTypeRoCE, ah.AHFlags|ib.AHGRH
		if ah.PortNum == 0 {
			ah.PortNum = 1
		}
	}
	a.SQDraining = 0
	if q.draining {
		a.SQDraining = 1
	}
	init := emu.QPInitAttr{EventHandler: c.EventHandler, SendCQ: c.SendCQ, RecvCQ: c.RecvCQ, SRQ: c.SRQ,
		Cap: a.Cap, QPType: q.typ, PortNum: 1, SQSigType: emu.SignalReqWR}
	if q.sigAll {
		init.SQSigType = emu.SignalAllWR
	}
	return a, init, nil
}

// DestroyQP destroys a QP (rxe_destroy_qp): a multicast member is EBUSY;
// outstanding WQEs are discarded without completions.
func (r *device) DestroyQP(c *emu.QP) error {
	r.lock()
	defer r.unlock()
	q := qpOf(c)
	if r.memberships(q) > 0 {
		return errorf(unix.EBUSY, "destroy QP %#x: still in %d multicast groups", q.qpn, r.memberships(q))
	}
	q.valid = false
	q.sq, q.rq = nil, nil
	delete(r.qps, q.qpn)
	r.lastQP = nil
	r.qpPool.free(q.idx)
	if q.typ == qpstate.TypeGSI {
		r.gsi = false
	}
	return nil
}

// UDPSport returns the UDP source port the QP numbered qpn sends from.
func (r *device) UDPSport(qpn uint32) (uint16, bool) {
	r.lock()
	defer r.unlock()
	q, ok := r.qps[qpn]
	if !ok {
		return 0, false
	}
	return q.sport, true
}
