package rxe

import (
	"encoding/binary"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// completer processes one response packet for q against its oldest
// outstanding WQE (rxe_completer). r.mu held.
func (r *device) completer(q *qp, p *wire.Packet) {
	op := p.Opcode()
	psn := p.BTH().PSN()
	defer r.afterComp(q)
	for {
		w := q.oldestPending()
		if w == nil {
			return // nothing sent that awaits a response: ignore
		}
		rdat := isReadOrAtomic(w.wr.Opcode)
		// A response beyond this WQE: a SEND/WRITE was acknowledged by a
		// coalesced ACK; a READ/atomic lost its response and is retried.
		if ib.PSNCompare(psn, w.lastPSN) > 0 {
			if rdat {
				if q.rnrWait {
					return
				}
				r.retry(q, false, false)
				return
			}
			if w.next < w.npkts {
				return
			}
			r.finish(q, w, emu.WCSuccess)
			q.compPSN = ib.PSNAdd(w.lastPSN, 1)
			continue
		}
		switch c := ib.PSNCompare(psn, q.compPSN); {
		case c < 0:
			// Stale: only an ACK of the WQE's last PSN or a NAK inside a
			// read still means something.
			if op == wire.RCAcknowledge && psn == w.lastPSN && !rdat && w.next == w.npkts {
				break
			}
			if op == wire.RCAcknowledge && rdat && p.AETH().Syndrome().IsNAK() {
				break
			}
			return
		case c > 0 && rdat:
			return // out of order inside a read: wait for the retry
		}
		r.handleResponse(q, w, p)
		return
	}
}

// handleResponse applies a response in sequence to w.
func (r *device) handleResponse(q *qp, w *sendWQE, p *wire.Packet) {
	op := p.Opcode()
	psn := p.BTH().PSN()
	wop := w.wr.Opcode
	isRead := wop == emu.WRRDMARead || wop == emu.WRRDMAReadWithInv
	switch op {
	case wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast,
		wire.RCRDMAReadResponseOnly:
		if aeth := p.AETH(); aeth != nil && !aeth.Syndrome().IsACK() {
			r.fail(q, w, emu.WCBadRespErr)
			return
		}
		if (wop == emu.WRAtomicWrite || wop == emu.WRFlush) && op == wire.RCRDMAReadResponseOnly {
			q.reload()
			q.compPSN = ib.PSNAdd(psn, 1)
			r.finish(q, w, emu.WCSuccess)
			return
		}
		if !isRead {
			r.fail(q, w, emu.WCFatalErr) // a READ response for a non-READ WQE
			return
		}
		// A restarted read answers from its FIRST/ONLY; inside one only
		// MIDDLE/LAST continue it.
		idx := ib.PSNSub(psn, w.firstPSN)
		off := uint64(idx) * uint64(q.mtu())
		if pay := p.Payload(); len(pay) > 0 {
			if off+uint64(len(pay)) > w.length {
				r.fail(q, w, emu.WCLocLenErr)
				return
			}
			if err := r.scatterAt(q, w.wr.SGList, off, pay); err != nil {
				r.fail(q, w, emu.WCLocProtErr)
				return
			}
		}
		q.reload()
		q.compPSN = ib.PSNAdd(psn, 1)
		if op.IsLast() {
			r.finish(q, w, emu.WCSuccess)
		}
	case wire.RCAtomicAcknowledge:
		if !isAtomic(wop) || !p.AETH().Syndrome().IsACK() {
			r.fail(q, w, emu.WCBadRespErr)
			return
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], p.AtomicAckETH().OrigData())
		if err := r.scatterAt(q, w.wr.SGList, 0, b[:]); err != nil {
			r.fail(q, w, emu.WCLocProtErr)
			return
		}
		q.reload()
		q.compPSN = ib.PSNAdd(psn, 1)
		r.finish(q, w, emu.WCSuccess)
	case wire.RCAcknowledge:
		r.handleAETH(q, w, p)
	default:
		r.fail(q, w, emu.WCBadRespErr)
	}
}

// handleAETH decodes an ACKNOWLEDGE's syndrome.
func (r *device) handleAETH(q *qp, w *sendWQE, p *wire.Packet) {
	psn := p.BTH().PSN()
	syn := p.AETH().Syndrome()
	switch {
	case syn.IsACK():
		if isReadOrAtomic(w.wr.Opcode) {
			return
		}
		q.reload()
		if ib.PSNCompare(psn, q.compPSN) >= 0 {
			q.compPSN = ib.PSNAdd(psn, 1)
		}
		if psn == w.lastPSN && w.next == w.npkts {
			r.finish(q, w, emu.WCSuccess)
		}
	case syn.IsRNRNAK():
		r.counters[cntRcvdRNRErr]++
		if q.rnrLeft == 0 {
			r.counters[cntRetryRNRExceededErr]++
			r.fail(q, w, emu.WCRNRRetryExcErr)
			return
		}
		if q.rnrLeft != 7 {
			q.rnrLeft--
		}
		q.compPSN = psn
		r.rnrDelay(q, syn.Value())
	case syn == nakPSNSeqErr:
		if ib.PSNCompare(psn, q.compPSN) > 0 {
			r.counters[cntRcvdSeqErr]++
			for _, x := range q.sq {
				if x.state == wqePending && !isReadOrAtomic(x.wr.Opcode) && ib.PSNCompare(x.lastPSN, psn) < 0 {
					r.finish(q, x, emu.WCSuccess)
				}
			}
			q.compPSN = psn
		}
		r.retry(q, false, false)
	case syn == nakInvalidReq:
		r.fail(q, w, emu.WCRemInvReqErr)
	case syn == nakRemAccess:
		r.fail(q, w, emu.WCRemAccessErr)
	case syn.IsNAK():
		r.fail(q, w, emu.WCRemOpErr)
	default:
		// Reserved syndrome kinds: rxe leaves the status unset; the
		// emulator reports IB_WC_BAD_RESP_ERR (rxe_completer's error path
		// does not set wqe->status for them).
		r.fail(q, w, emu.WCBadRespErr)
	}
}

// reload refills the retry counters after a valid response.
func (q *qp) reload() {
	q.retryLeft, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.startedRetry = false
}

// finish marks w done with st.
func (r *device) finish(q *qp, w *sendWQE, st emu.WCStatus) {
	w.next = w.npkts
	w.state, w.status = wqeDone, st
}

// fail completes w with an error status; the retirement moves the QP to
// ERR and flushes the rest.
func (r *device) fail(q *qp, w *sendWQE, st emu.WCStatus) {
	r.finish(q, w, st)
	if q.state != qpstate.StateErr {
		r.complete(q)
	}
}
