package rxe

import (
	"encoding/binary"
	"errors"
	"math"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// NAK syndromes (enum aeth_syndrome).
const (
	nakPSNSeqErr  wire.Syndrome = 0x60
	nakInvalidReq wire.Syndrome = 0x61
	nakRemAccess  wire.Syndrome = 0x62
	nakRemOpErr   wire.Syndrome = 0x63
	synACK        wire.Syndrome = 0x1F
)

// atomicMu serializes responder atomics across devices that share memory,
// as rxe's global atomic_ops_lock.
var atomicMu sync.Mutex

// responder processes one request packet for q (rxe_responder). r.mu held.
func (r *device) responder(q *qp, p *wire.Packet) {
	bth := p.BTH()
	op := p.Opcode()
	fl := op.Flags()
	psn := bth.PSN()
	rc := q.typ == qpstate.TypeRC
	uc := q.typ == qpstate.TypeUC

	// 1. PSN.
	switch {
	case rc:
		switch d := ib.PSNCompare(psn, q.respPSN); {
		case d > 0:
			if !q.nakSent {
				q.nakSent = true
				r.counters[cntOutOfSeqRequest]++
				r.sendAck(q, nakPSNSeqErr, q.respPSN)
			}
			return
		case d < 0:
			r.counters[cntDuplicateRequest]++
			r.duplicate(q, p)
			return
		}
		q.nakSent = false
	case uc:
		if q.ucDrop || psn != q.respPSN {
			if !op.IsFirst() {
				q.ucDrop = true
				return
			}
			q.ucDrop = false
		}
	}

	// 2. Opcode sequence.
	if rc || uc {
		if q.opSeqBad(op) {
			if rc {
				r.nakErr(q, psn, nakInvalidReq)
				return
			}
			inMsg := q.respOp != 0
			r.ucAbandon(q)
			if !inMsg || !op.IsFirst() || !r.cfg.Quirks.UCResyncIBTA {
				q.ucDrop = inMsg // rxe: the message start only resets the sequence state and is dropped
				return
			}
		}
	}

	// 3. Operation allowed by the QP's access flags.
	var need ib.AccessFlags
	switch {
	case fl&wire.FlagRead != 0:
		need = ib.AccessRemoteRead
	case fl&wire.FlagAtomic != 0:
		need = ib.AccessRemoteAtomic
	case fl&(wire.FlagWrite|wire.FlagAtomicWrite) != 0:
		need = ib.AccessRemoteWrite
	case fl&wire.FlagFlush != 0:
		need = flushAccess(p.FETH().Placement())
	}
	if need != 0 && !q.isUD() && q.attr.QPAccessFlags&need != need {
		if rc {
			syn := nakInvalidReq
			if r.cfg.Quirks.AccessNAK62 {
				syn = nakRemAccess
			}
			r.nakErr(q, psn, syn)
		} else {
			r.ucFail(q, op, emu.WCRemAccessErr)
		}
		return
	}

	// 4. Resources.
	if fl&(wire.FlagRead|wire.FlagAtomic|wire.FlagAtomicWrite) != 0 && q.respRes == 0 {
		r.nakErr(q, psn, nakInvalidReq)
		return
	}
	if fl&wire.FlagRWR != 0 && !q.hasCur {
		w, ok := r.peekRecv(q)
		if !ok {
			if rc {
				r.counters[cntSendRNRErr]++
				r.sendAck(q, wire.RNRNAKSyndrome(q.attr.MinRNRTimer&0x1F), psn)
				if h := q.core.RNRNAKSent; h != nil {
					h()
				}
			} else if uc {
				q.ucDrop = !op.IsLast()
			}
			return
		}
		// 5. Length (UD): the payload and the 40-byte GRH area must fit.
		if q.isUD() && uint64(p.PayloadLen())+emu.GRHSize > w.length {
			if q.srq != nil {
				w, _ = r.takeRecv(q)
				r.recvWC(q, w, emu.WCRemInvReqErr, emu.WCRecv, 0, p)
			}
			return
		}
		q.cur, _ = r.takeRecv(q)
		q.hasCur, q.curOff = true, 0
	}

	// 5. Length (RC/UC).
	plen := p.PayloadLen()
	if !q.isUD() && fl&(wire.FlagSend|wire.FlagWrite) != 0 {
		mtu := q.mtu()
		var bad bool
		switch {
		case op.IsOnly():
			bad = plen > mtu
		case op.IsFirst() || op.IsMiddle():
			bad = plen != mtu
		default:
			bad = plen < 1 || plen > mtu
		}
		if fl&wire.FlagWrite != 0 && op.IsFirst() && p.RETH().DMALen() > maxMsgSize {
			bad = true
		}
		if bad {
			if rc {
				r.nakErr(q, psn, nakInvalidReq)
			} else {
				r.ucFail(q, op, emu.WCRemInvReqErr)
			}
			return
		}
	}

	// 6-7. Keys and execution.
	switch {
	case fl&wire.FlagSend != 0:
		if !r.execSend(q, p) {
			return
		}
	case fl&wire.FlagWrite != 0:
		if !r.execWrite(q, p) {
			return
		}
	case fl&wire.FlagRead != 0:
		r.execRead(q, p)
		return
	case fl&wire.FlagAtomic != 0:
		r.execAtomic(q, p)
		return
	case fl&wire.FlagAtomicWrite != 0:
		r.execAtomicWrite(q, p)
		return
	case fl&wire.FlagFlush != 0:
		r.execFlush(q, p)
		return
	default:
		if rc {
			r.nakErr(q, psn, nakInvalidReq)
		}
		return
	}
	q.respPSN = ib.PSNAdd(psn, 1)
	if q.isUD() {
		return
	}
	q.ackPSN = psn
	invErr := q.invErr
	q.invErr = false
	if rc && invErr && r.cfg.Quirks.InvalidateNAK {
		r.nakErr(q, psn, nakInvalidReq)
		return
	}
	// 9. Acknowledge every packet that asks for it, at once (rxe_resp.c
	// acknowledge; Config.CoalesceACKs may merge it, ackhold.go).
	if rc && bth.AckReq() {
		r.sendAck(q, synACK, psn)
	}
	if invErr {
		r.toErr(q) // rxe: ACKed normally, then the QP is in error
	}
}

// opSeqBad is check_op_seq: inside a SEND only SEND MIDDLE/LAST may follow,
// inside a WRITE only WRITE MIDDLE/LAST, outside a message no MIDDLE/LAST.
func (q *qp) opSeqBad(op wire.Opcode) bool {
	fl := op.Flags()
	if fl&(wire.FlagSend|wire.FlagWrite) == 0 {
		return q.respOp != 0
	}
	switch q.respOp {
	case respInSend:
		return fl&wire.FlagSend == 0 || op.IsFirst()
	case respInWrite:
		return fl&wire.FlagWrite == 0 || op.IsFirst()
	}
	return !op.IsFirst()
}

// ucAbandon gives up the UC message in progress: its receive WQE is
// rewound for the next message (with an SRQ it completes with
// IB_WC_REM_INV_REQ_ERR). r.mu held.
func (r *device) ucAbandon(q *qp) {
	q.respOp = 0
	if q.hasCur {
		if q.srq != nil {
			r.recvWC(q, q.cur, emu.WCRemInvReqErr, emu.WCRecv, 0, nil)
			q.hasCur = false
		}
		q.curOff = 0
	}
}

// ucFail drops a UC message for a length or key error.
func (r *device) ucFail(q *qp, op wire.Opcode, st emu.WCStatus) {
	q.respOp = 0
	if q.hasCur && q.srq != nil {
		r.recvWC(q, q.cur, st, emu.WCRecv, 0, nil)
		q.hasCur = false
	}
	q.curOff = 0
	q.ucDrop = !op.IsLast()
}

// payload returns p's payload: the one its frame carries, or the one the
// in-memory link carried by reference (link.PipeEnd.ReadRef), straight
// from the sender's memory. r.mu held.
func (r *device) payload(p *wire.Packet) []byte {
	pay := p.Payload()
	if ref := r.rxRef; ref.B != nil {
		if ref.Off == p.PayloadOffset() && len(ref.B) == len(pay) {
			return ref.B
		}
		// Not where the headers put the payload (never from an rxe
		// device): the frame as written.
		if ref.Off < len(p.Frame()) {
			copy(p.Frame()[ref.Off:], ref.B)
		}
	}
	return pay
}

// execSend places SEND data into the receive WQE and completes it on the
// last packet. It returns false when the packet failed (the QP is in ERR).
func (r *device) execSend(q *qp, p *wire.Packet) bool {
	op := p.Opcode()
	pay := r.payload(p)
	if q.isUD() {
		var hdr [emu.GRHSize]byte
		ip := p.IPHeader()
		copy(hdr[emu.GRHSize-len(ip):], ip)
		if err := r.scatterAt(q, q.cur.sgl, 0, hdr[:]); err != nil {
			q.hasCur = false
			r.recvWC(q, q.cur, emu.WCLocQPOpErr, emu.WCRecv, 0, p)
			r.toErr(q)
			return false
		}
		q.curOff = emu.GRHSize
	}
	if err := r.scatterAt(q, q.cur.sgl, q.curOff, pay); err != nil {
		// rxe treats overflow and bad receive SGEs as a malformed WQE
		// (class A): LOC_QP_OP_ERR and NAK 0x63.
		st, syn := emu.WCLocQPOpErr, nakRemOpErr
		if r.cfg.Quirks.RecvOverflowIBTA {
			st, syn = emu.WCLocLenErr, nakInvalidReq
		}
		q.hasCur = false
		r.recvWC(q, q.cur, st, emu.WCRecv, 0, p)
		if q.typ == qpstate.TypeRC {
			r.sendAck(q, syn, p.BTH().PSN())
		}
		r.toErr(q)
		return false
	}
	q.curOff += uint64(len(pay))
	if !op.IsLast() {
		q.respOp = respInSend
		return true
	}
	q.respOp = 0
	st := emu.WCSuccess
	if ieth := p.IETH(); ieth != nil {
		if err := r.invalidate(ieth.RKey()); err != nil {
			st = emu.WCRemInvReqErr
			q.invErr = true
		}
	}
	q.hasCur = false
	if !q.isUD() {
		q.msn = ib.PSNAdd(q.msn, 1)
	}
	r.recvWC(q, q.cur, st, emu.WCRecv, uint32(q.curOff), p)
	return true
}

// writeDest returns where the next n bytes of q's RDMA WRITE go, when
// its R_Key names a user MR in the device's own memory that holds the
// rest of the message (the range rxe's check_rkey checks on a first
// packet): the MR is looked up once and its memory reused for the
// message's next packets while r.mu stays held (unlock forgets it), its
// state checked again for each (an invalidation among the packets of one
// batch). Else, or for n 0, it returns nil and execWrite looks the key up
// for the packet alone, as before. r.mu held.
func (r *device) writeDest(q *qp, n int) []byte {
	if n == 0 {
		return nil
	}
	c := &r.wdst
	if c.q != q || c.rkey != q.wrRKey || c.m.state != memValid || q.wrVA < c.va || q.wrVA-c.va > uint64(len(c.b)) ||
		uint64(n) > uint64(len(c.b))-(q.wrVA-c.va) {
		c.q = nil
		if q.wrRKey>>8 >= minMWIndex || q.wrLeft < uint64(n) || q.wrLeft > math.MaxInt32 {
			return nil
		}
		m, addr, err := r.rkeyMR(q, q.wrRKey, ib.AccessRemoteWrite, q.wrVA, q.wrLeft)
		if err != nil || m.typ != emu.MRTypeUser || m.space != nil {
			return nil
		}
		b, err := r.memSlice(m, addr, int(q.wrLeft))
		if err != nil {
			return nil
		}
		*c = writeDest{q: q, rkey: q.wrRKey, m: m, va: q.wrVA, b: b}
	}
	off := q.wrVA - c.va
	return c.b[off : off+uint64(n) : off+uint64(n)]
}

// writeDest is the memory writeDest found for the rest of a QP's RDMA
// WRITE message: rkey's MR m and its bytes b from virtual address va.
type writeDest struct {
	q    *qp
	rkey uint32
	m    *mr
	va   uint64
	b    []byte
}

// execWrite places RDMA WRITE data. It returns false when the packet
// failed (NAK sent or message dropped).
func (r *device) execWrite(q *qp, p *wire.Packet) bool {
	op := p.Opcode()
	psn := p.BTH().PSN()
	pay := r.payload(p)
	if op.IsFirst() {
		reth := p.RETH()
		q.wrVA, q.wrRKey = reth.VA(), reth.RKey()
		q.wrLeft = uint64(reth.DMALen())
		q.wrTotal = q.wrLeft
	}
	mtu := uint64(q.mtu())
	if (q.wrLeft > mtu && uint64(len(pay)) != mtu) || (q.wrLeft <= mtu && uint64(len(pay)) != q.wrLeft) {
		if q.typ == qpstate.TypeRC {
			r.nakErr(q, psn, nakInvalidReq)
		} else {
			r.ucFail(q, op, emu.WCRemInvReqErr)
		}
		return false
	}
	if dst := r.writeDest(q, len(pay)); dst != nil {
		r.flushWrites()
		copy(dst, pay)
	} else if len(pay) > 0 {
		m, addr, err := r.rkeyMR(q, q.wrRKey, ib.AccessRemoteWrite, q.wrVA, uint64(len(pay)))
		if err == nil {
			err = r.writePayload(m, addr, pay, q.wrLeft == uint64(len(pay)))
		}
		if err != nil {
			if q.typ == qpstate.TypeRC {
				r.rkeyViolation(q, p, psn)
			} else {
				r.ucFail(q, op, emu.WCRemAccessErr)
			}
			return false
		}
	}
	q.wrVA += uint64(len(pay))
	q.wrLeft -= uint64(len(pay))
	if !op.IsLast() {
		q.respOp = respInWrite
		return true
	}
	q.respOp = 0
	q.msn = ib.PSNAdd(q.msn, 1)
	if p.ImmDt() != nil {
		q.hasCur = false
		r.recvWC(q, q.cur, emu.WCSuccess, emu.WCRecvRDMAWithImm, uint32(q.wrTotal), p)
	}
	return true
}

// execRead answers an RDMA READ request (read_reply).
func (r *device) execRead(q *qp, p *wire.Packet) {
	psn := p.BTH().PSN()
	reth := p.RETH()
	va, rkey, n := reth.VA(), reth.RKey(), uint64(reth.DMALen())
	if n > maxMsgSize {
		r.nakErr(q, psn, nakInvalidReq)
		return
	}
	if n > 0 {
		if _, _, err := r.rkeyMR(q, rkey, ib.AccessRemoteRead, va, n); err != nil {
			r.rkeyViolation(q, p, psn)
			return
		}
	}
	mtu := uint64(q.mtu())
	npk := uint32(max(1, (n+mtu-1)/mtu))
	res := q.saveRes(respRes{firstPSN: psn, lastPSN: ib.PSNAdd(psn, npk-1), va: va, rkey: rkey, length: n})
	if !r.readReply(q, res, psn, va, n) {
		return
	}
	if next := ib.PSNAdd(res.lastPSN, 1); ib.PSNCompare(next, q.respPSN) > 0 {
		q.respPSN = next
	}
}

// readReply sends the READ responses for length bytes at va starting at
// psn: FIRST/ONLY when psn is the request's first PSN, else continuing as
// MIDDLE/LAST (a replay). The key is checked again for every packet. The
// reply is a readJob of the QP: up to readBurst packets go out at once,
// the rest in later rounds of pumpReads, between other QPs' (readjob.go).
// It returns false when a key check failed in the first burst (the QP then
// is in ERR).
func (r *device) readReply(q *qp, res *respRes, psn uint32, va, length uint64) bool {
	mtu := uint64(q.mtu())
	q.jobs = append(q.jobs, readJob{rkey: res.rkey, psn: psn, va: va, length: length,
		fromStart: psn == res.firstPSN, n: max(1, (length+mtu-1)/mtu)})
	if len(q.jobs) > 1 || q.inReads {
		return true
	}
	ok := r.runReads(q, readBurst)
	r.schedReads(q)
	return ok
}

// readPacket sends packet i of job j; false when its key check failed
// (NAK sent, QP in ERR). r.mu held.
func (r *device) readPacket(q *qp, j *readJob, i uint64) bool {
	mtu := uint64(q.mtu())
	plen := min(mtu, j.length-min(j.length, i*mtu))
	var op wire.Opcode
	switch {
	case j.n == 1 && j.fromStart:
		op = wire.RCRDMAReadResponseOnly
	case i == j.n-1:
		op = wire.RCRDMAReadResponseLast
	case i == 0 && j.fromStart:
		op = wire.RCRDMAReadResponseFirst
	default:
		op = wire.RCRDMAReadResponseMiddle
	}
	ppsn := ib.PSNAdd(j.psn, uint32(i))
	va := j.va + i*mtu
	var pay []byte
	if plen > 0 {
		if cap(r.scratch) < int(plen) {
			r.scratch = make([]byte, plen)
		}
		pay = r.scratch[:plen]
		m, addr, err := r.rkeyMR(q, j.rkey, ib.AccessRemoteRead, va, plen)
		if err == nil {
			err = r.memIO(m, addr, pay, false)
		}
		if err != nil {
			r.nakErr(q, ppsn, nakRemAccess)
			return false
		}
	}
	f := r.newFrame(r.connPath(q), q.sport)
	f.BTH.Opcode, f.BTH.DestQP, f.BTH.PSN = op, q.attr.DestQPNum, ppsn
	f.AETH = wire.AETHFields{Syndrome: synACK, MSN: q.msn}
	f.Payload = pay
	r.emit(f)
	return true
}

// execAtomic performs CMP_SWAP / FETCH_ADD (atomic_reply).
func (r *device) execAtomic(q *qp, p *wire.Packet) {
	psn := p.BTH().PSN()
	a := p.AtomicETH()
	va := a.VA()
	if va&7 != 0 {
		r.nakErr(q, psn, nakInvalidReq)
		return
	}
	m, addr, err := r.rkeyMR(q, a.RKey(), ib.AccessRemoteAtomic, va, 8)
	if err != nil {
		r.rkeyViolation(q, p, psn)
		return
	}
	var b [8]byte
	atomicMu.Lock()
	err = r.memIO(m, addr, b[:], false)
	orig := binary.LittleEndian.Uint64(b[:])
	v := orig
	if p.Opcode() == wire.RCCompareSwap {
		if orig == a.Compare() {
			v = a.SwapAdd()
		}
	} else {
		v = orig + a.SwapAdd()
	}
	if err == nil {
		binary.LittleEndian.PutUint64(b[:], v)
		err = r.memIO(m, addr, b[:], true)
	}
	atomicMu.Unlock()
	if err != nil {
		r.nakErr(q, psn, nakRemAccess)
		return
	}
	q.saveSinglePacketRes(respRes{atomic: true, firstPSN: psn, lastPSN: psn, va: va, rkey: a.RKey(), length: 8, orig: orig})
	r.sendAtomicAck(q, psn, orig)
}

// execAtomicWrite performs ATOMIC_WRITE: an 8-byte store answered by an
// empty RDMA_READ_RESPONSE_ONLY.
func (r *device) execAtomicWrite(q *qp, p *wire.Packet) {
	psn := p.BTH().PSN()
	reth := p.RETH()
	pay := p.Payload()
	if reth.DMALen() != 8 || len(pay) != 8 || p.BTH().PadCnt() != 0 {
		r.nakErr(q, psn, nakInvalidReq)
		return
	}
	m, addr, err := r.rkeyMR(q, reth.RKey(), ib.AccessRemoteWrite, reth.VA(), 8)
	if err != nil {
		r.rkeyViolation(q, p, psn)
		return
	}
	atomicMu.Lock()
	err = r.memIO(m, addr, pay, true)
	atomicMu.Unlock()
	if err != nil {
		r.nakErr(q, psn, nakRemAccess)
		return
	}
	res := q.saveSinglePacketRes(respRes{firstPSN: psn, lastPSN: psn, va: reth.VA(), rkey: reth.RKey(), length: 0})
	r.readReply(q, res, psn, 0, 0)
}

// flushAccess is the access a FLUSH of placement type plt needs of the QP
// and of the MR (check_qp_attr_access, check_rkey): FLUSH_GLOBAL for
// global visibility, FLUSH_PERSISTENT for persistence.
func flushAccess(plt uint8) ib.AccessFlags {
	var a ib.AccessFlags
	if plt&emu.FlushGlobal != 0 {
		a |= ib.AccessFlushGlobal
	}
	if plt&emu.FlushPersistent != 0 {
		a |= ib.AccessFlushPersistent
	}
	return a
}

// execFlush performs FLUSH as rxe's check_length, check_rkey and
// process_flush do, answering with an empty RDMA_READ_RESPONSE_ONLY: a
// RETH length above 2^31 is NAK 0x61; the R_Key must name an MR (or MW)
// with the FLUSH access of the placement type, and an IB_FLUSH_RANGE
// flush must lie inside it (an IB_FLUSH_MR one flushes the whole region
// and its RETH address and length are not checked), else NAK 0x62. The
// emulator's memory is coherent, so global visibility needs nothing; a
// persistent flush of a DMA MR fails (rxe_flush_pmem_iova's -EFAULT,
// NAK 0x62) and of any other MR succeeds, which can only be a region of
// persistent memory (RegUserMR refuses FLUSH_PERSISTENT otherwise) or an
// ODP MR, whose range is faulted in first (NAK 0x62 where it fails). The
// request takes a responder resource, so a duplicate is answered again.
func (r *device) execFlush(q *qp, p *wire.Packet) {
	psn := p.BTH().PSN()
	reth, feth := p.RETH(), p.FETH()
	if reth.DMALen() > maxMsgSize {
		r.nakErr(q, psn, nakInvalidReq)
		return
	}
	va, n := reth.VA(), uint64(reth.DMALen())
	if feth.Selectivity() == emu.FlushMR {
		// Only the key and the access count: check an empty range at
		// the region's own start.
		va, n = r.regionStart(reth.RKey()), 0
	}
	m, _, err := r.rkeyMR(q, reth.RKey(), flushAccess(feth.Placement()), va, n)
	if err == nil && feth.Placement()&emu.FlushPersistent != 0 && m.typ == emu.MRTypeDMA {
		err = errorf(unix.EFAULT, "persistent flush of a DMA MR")
	}
	if err == nil && feth.Placement()&emu.FlushPersistent != 0 && m.odp {
		// rxe_odp_flush_pmem_iova faults the range in, read-only, before
		// it writes the cache back: the whole MR for IB_FLUSH_MR.
		fva, fn := reth.VA(), uint64(reth.DMALen())
		if feth.Selectivity() == emu.FlushMR {
			fva, fn = m.iova, m.length
		}
		err = r.faultIn(m, fva, fn)
	}
	if err != nil {
		r.rkeyViolation(q, p, psn)
		return
	}
	if q.respRes == 0 {
		q.msn = ib.PSNAdd(q.msn, 1)
		q.respPSN, q.ackPSN = ib.PSNAdd(psn, 1), psn
		r.readReply(q, &respRes{firstPSN: psn, lastPSN: psn}, psn, 0, 0)
		return
	}
	res := q.saveSinglePacketRes(respRes{firstPSN: psn, lastPSN: psn, va: va, rkey: reth.RKey(), flush: true})
	r.readReply(q, res, psn, 0, 0)
}

// rkeyViolation answers an R_Key violation of RC request p found while
// checking its key and range (rxe_resp.c check_rkey), writing its payload
// (write_data_in) or flushing to persistence (process_flush): NAK 0x62,
// the QP to ERR and, from Linux 7.1 (Config.Kernel's AccessErrEvent),
// first IB_EVENT_QP_ACCESS_ERR when p carries no immediate data, which
// would pin the error on a receive WQE instead (IBA C9-222.1.1;
// get_rkey_violation_state).
func (r *device) rkeyViolation(q *qp, p *wire.Packet, psn uint32) {
	if r.cfg.Kernel.AccessErrEvent() && p.ImmDt() == nil {
		r.event(emu.Event{Type: emu.EventQPAccessErr, QP: q.core})
	}
	r.nakErr(q, psn, nakRemAccess)
}

// regionStart is the address at which the MR or MW rkey names starts, in
// the terms rkeyMR takes (0 for a zero-based MW); 0 for an unknown key,
// which rkeyMR then refuses.
func (r *device) regionStart(rkey uint32) uint64 {
	if idx := rkey >> 8; idx >= minMWIndex {
		if w, ok := r.mws[idx]; ok && w.access&ib.AccessZeroBased == 0 {
			return w.addr
		}
		return 0
	}
	if m, ok := r.mrs[rkey>>8]; ok {
		return m.iova
	}
	return 0
}

// saveRes records a read, atomic or atomic-write request in the responder
// resource ring, for replay of a duplicate, and counts its message (MSN).
func (q *qp) saveRes(rr respRes) *respRes {
	res := q.newRes()
	*res = rr
	q.msn = ib.PSNAdd(q.msn, 1)
	return res
}

// saveSinglePacketRes is saveRes for a one-packet request (atomics,
// ATOMIC_WRITE): the responder then expects the next PSN and acknowledges
// this one.
func (q *qp) saveSinglePacketRes(rr respRes) *respRes {
	res := q.saveRes(rr)
	q.respPSN = ib.PSNAdd(rr.firstPSN, 1)
	q.ackPSN = rr.firstPSN
	return res
}

// newRes takes the next slot of the responder resource ring, recycling the
// oldest (rxe_prepare_res).
func (q *qp) newRes() *respRes {
	if len(q.res) < q.respRes {
		q.res = append(q.res, respRes{})
		return &q.res[len(q.res)-1]
	}
	res := &q.res[q.resNext%len(q.res)]
	q.resNext = (q.resNext + 1) % len(q.res)
	return res
}

// findRes returns the resource whose PSN range holds psn.
func (q *qp) findRes(psn uint32) *respRes {
	for i := range q.res {
		x := &q.res[i]
		if ib.PSNCompare(psn, x.firstPSN) >= 0 && ib.PSNCompare(psn, x.lastPSN) <= 0 {
			return x
		}
	}
	return nil
}

// duplicate handles a request behind the expected PSN (duplicate_request):
// SEND/WRITE are re-ACKed with the last in-order PSN, READs replayed from
// their resource, atomics answered with the saved original value.
func (r *device) duplicate(q *qp, p *wire.Packet) {
	fl := p.Opcode().Flags()
	psn := p.BTH().PSN()
	switch {
	case fl&(wire.FlagSend|wire.FlagWrite) != 0:
		r.sendAck(q, synACK, q.ackPSN)
	case fl&wire.FlagRead != 0:
		res := q.findRes(psn)
		if res == nil || res.atomic {
			return
		}
		reth := p.RETH()
		va, n := reth.VA(), uint64(reth.DMALen())
		if reth.RKey() != res.rkey || va < res.va || va+n > res.va+res.length {
			return
		}
		r.readReply(q, res, psn, va, n)
	case fl&wire.FlagAtomic != 0:
		if res := q.findRes(psn); res != nil && res.atomic {
			r.sendAtomicAck(q, psn, res.orig)
		}
	case fl&wire.FlagAtomicWrite != 0:
		if res := q.findRes(psn); res != nil && !res.atomic && !res.flush {
			r.readReply(q, res, psn, 0, 0)
		}
	case fl&wire.FlagFlush != 0:
		// rxe's duplicate_request: a FLUSH found among the responder
		// resources is answered again (process_flush's replay), else
		// dropped.
		if res := q.findRes(psn); res != nil && res.flush {
			r.readReply(q, res, psn, 0, 0)
		}
	}
}

// sendAck sends an ACKNOWLEDGE with syndrome syn for psn and the current
// MSN. r.mu held.
func (r *device) sendAck(q *qp, syn wire.Syndrome, psn uint32) {
	f := r.newFrame(r.connPath(q), q.sport)
	f.BTH.Opcode, f.BTH.DestQP, f.BTH.PSN = wire.RCAcknowledge, q.attr.DestQPNum, psn
	f.AETH = wire.AETHFields{Syndrome: syn, MSN: q.msn}
	r.emit(f)
}

func (r *device) sendAtomicAck(q *qp, psn uint32, orig uint64) {
	f := r.newFrame(r.connPath(q), q.sport)
	f.BTH.Opcode, f.BTH.DestQP, f.BTH.PSN = wire.RCAtomicAcknowledge, q.attr.DestQPNum, psn
	f.AETH = wire.AETHFields{Syndrome: synACK, MSN: q.msn}
	f.AtomicAckETH.OrigData = orig
	r.emit(f)
}

// nakErr sends a class A/C NAK for psn and moves the responder QP to ERR.
func (r *device) nakErr(q *qp, psn uint32, syn wire.Syndrome) {
	r.sendAck(q, syn, psn)
	r.toErr(q)
}

// peekRecv returns the receive WQE the next message would take.
func (r *device) peekRecv(q *qp) (recvWQE, bool) {
	if q.srq != nil {
		if !q.srq.refill() {
			return recvWQE{}, false
		}
		return q.srq.wqes[0], true
	}
	if len(q.rq) == 0 && !r.refillRQ(q) {
		return recvWQE{}, false
	}
	return q.rq[0], true
}

// recvWC posts a receive completion; p is the packet that
// ends the message (nil for an error without one). A full CQ moves the QP
// to ERR.
func (r *device) recvWC(q *qp, w recvWQE, st emu.WCStatus, op emu.WCOpcode, n uint32, p *wire.Packet) {
	wc := emu.WC{WRID: w.wrID, Status: st, Opcode: op, QP: q.core, PortNum: 1,
		WCFlags: emu.WCGRH | emu.WCWithNetworkHdrType, NetworkHdrType: emu.NetworkIPv4}
	solicited := false
	if p != nil {
		if p.IsIPv6() {
			wc.NetworkHdrType = emu.NetworkIPv6
		}
		if st == emu.WCSuccess || st == emu.WCRemInvReqErr {
			wc.ByteLen = n
			if imm := p.ImmDt(); imm != nil {
				wc.ImmData, wc.WCFlags = imm.Imm(), wc.WCFlags|emu.WCWithImm
			}
			if ieth := p.IETH(); ieth != nil {
				wc.InvalidateRKey, wc.WCFlags = ieth.RKey(), wc.WCFlags|emu.WCWithInvalidate
			}
			if deth := p.DETH(); deth != nil {
				wc.SrcQP = deth.SrcQP()
			}
			if v := r.cfg.Device.NetDev.VLANID; v != 0 && st == emu.WCSuccess {
				// do_complete: a packet that came in on a VLAN
				// device says so.
				wc.VLANID, wc.WCFlags = v, wc.WCFlags|emu.WCWithVLAN
			}
		}
		solicited = p.BTH().SE()
	}
	if st == emu.WCSuccess {
		r.counters[cntRDMARecvs]++
	}
	if !r.post(q.rcq, wc, solicited) {
		r.toErr(q)
	}
}

// faultIn reads a byte of every page of [va, va+n) of ODP MR m, as
// resolving its pages for the device does; it fails where one is not
// mapped. r.mu held.
func (r *device) faultIn(m *mr, va, n uint64) error {
	addr, err := r.mrAddr(m, va, n)
	if err != nil || n == 0 {
		return err
	}
	var b [1]byte
	for a := addr; a < addr+n; a = (a | (dma.PageSize - 1)) + 1 {
		if err := r.memIO(m, a, b[:], false); err != nil {
			return err
		}
	}
	return nil
}

// memIO reads or writes buf at a memory address resolved through m (user
// MRs through their pinned mapping, DMA and fast-reg MRs through the DMA
// mapper).
func (r *device) memIO(m *mr, addr uint64, buf []byte, write bool) error {
	r.flushWrites()
	if m.pinned != nil {
		// Another process's pages the space maps for the device
		// (dma.Pinner), reached as the kernel reaches pinned pages.
		off := addr - m.start
		if addr < m.start || off > uint64(len(m.pinned)) || uint64(len(buf)) > uint64(len(m.pinned))-off {
			return errorf(unix.EFAULT, "%#x+%d outside the pinned pages of MR %#x", addr, len(buf), m.lkey)
		}
		if write {
			copy(m.pinned[off:], buf)
		} else {
			copy(buf, m.pinned[off:])
		}
		return nil
	}
	if m.typ == emu.MRTypeUser && m.space != nil {
		// Another process's memory (a uverbs client's MR): copied in and
		// out, as process_vm_readv/writev reach it. An ODP MR's access
		// fails where its owner is gone (ib_umem_odp_map_dma_and_lock
		// finds no mm).
		if write {
			_, err := m.space.WriteAt(buf, addr)
			if errors.Is(err, dma.ErrSpaceGone) && !m.odp {
				// The owner died with the MR registered: the
				// kernel's pinned pages would take the write.
				return nil
			}
			return err
		}
		_, err := m.space.ReadAt(buf, addr)
		return err
	}
	if m.typ == emu.MRTypeUser {
		b, err := r.memSlice(m, addr, len(buf))
		if err != nil {
			return err
		}
		if write {
			copy(b, buf)
		} else {
			copy(buf, b)
		}
		return nil
	}
	if write {
		return r.dev.DMA().DeviceWrite(addr, buf)
	}
	return r.dev.DMA().DeviceRead(addr, buf)
}
