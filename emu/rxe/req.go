package rxe

import (
	"errors"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/internal/driver"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// maxUnackedPSNs is RXE_MAX_UNACKED_PSNS: an RC requester sends no PSN
// more than this far ahead of the oldest unacknowledged one.
const maxUnackedPSNs = 128

// gsiQKey is the Q_Key of QP1 (IB_QP1_QKEY).
const gsiQKey = 0x80010000

// xport is a QP's transport state: requester, completer and responder.
type xport struct {
	path   path
	pathOK bool

	// Requester and completer.
	noack     int // packets sent without AckReq since the last one with it
	rtimer    clock.Timer
	rgen      uint64    // generation of the retransmit timer
	rdeadline time.Time // when the retransmit timer expires
	// ridle: everything sent was acknowledged while rtimer was pending;
	// the timer is left to find nothing to retransmit, and the next send
	// gives it a fresh deadline (so that a stream of messages with idle
	// moments between them does not start a timer for each).
	ridle    bool
	rnrWait  bool
	rnrTimer clock.Timer
	rnrGen   uint64
	// rdeferred: a retransmission timeout found frames received and not
	// yet processed, and put its retry off by one timeout
	// (retransmitTimeout); cleared when a response is processed.
	rdeferred bool
	// startedRetry: a retry pass is under way; further retry triggers
	// other than a timeout are ignored until a valid response arrives
	// (rxe's comp.started_retry).
	startedRetry bool

	// Responder.
	ackPSN  uint32 // PSN of the last in-order request executed (duplicate ACKs)
	nakSent bool   // a PSN sequence NAK was sent since the last in-order packet
	respOp  uint8  // message in progress: 0 none, respInSend, respInWrite
	ucDrop  bool   // UC: discarding until the next message start
	cur     recvWQE
	hasCur  bool
	curOff  uint64 // bytes written into cur
	wrRKey  uint32
	wrVA    uint64
	wrLeft  uint64 // bytes of the RDMA WRITE still to come
	wrTotal uint64
	res     []respRes
	resNext int
	invErr  bool // the last SEND_WITH_INVALIDATE failed to invalidate
	// READ replies in progress and the requests that wait behind them
	// (readjob.go).
	jobs    []readJob
	backlog [][]byte
	readState
}

const (
	respInSend = 1 + iota
	respInWrite
)

// respRes is a responder resource (struct resp_res): what a READ or atomic
// needs for a replay.
type respRes struct {
	atomic   bool
	flush    bool // a FLUSH: its duplicate gets the empty read response again
	firstPSN uint32
	lastPSN  uint32
	va       uint64
	rkey     uint32
	length   uint64
	orig     uint64
}

// resetTransport clears the sequence state on entering RESET
// (rxe_qp_reset); PSNs are kept.
func (q *qp) resetTransport() {
	q.stopTimers()
	p, ok := q.path, q.pathOK
	q.xport = xport{path: p, pathOK: ok, ackPSN: ib.PSNAdd(q.respPSN, ib.PSNMask)}
}

func (q *qp) stopTimers() {
	if q.rtimer != nil {
		q.rtimer.Stop()
		q.rtimer = nil
	}
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
		q.rnrTimer = nil
	}
	q.rgen++
	q.rnrGen++
	q.rnrWait = false
}

func (r *device) clock() clock.Clock { return r.dev.Clock() }

// mtu returns the byte MTU used for segmentation: the path MTU for RC/UC,
// the port's active MTU for UD/GSI.
func (q *qp) mtu() int {
	if q.isUD() {
		return q.portMTU()
	}
	return q.attr.PathMTU.Bytes()
}

// portMTU is mtu's UD/GSI case, out of line so that mtu inlines.
func (q *qp) portMTU() int { return emu.RxeMTU(q.r.dev.NetDev().MTU).Bytes() }

func (q *qp) isUD() bool { return q.typ == qpstate.TypeUD || q.typ == qpstate.TypeGSI }

// connPath returns the RC/UC path from the primary AV; r.mu held.
func (r *device) connPath(q *qp) *path {
	if !q.pathOK {
		r.resolvePath(q)
	}
	return &q.path
}

// resolvePath is connPath's resolution, out of line so that connPath
// inlines; r.mu held.
func (r *device) resolvePath(q *qp) {
	q.path = r.pathOf(&q.attr.AHAttr)
	q.path.srcB, q.path.dstB = addrBytesOf(q.path.src), addrBytesOf(q.path.dst)
	q.pathOK = q.path.ok
}

// runSQ is the requester (rxe_requester): it walks the send queue in
// order, executing local operations when their turn comes and sending the
// packets of network operations, then runs the completer's retirement. It
// stops at a WQE that must wait: anything in SQD, a LOCAL_INV behind
// unfinished WQEs, a fenced WQE behind an outstanding READ or atomic, a
// READ or atomic without an initiator credit, a packet beyond the
// 128-PSN window. r.mu held.
func (r *device) runSQ(q *qp) {
	if q.state < qpstate.StateRTS || q.state == qpstate.StateErr {
		return
	}
	for _, w := range q.sq {
		if q.state == qpstate.StateErr {
			return
		}
		if w.state == wqeDone {
			continue
		}
		if w.state == wqePending {
			if w.next < w.npkts && !r.sendPackets(q, w) {
				break
			}
			if w.next < w.npkts {
				break
			}
			continue
		}
		if q.state == qpstate.StateSQD || q.rnrWait {
			break // not started: held while draining or waiting out an RNR NAK
		}
		op := w.wr.Opcode
		if op == emu.WRLocalInv && q.unfinishedBefore(w, false) {
			break // rxe makes the local invalidate fence mandatory
		}
		if w.wr.SendFlags&emu.SendFence != 0 && q.unfinishedBefore(w, true) {
			break
		}
		if isLocal(op) {
			w.state, w.status = wqeDone, emu.WCSuccess
			if err := r.local(q, w); err != nil {
				// The WQE fails with its status and the QP enters ERR,
				// flushing everything else (rxe_requester's err path).
				w.status = emu.WCLocQPOpErr
				if op == emu.WRBindMW {
					w.status = emu.WCMWBindErr
				}
				r.toErr(q)
				return
			}
			continue
		}
		if isReadOrAtomic(op) {
			if q.credits == 0 {
				break // max_rd_atomic 0 stalls forever (rxe quirk)
			}
			q.credits--
		}
		n := uint32(1)
		mtu := uint64(q.mtu())
		if !isAtomic(op) && op != emu.WRFlush && !q.isUD() && mtu > 0 {
			n = uint32(max(1, (w.length+mtu-1)/mtu))
		}
		w.firstPSN = q.reqPSN
		w.lastPSN = ib.PSNAdd(q.reqPSN, n-1)
		w.npkts, w.next = n, 0
		q.reqPSN = ib.PSNAdd(q.reqPSN, n)
		w.state = wqePending
		q.dropReadAhead()
		if q.isUD() && w.length > mtu {
			// IBA C10-93.1.1 as rxe: no packet, success.
			w.next = n
			w.state, w.status = wqeDone, emu.WCSuccess
			if r.cfg.Quirks.UDOversizeError {
				w.status = emu.WCLocLenErr
				r.toErr(q)
				return
			}
			continue
		}
		if !r.sendPackets(q, w) || w.next < w.npkts {
			break
		}
	}
	r.complete(q)
}

// sendPackets sends w's packets from w.next on; it returns false when it
// had to stop (window full, or an error moved the QP to ERR). r.mu held.
func (r *device) sendPackets(q *qp, w *sendWQE) bool {
	op := w.wr.Opcode
	mtu := uint32(q.mtu())
	defer r.forgetRefSGE()
	// A middle packet built in full is the template of the next ones
	// (sendNext); r.mu is held throughout, so it stays as it was built.
	var next wire.NextFrames
	haveNext, nextNoICRC := false, false
	for w.next < w.npkts {
		psn := ib.PSNAdd(w.firstPSN, w.next)
		if q.typ == qpstate.TypeRC && ib.PSNCompare(psn, ib.PSNAdd(q.compPSN, maxUnackedPSNs)) > 0 {
			return false
		}
		if haveNext {
			sent, st, ok := r.sendNext(q, w, &next, nextNoICRC, psn, mtu)
			if !ok {
				w.state, w.status = wqeDone, st
				r.toErr(q)
				return false
			}
			if sent {
				w.next++
				continue
			}
			haveNext = false
		}
		if st, ok := r.sendPacket(q, w, psn, mtu); !ok {
			w.state, w.status = wqeDone, st
			r.toErr(q)
			return false
		}
		if op == emu.WRRDMARead || op == emu.WRRDMAReadWithInv {
			w.next = w.npkts // one request covers every response PSN
		} else {
			if w.next > 0 && w.next+1 < w.npkts && hasMiddle(op) && r.tp != nil && !r.detached {
				// A middle packet: the next ones copy its headers.
				txq := r.txq[streamReq]
				tmpl := txq[len(txq)-1]
				haveNext = next.Reset(tmpl) == nil
				nextNoICRC = haveNext && r.noICRCTo([6]byte(tmpl[:6]))
			}
			w.next++
		}
	}
	if q.typ == qpstate.TypeUC || q.isUD() {
		// Unacknowledged transports finish when the last packet is sent.
		w.state, w.status = wqeDone, emu.WCSuccess
	}
	return true
}

// hasMiddle reports whether op's messages of more than two packets have
// middle packets (SEND and RDMA WRITE, with immediate data or
// invalidation or not): all of a message's middle packets carry the
// same headers but for the PSN and the AckReq bit.
func hasMiddle(op emu.WROpcode) bool {
	switch op {
	case emu.WRSend, emu.WRSendWithImm, emu.WRSendWithInv, emu.WRRDMAWrite, emu.WRRDMAWriteWithImm:
		return true
	}
	return false
}

// sendNext sends packet psn of w, a middle packet following next's
// frame, a middle packet sent before it in the same sendPackets call, by
// copying that frame's headers and changing the IPv4 identification, the
// PSN and the AckReq bit (wire.NextFrames): the frame sendPacket would
// build, byte for byte, for a fraction of the work. It reports false,
// having sent nothing, when packet psn is the message's last (another
// opcode), so that the caller builds it in full. noICRC is what emitIn
// chose for the template (noICRCTo). On failure (the payload
// cannot be gathered) it returns !ok and the WC status the WQE completes
// with, having done what sendPacket does for it. r.mu held throughout
// sendPackets, so the template's path, QP and transport cannot have
// changed.
func (r *device) sendNext(q *qp, w *sendWQE, next *wire.NextFrames, noICRC bool, psn, mtu uint32) (sent bool, st emu.WCStatus, ok bool) {
	idx := ib.PSNSub(psn, w.firstPSN)
	if idx+1 >= w.npkts || r.tp == nil || r.detached {
		return false, emu.WCSuccess, true
	}
	// A middle packet carries a full MTU, a multiple of 4: no pad.
	off, plen := uint64(idx)*uint64(mtu), int(mtu)
	n := next.Len()
	po := n - plen - wire.ICRCSize
	b := r.txGet()
	if po <= 0 || len(b) < n {
		r.dropTx(b)
		return false, emu.WCSuccess, true
	}
	// As sendPacket (newFrame, then the AckReq count, then the payload).
	r.ipID++
	ack := false
	if q.typ == qpstate.TypeRC {
		if q.noack++; q.noack > r.cfg.Quirks.ackInterval() {
			q.noack, ack = 0, true
		}
	}
	var pref link.PayloadRef
	ref := r.payloadRef(q, w, w.wr.Opcode, off, plen)
	if ref != nil {
		pref = link.PayloadRef{Off: po, B: ref}
	} else if w.inline != nil {
		copy(b[po:po+plen], w.inline[off:])
	} else if _, err := r.gatherAt(q, w, off, b[po:po+plen]); err != nil {
		r.dropTx(b)
		if errors.Is(err, unix.EFAULT) {
			return false, emu.WCLocProtErr, false
		}
		return false, emu.WCLocQPOpErr, false
	}
	if h := q.core.PayloadSent; h != nil && w.inline == nil {
		if ref == nil {
			ref = b[po : po+plen]
		}
		h(psn, w.wr.WRID, ref)
	}
	if _, err := next.Build(b, r.ipID, psn, ack, noICRC); err != nil {
		r.dropTx(b)
		return false, emu.WCLocQPOpErr, false
	}
	r.txq[streamReq] = append(r.txq[streamReq], b[:n])
	if r.tp.pipe != nil {
		r.txRefs = append(r.txRefs, pref)
	}
	r.counters[cntSentPkts]++
	r.counters[cntSentBytes] += uint64(n - wire.EthernetSize)
	if q.typ == qpstate.TypeRC {
		r.armRetransmit(q, false)
	}
	return true, emu.WCSuccess, true
}

// opcodeFor picks the opcode of packet i of n of a WR (next_opcode).
func opcodeFor(t qpstate.Type, op emu.WROpcode, first, last bool) wire.Opcode {
	base := wire.Opcode(wire.TransportRC)
	if t == qpstate.TypeUC {
		base = wire.Opcode(wire.TransportUC)
	}
	pick := func(f, m, l, o wire.Opcode) wire.Opcode {
		switch {
		case first && last:
			return o
		case first:
			return f
		case last:
			return l
		}
		return m
	}
	switch op {
	case emu.WRSend:
		if t == qpstate.TypeUD || t == qpstate.TypeGSI {
			return wire.UDSendOnly
		}
		return base | pick(wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly)
	case emu.WRSendWithImm:
		if t == qpstate.TypeUD || t == qpstate.TypeGSI {
			return wire.UDSendOnlyWithImmediate
		}
		return base | pick(wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastWithImmediate, wire.RCSendOnlyWithImmediate)
	case emu.WRSendWithInv:
		return pick(wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastWithInvalidate, wire.RCSendOnlyWithInvalidate)
	case emu.WRRDMAWrite:
		return base | pick(wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly)
	case emu.WRRDMAWriteWithImm:
		return base | pick(wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLastWithImmediate,
			wire.RCRDMAWriteOnlyWithImmediate)
	case emu.WRRDMARead, emu.WRRDMAReadWithInv:
		return wire.RCRDMAReadRequest
	case emu.WRAtomicCmpAndSwp:
		return wire.RCCompareSwap
	case emu.WRAtomicFetchAndAdd:
		return wire.RCFetchAdd
	case emu.WRAtomicWrite:
		return wire.RCAtomicWrite
	case emu.WRFlush:
		return wire.RCFlush
	}
	return 0
}

// sendPacket builds and queues packet psn of w (rxe_init_packet,
// init_req_packet, finish_packet). On failure it returns the WC status the
// WQE completes with.
func (r *device) sendPacket(q *qp, w *sendWQE, psn uint32, mtu uint32) (emu.WCStatus, bool) {
	op := w.wr.Opcode
	idx := ib.PSNSub(psn, w.firstPSN) // packets into the message
	var p *path
	var dqpn uint32
	if q.isUD() {
		a, ok := driver.Priv(w.wr.AH).(*ah)
		if w.wr.AH == nil || !ok || w.wr.AH.PD != q.pd {
			return emu.WCLocQPOpErr, false
		}
		pp := r.pathOf(&a.attr)
		p, dqpn = &pp, w.wr.RemoteQPN
	} else {
		p, dqpn = r.connPath(q), q.attr.DestQPNum
	}
	if !p.ok {
		return emu.WCLocQPOpErr, false
	}
	wop := opcodeFor(q.typ, op, true, true)
	off := uint64(idx) * uint64(mtu)
	var plen uint64
	isRead := op == emu.WRRDMARead || op == emu.WRRDMAReadWithInv
	switch {
	case isRead, isAtomic(op), op == emu.WRFlush:
	case op == emu.WRAtomicWrite:
		plen = 8
	default:
		first := idx == 0
		last := idx == w.npkts-1
		wop = opcodeFor(q.typ, op, first, last)
		plen = min(uint64(mtu), w.length-min(off, w.length))
		if q.isUD() {
			plen = w.length
		}
	}
	f := r.newFrame(p, q.sport)
	f.BTH.Opcode = wop
	f.BTH.DestQP = dqpn
	f.BTH.PSN = psn
	fl := wop.Flags()
	last := fl&wire.FlagLast != 0 || isRead || isAtomic(op) || op == emu.WRAtomicWrite || op == emu.WRFlush
	if last && w.wr.SendFlags&emu.SendSolicited != 0 && (fl&wire.FlagSend != 0 || wop.Headers().Has(wire.HdrImmDt)) {
		f.BTH.SE = true
	}
	switch {
	case q.typ == qpstate.TypeRC:
		q.noack++
		if last || q.noack > r.cfg.Quirks.ackInterval() {
			f.BTH.AckReq, q.noack = true, 0
		}
	case q.typ == qpstate.TypeGSI:
		f.BTH.AckReq = last && !r.cfg.Quirks.NoGSIAckReq
	}
	h := wop.Headers()
	if h.Has(wire.HdrRETH) {
		va, left := w.wr.RemoteAddr, w.length
		if isRead {
			va += off
			left -= min(off, left)
		}
		f.RETH = wire.RETHFields{VA: va, RKey: w.wr.RKey, DMALen: uint32(left)}
	}
	if h.Has(wire.HdrFETH) {
		f.FETH = wire.FETHFields{Selectivity: w.wr.FlushLevel, Placement: w.wr.FlushType}
	}
	if h.Has(wire.HdrAtomicETH) {
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey}
		if op == emu.WRAtomicCmpAndSwp {
			f.AtomicETH.SwapAdd, f.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		} else {
			f.AtomicETH.SwapAdd = w.wr.CompareAdd
		}
	}
	if h.Has(wire.HdrImmDt) {
		f.ImmDt.Imm = w.wr.ImmData
	}
	if h.Has(wire.HdrIETH) {
		f.IETH.RKey = w.wr.InvalidateRKey
	}
	if h.Has(wire.HdrDETH) {
		f.DETH = wire.DETHFields{QKey: w.wr.RemoteQKey, SrcQP: q.qpn}
		if q.typ == qpstate.TypeGSI {
			f.DETH.QKey = gsiQKey
		}
	}
	var frame []byte
	if plen > 0 {
		var buf []byte
		frame, buf = r.txBuf(f, int(plen))
		ref := r.payloadRef(q, w, op, off, int(plen))
		if ref != nil && frame != nil {
			// The payload stays in the source MR: Build leaves its place
			// in the frame unset (it is in place) and the pipe carries it
			// by reference.
			// buf is frame[f.PayloadOffset():], to its capacity.
			r.txRef = link.PayloadRef{Off: cap(frame) - cap(buf), B: ref}
		} else if ref = nil; w.inline != nil {
			copy(buf, w.inline[off:])
		} else if _, err := r.gatherAt(q, w, off, buf); err != nil {
			r.dropTx(frame)
			if errors.Is(err, unix.EFAULT) {
				return emu.WCLocProtErr, false
			}
			return emu.WCLocQPOpErr, false
		}
		f.Payload = buf
		if h := q.core.PayloadSent; h != nil && w.inline == nil {
			if ref == nil {
				ref = buf
			}
			h(psn, w.wr.WRID, ref)
		}
	}
	if !r.emitIn(frame, f) {
		return emu.WCLocQPOpErr, false
	}
	if q.typ == qpstate.TypeRC {
		r.armRetransmit(q, false)
	}
	return emu.WCSuccess, true
}

// refMin is the smallest payload a request carries by reference: below
// it, copying into the frame costs less than the look-ups.
const refMin = 512

// payloadRef returns the n bytes of w's payload from offset off as a
// slice of the source MR's memory, when the packet may carry them by
// reference (link.PipeEnd.WriteRef): the device is on a bare pipe end, the
// packet is an RC SEND or RDMA WRITE of at least refMin bytes that lie
// in one SGE of a user MR in the device's own memory (dma.Memory: Go
// memory, valid as long as it is referenced). Otherwise, or if a look-up
// fails, it returns nil and the caller gathers the bytes (gatherAt), which
// reports the failure. The bytes are the WQE's: its buffer belongs to the
// device until the WQE completes (the application must not change it
// while the WR is outstanding), which on RC needs the peer's
// acknowledgement of the packet, sent after the peer copied them; a
// retransmission looks them up again. A UC send completes when its last
// packet is sent, before the peer has copied anything, so UC packets carry
// their bytes. r.mu held.
func (r *device) payloadRef(q *qp, w *sendWQE, op emu.WROpcode, off uint64, n int) []byte {
	if c := &r.refSGE; c.w == w && c.i == 0 && n >= refMin && off+uint64(n) <= uint64(len(c.b)) {
		// The next packet in w's first SGE, looked up for an earlier
		// packet of this call (which passed the checks below that
		// depend on w, the QP and the link, none of which can have
		// changed): what the loop below would return.
		return c.b[off : off+uint64(n) : off+uint64(n)]
	}
	if r.tp == nil || r.tp.pipe == nil || w.inline != nil || n < refMin || q.typ != qpstate.TypeRC {
		return nil
	}
	switch op {
	case emu.WRSend, emu.WRSendWithImm, emu.WRSendWithInv, emu.WRRDMAWrite, emu.WRRDMAWriteWithImm:
	default:
		return nil
	}
	for i, s := range w.wr.SGList {
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		if uint64(s.Length)-off < uint64(n) {
			return nil // the packet spans SGEs
		}
		if c := &r.refSGE; c.w == w && c.i == i {
			return c.b[off : off+uint64(n) : off+uint64(n)]
		}
		m, err := r.lookupLKey(q, s, 0)
		if err != nil || m.typ != emu.MRTypeUser || m.space != nil {
			return nil
		}
		addr, err := r.mrAddr(m, s.Addr, uint64(s.Length))
		if err != nil {
			return nil
		}
		b, err := r.memSlice(m, addr, int(s.Length))
		if err != nil {
			return nil
		}
		r.refSGE = refSGE{w: w, i: i, b: b}
		return b[off : off+uint64(n) : off+uint64(n)]
	}
	return nil
}

// refSGE is the memory of one SGE of a send WQE that payloadRef looked up
// for its first packet, reused for the message's next packets while
// sendPackets runs (r.mu held throughout, so the MR cannot change): every
// call of sendPackets, a retransmission's too, looks the MR up again.
type refSGE struct {
	w *sendWQE
	i int    // the SGE's index in w's list
	b []byte // its memory
}

// forgetRefSGE ends sendPackets' use of r.refSGE.
func (r *device) forgetRefSGE() { r.refSGE = refSGE{} }

// gatherAt copies the bytes of w's SGE list from offset off into dst.
func (r *device) gatherAt(q *qp, w *sendWQE, off uint64, dst []byte) (int, error) {
	n := 0
	for _, s := range w.wr.SGList {
		if n == len(dst) {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		m, err := r.lookupLKey(q, s, 0)
		if err != nil {
			return n, err
		}
		k := min(int(uint64(s.Length)-off), len(dst)-n)
		if err := r.readSGE(q, w, m, emu.SGE{Addr: s.Addr + off, Length: uint32(k), LKey: s.LKey}, uint64(s.Length)-off, dst[n:n+k]); err != nil {
			return n, errorf(unix.EFAULT, "SGE %#x: %v", s.Addr, err)
		}
		n += k
		off = 0
	}
	return n, nil
}

// scatterAt copies src into an SGE list from offset off on (needs
// LOCAL_WRITE); ENOSPC when it does not fit.
func (r *device) scatterAt(q *qp, sgl []emu.SGE, off uint64, src []byte) error {
	n := 0
	for _, s := range sgl {
		if n == len(src) {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		m, err := r.lookupLKey(q, s, ib.AccessLocalWrite)
		if err != nil {
			return err
		}
		k := min(int(uint64(s.Length)-off), len(src)-n)
		if err := r.sgeIO(m, emu.SGE{Addr: s.Addr + off, Length: uint32(k), LKey: s.LKey}, src[n:n+k], true); err != nil {
			return errorf(unix.EFAULT, "SGE %#x: %v", s.Addr, err)
		}
		n += k
		off = 0
	}
	if n < len(src) {
		return errorf(unix.ENOSPC, "%d bytes do not fit the SGE list", len(src))
	}
	return nil
}

// armRetransmit starts the retransmission timer if it is not pending, or
// restarts it with reset (the completer's mod_timer); r.mu held. A restart
// only moves the deadline: the pending timer, when it fires before it,
// sleeps again for the rest (retransmitTimeout). The expiry is the same as
// stopping and starting a timer, without a new timer for every ACK; and a
// QP whose every packet was acknowledged leaves its timer to lapse
// (afterComp), so that a QP sending message after message, each
// acknowledged before the next (a pingpong), does not start a timer for
// each either: starting one wakes the Go runtime's network poller, a
// context switch in the daemon's every round trip.
func (r *device) armRetransmit(q *qp, reset bool) {
	if q.rtimer != nil && !reset && !q.ridle {
		return // pending, its deadline kept: the usual case, per packet
	}
	r.rearm(q, reset)
}

// rearm is armRetransmit past its usual case, out of line so that
// armRetransmit inlines; r.mu held.
func (r *device) rearm(q *qp, reset bool) {
	d := r.cfg.Quirks.RetransmitTimeout(q.attr.Timeout)
	if d == 0 || r.tp == nil {
		return
	}
	if q.rtimer != nil {
		if reset || q.ridle {
			q.rdeadline = r.clock().Now().Add(d)
			q.ridle = false
		}
		return
	}
	q.rgen++
	q.ridle = false
	q.rdeadline = r.clock().Now().Add(d)
	r.startRetransmit(q, d)
}

// startRetransmit starts the timer of generation q.rgen; r.mu held.
func (r *device) startRetransmit(q *qp, d time.Duration) {
	gen := q.rgen
	q.rtimer = r.clock().AfterFunc(d, func() { r.retransmitTimeout(q, gen) })
}

// retransmitTimeout is rxe_retransmit_timer: with unacknowledged packets
// outstanding (and no RNR wait), retry. A timer whose deadline moved
// (armRetransmit's reset) sleeps again until it.
//
// In rxe the timer only schedules the completer, which takes the
// responses already queued for the QP before it acts on the timeout: one
// found clears timeout_retry (COMPST_GET_ACK), and the completer re-arms
// the timer on its way out while packets remain outstanding. Here the
// responses are processed by the goroutine that reads the link, which a
// loaded machine may not have run for longer than the timeout while the
// ACK sat in the link's queue or in its hands: a timeout that finds such
// a frame puts the retry off by one timeout instead of resending the
// window, once until a response is processed (so frames for other QPs
// cannot put it off for ever).
func (r *device) retransmitTimeout(q *qp, gen uint64) {
	r.lock()
	defer r.unlock()
	if gen != q.rgen || !q.valid || r.detached {
		return
	}
	if rest := q.rdeadline.Sub(r.clock().Now()); rest > 0 && !q.ridle {
		r.startRetransmit(q, rest)
		return
	}
	q.rtimer = nil
	if q.state < qpstate.StateRTS || q.state == qpstate.StateErr || q.rnrWait || !q.unacked() {
		return
	}
	if !q.rdeferred && r.tp.rxWaiting() {
		q.rdeferred = true
		r.armRetransmit(q, false)
		return
	}
	q.rdeferred = false
	r.retry(q, false, true)
}

// unacked reports a started RC WQE awaiting its response.
func (q *qp) unacked() bool {
	for _, w := range q.sq {
		if w.state == wqePending {
			return true
		}
	}
	return false
}

// oldestPending returns the first WQE that is not done, if it has started.
func (q *qp) oldestPending() *sendWQE {
	for _, w := range q.sq {
		if w.state == wqeDone {
			continue
		}
		if w.state == wqePending {
			return w
		}
		return nil
	}
	return nil
}

// retry is a go-back-N pass (req_retry): from the completer's PSN every
// started WQE is sent again; rnr passes use rnr_retry (already counted),
// others consume retry_cnt and fail with IB_WC_RETRY_EXC_ERR when it is
// exhausted. r.mu held.
func (r *device) retry(q *qp, rnr, timeout bool) {
	w := q.oldestPending()
	if w == nil {
		return
	}
	if q.startedRetry && !timeout && !rnr {
		return
	}
	if !rnr {
		r.counters[cntCompleterRetryErr]++
		if q.retryLeft == 0 {
			r.counters[cntRetryExceededErr]++
			w.state, w.status = wqeDone, emu.WCRetryExcErr
			r.complete(q)
			return
		}
		if q.retryLeft != 7 || r.cfg.Quirks.RetryCnt7Finite {
			q.retryLeft--
		}
	}
	q.startedRetry = true
	if !rnr && q.rnrWait {
		// An RNR NAK's timer is running: rxe counts this retry
		// (COMPST_ERROR_RETRY) but req.wait_for_rnr_timer holds the
		// resend until rnr_nak_timer fires, which rewinds. A PSN
		// sequence NAK for the rest of the RNR'd message must not
		// resend it at once (that made an RNR NAK storm against a real
		// peer).
		return
	}
	r.rewind(q, q.compPSN)
	r.runSQ(q)
}

// rewind resets the send progress of every started WQE to resend from
// psn on. r.mu held.
func (r *device) rewind(q *qp, psn uint32) {
	for _, w := range q.sq {
		if w.state != wqePending {
			continue
		}
		switch {
		case isAtomic(w.wr.Opcode) || ib.PSNCompare(psn, w.firstPSN) <= 0:
			w.next = 0
		case ib.PSNCompare(psn, w.lastPSN) <= 0:
			w.next = ib.PSNSub(psn, w.firstPSN)
		}
	}
	q.noack = 0
}

// ackUpTo acknowledges every PSN up to and including psn, as a coalesced
// ACK does: the seam tests use as a responding peer. r.mu held.
func (r *device) ackUpTo(q *qp, psn uint32) {
	if q.state < qpstate.StateRTS || q.state == qpstate.StateErr {
		return
	}
	for _, w := range q.sq {
		if w.state == wqePending && ib.PSNCompare(w.lastPSN, psn) <= 0 {
			w.next = w.npkts
			w.state, w.status = wqeDone, emu.WCSuccess
		}
	}
	q.compPSN = ib.PSNAdd(psn, 1)
	r.afterComp(q)
}

// afterComp retires, restarts the requester and re-arms or stops the
// retransmit timer, as the completer does on exit. r.mu held.
func (r *device) afterComp(q *qp) {
	q.rdeferred = false
	r.complete(q)
	r.runSQ(q)
	if q.state == qpstate.StateErr {
		return
	}
	if q.unacked() {
		r.armRetransmit(q, true)
	} else if q.rtimer != nil {
		q.ridle = true // del_timer in effect: it finds nothing unacknowledged
	}
}

// rnrDelay arms the RNR wait; at its end the requester retries from the
// NAK'd PSN. r.mu held.
func (r *device) rnrDelay(q *qp, code uint8) {
	d := r.cfg.Quirks.RNRDelay(code)
	q.rnrWait = true
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
	q.rnrGen++
	gen := q.rnrGen
	q.rnrTimer = r.clock().AfterFunc(d, func() {
		r.lock()
		defer r.unlock()
		if gen != q.rnrGen || !q.valid || r.detached || !q.rnrWait {
			return
		}
		q.rnrWait, q.rnrTimer = false, nil
		if q.state < qpstate.StateRTS || q.state == qpstate.StateErr {
			return
		}
		r.rewind(q, q.compPSN)
		r.runSQ(q)
		if q.unacked() {
			r.armRetransmit(q, true)
		}
	})
}
