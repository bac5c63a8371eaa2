package rxe

import (
	"net/netip"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/wire"
)

// Held ACKs: hfi1-style deferred and coalesced ACKs (Config.CoalesceACKs).
//
// By default nothing here applies: the responder answers every RC packet
// that asks for an ACK (AckReq), every atomic and every NAK with a
// response of its own, queued as it processes the packet and written
// when the device lock that processed it is released, after the
// completion handlers the packet woke (rxe_resp.c: do_complete, then
// acknowledge and send_ack). A peer sees one ACK per message, and one
// per RXE_MAX_PKT_PER_ACK packets within a long one (req.go).
//
// With Config.CoalesceACKs the device departs from rxe as the kernel's
// hfi1 and qib drivers do (rc_defered_ack). On a link whose reader
// processes what it reads (NonBlockingWriter), a batch of received frames
// that delivered a completion to a handler (a SEND received: the
// application is woken) holds the ACKs it queued instead of writing them
// at once. On such a link every frame written is a system call: writing
// the ACK right after the completion makes the application, woken on the
// same CPU, wait for it before it can post its answer, and the peer's
// reader, woken for that answer, wait for the ACK that arrived first. A
// held ACK goes out
//
//   - with the next batch that queues a response without notifying
//     anybody (an RDMA WRITE's ACK), a response that is not a plain ACK
//     (a NAK, a READ response, an atomic ACK), or a response queued
//     outside the reader (a looped-back frame's, which a Settle caller
//     waits for), in queue order;
//   - when maxMergedAcks later ACKs to the same QP were merged into it;
//   - when heldAckTime has passed since the hold began;
//   - when the device closes.
//
// While held, and within one batch read, a plain ACK to the same remote
// QP replaces the one queued before it: an ACK acknowledges every request
// up to its PSN, and its MSN counts every message completed, so the later
// one says all the earlier one did. The requester asked for an ACK on
// each message's last packet (AckReq); it receives one, later, covering
// several. On a bare link.PipeEnd, whose reader also processes what it
// reads, the ACKs of one batch are merged the same way but never held:
// writing to the in-memory link is no system call. heldAckTime is far
// below any retransmission timeout a peer uses in practice (rxe's
// shortest is one jiffy, 4 ms at HZ=250; perftest and ibv_rc_pingpong ask
// for 67 ms).
const (
	heldAckTime   = 50 * time.Microsecond
	maxMergedAcks = 4
)

// ackHold is the state of the response stream's hold; r.mu guards it.
type ackHold struct {
	// reading is set while the reading goroutine processes a batch of
	// a NonBlockingWriter link (the only case that holds).
	reading bool
	queued  bool // the batch read queued a response
	held    bool
	merged  int // ACKs merged into the held ones since the hold began
	// last describes the last response queued: a plain ACK to QP
	// lastQPN at lastDst (lastAck), which a later one may replace.
	lastAck bool
	lastQPN uint32
	lastDst netip.Addr
	timer   clock.Timer
}

// endBatch ends the inline reader's batch in unlock: a batch that queued
// responses and notified a handler holds them, one that queued responses
// without notifying releases them and any held before. r.mu held.
func (r *device) endBatch(notified bool) {
	h := &r.hold
	if !h.reading {
		return
	}
	h.reading = false
	if !h.queued {
		return
	}
	h.queued = false
	if !notified || r.tp.noHold || !r.cfg.CoalesceACKs {
		h.held = false
		return
	}
	if !h.held {
		h.held, h.merged = true, 0
		if h.timer == nil {
			h.timer = r.clock().AfterFunc(heldAckTime, r.releaseHeld)
		}
	}
}

// releaseHeld writes the held responses (the hold's timer). A timer armed
// by an earlier hold may release a later one early, which only writes
// its ACK sooner.
func (r *device) releaseHeld() {
	r.lock()
	r.hold.timer = nil
	r.hold.held = false
	r.unlock()
}

// queueResponse queues response frame b (built from f) on the response
// stream. With Config.CoalesceACKs, a plain ACK replaces the plain ACK to
// the same QP queued just before it, if that one is held or was queued by
// the same batch read (both unwritten), in which case it reports true:
// the frame replaced was counted as sent, and this one goes in its place.
// r.mu held.
func (r *device) queueResponse(f *wire.Frame, b []byte) bool {
	h := &r.hold
	h.queued = h.reading
	q := r.txq[streamRsp]
	if !r.cfg.CoalesceACKs {
		r.txq[streamRsp] = append(q, b)
		return false
	}
	ack := f.BTH.Opcode == wire.RCAcknowledge && f.AETH.Syndrome == synACK
	if h.held && (!ack || !h.reading) {
		h.held = false
	}
	if (h.held || h.reading) && ack && h.lastAck && h.lastQPN == f.BTH.DestQP && h.lastDst == f.Dst && len(q) > 0 {
		r.tp.put([][]byte{q[len(q)-1]})
		q[len(q)-1] = b
		if h.held {
			if h.merged++; h.merged >= maxMergedAcks {
				h.held = false
			}
		}
		return true
	}
	h.lastAck, h.lastQPN, h.lastDst = ack, f.BTH.DestQP, f.Dst
	r.txq[streamRsp] = append(q, b)
	return false
}
