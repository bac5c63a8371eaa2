package rxe

import (
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// readBurst bounds the READ response packets one QP's responder sends in
// a round before the other QPs' go: rxe's responder task sends one
// response packet per read_reply pass and the task is rescheduled after a
// bounded number of passes, so the responses of several QPs' large READs
// are interleaved on the wire and each requester sees steady progress
// (its completer re-arms the retransmit timer on every response). Sending
// a QP's whole reply under the device lock instead kept another QP's
// first response behind tens of MiB, long enough for that QP's
// retransmit timer to fire (spurious retries, and a slow run never
// finished).
const readBurst = 64

// readJob is a READ reply in progress: packets i..n-1 of length bytes at
// va from psn on.
type readJob struct {
	rkey      uint32
	psn       uint32
	va        uint64
	length    uint64
	fromStart bool   // psn is the request's first PSN (FIRST/ONLY)
	n, i      uint64 // packets in all, next to send
}

// readState is a QP's share of the READ scheduling (part of xport).
type readState struct {
	readQueued bool // q is on r.readQPs
	inReads    bool // runReads is working on q: a new reply only queues
}

// deferRequest queues a request frame of an RC QP behind its READ replies
// in progress (the responder takes requests in order); it reports whether
// it did. r.mu held.
func (r *device) deferRequest(q *qp, frame []byte) bool {
	if q.typ != qpstate.TypeRC || (len(q.jobs) == 0 && len(q.backlog) == 0) {
		return false
	}
	q.backlog = append(q.backlog, append([]byte(nil), frame...))
	r.schedReads(q)
	return true
}

// runReads sends up to budget packets of q's READ replies, then takes the
// requests that waited behind them while no reply is in progress. It
// returns false if a key check failed (NAK sent, QP in ERR). r.mu held.
func (r *device) runReads(q *qp, budget int) bool {
	was := q.inReads
	q.inReads = true
	defer func() { q.inReads = was }()
	for budget > 0 {
		if !q.valid || q.state < qpstate.StateRTR || q.state == qpstate.StateErr {
			q.jobs, q.backlog = nil, nil
			return true
		}
		if len(q.jobs) == 0 {
			if len(q.backlog) == 0 {
				return true
			}
			f := q.backlog[0]
			q.backlog[0] = nil
			q.backlog = q.backlog[1:]
			var p wire.Packet
			if p.Decode(f) == nil && r.qpAccepts(q, &p) {
				r.responder(q, &p)
			}
			budget--
			continue
		}
		j := &q.jobs[0]
		for ; j.i < j.n && budget > 0; budget-- {
			if !r.readPacket(q, j, j.i) {
				q.jobs = nil
				return false
			}
			j.i++
		}
		if j.i == j.n {
			q.jobs = q.jobs[:copy(q.jobs, q.jobs[1:])]
		}
	}
	return true
}

// schedReads puts q on the device's list of QPs with READ replies or
// waiting requests, if it has any. r.mu held.
func (r *device) schedReads(q *qp) {
	if q.readQueued || (len(q.jobs) == 0 && len(q.backlog) == 0) {
		return
	}
	q.readQueued = true
	r.readQPs = append(r.readQPs, q)
	r.readsPending.Store(int32(len(r.readQPs)))
}

// pumpReads runs one round: every QP with READ replies sends up to
// readBurst packets, in turn; the device lock is released (and the
// frames written) at the end of the round.
func (r *device) pumpReads() {
	r.lock()
	qs := r.readQPs
	r.readQPs = nil
	for _, q := range qs {
		q.readQueued = false
	}
	for _, q := range qs {
		r.runReads(q, readBurst)
		r.schedReads(q)
	}
	r.readsPending.Store(int32(len(r.readQPs)))
	r.unlock()
}
