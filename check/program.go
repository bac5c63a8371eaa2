package check

import (
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/softroce/softroce/emu"
)

// Program checks one program: package uverbs calls its methods where it
// sees the program's commands, WQEs and completions. A nil *Program
// checks nothing, so that the hooks cost one nil test when the check is
// off. Its methods are safe for concurrent use; those called from the
// device's completion path take only the QP's own lock.
type Program struct {
	set       *Set
	pid       int
	comm      string
	ancestors []int

	mu      sync.Mutex // qps, files, starved
	files   int
	qps     map[uint32]*qpTrack
	starved map[string]*starve // by object
}

// starve is when an object's receive queue was first and last found
// empty by an arriving SEND.
type starve struct {
	first, last time.Time
	n           int
}

// qpTrack is what the checker knows of one QP's send queue.
type qpTrack struct {
	mu       sync.Mutex
	sigAll   bool       // IBV_SIGNAL_ALL_WR
	depth    int        // max_send_wr
	wrs      []postedWR // posted to the device, completion not seen, oldest first
	nsig     int        // the signalled ones of wrs
	unsig    int        // unsignalled WRs posted in a row
	toErr    bool       // the program asked for ERR
	errSeen  bool       // an error completion reached the CQ
	errProd  uint32     // the send ring's producer index then
	reported bool       // SQNeverReclaimed said once
	sums     *[sumSlots]sentSum
}

// sentSum is the checksum of the payload of a packet a QP sent, for
// SendBufferChanged.
type sentSum struct {
	psn  uint32 // 24 bits; 1<<31: used
	wrID uint64
	sum  uint32
}

// sumSlots is how many packets' checksums a QP keeps, by PSN: more than
// the packets a QP may have in flight unacknowledged (rxe's requester
// stops at 2^23 PSNs behind, but in practice a window of some hundreds).
const sumSlots = 4096

const sumUsed = 1 << 31

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// postedWR is one send WR the device took.
type postedWR struct {
	id       uint64
	signaled bool
	nkeys    uint8
	lkeys    [maxKeys]uint32
}

// maxKeys is how many SGEs' lkeys a posted WR keeps for
// MRDeregisteredBusy.
const maxKeys = 4

// Release ends one file's use of p (Set.Program): at the program's last,
// the Set's OnEnd sees its findings.
func (p *Program) Release() {
	if p == nil {
		return
	}
	s := p.set
	s.mu.Lock()
	p.files--
	last := p.files == 0
	if last && s.programs[p.pid] == p {
		delete(s.programs, p.pid)
	}
	s.mu.Unlock()
	if last && s.onEnd != nil {
		var mine []Finding
		for _, f := range s.Of(p.pid) {
			if f.PID == p.pid {
				mine = append(mine, f)
			}
		}
		if len(mine) > 0 {
			s.onEnd(p.pid, mine)
		}
	}
}

func (p *Program) qp(qpn uint32) *qpTrack {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.qps[qpn]
}

// QPName is how a finding names QP qpn.
func QPName(qpn uint32) string { return fmt.Sprintf("QP 0x%x", qpn) }

// QPCreated starts tracking QP qpn: its send queue depth, and whether
// every WR is signalled (sq_sig_all).
func (p *Program) QPCreated(qpn uint32, depth int, sigAll bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.qps[qpn] = &qpTrack{depth: depth, sigAll: sigAll}
}

// QPModified records a modify of QP qpn the program asked for; toErr: to
// ERR.
func (p *Program) QPModified(qpn uint32, toErr bool) {
	if p == nil {
		return
	}
	if t := p.qp(qpn); t != nil {
		t.mu.Lock()
		t.toErr = toErr
		if !toErr {
			t.errSeen = false // a recovery: errors from now on count
		}
		t.mu.Unlock()
	}
}

// Posted records a send WR the device takes from QP qpn's send queue,
// before the device has it (Unposted takes it back if it did not).
func (p *Program) Posted(qpn uint32, wr *emu.SendWR) {
	if p == nil {
		return
	}
	t := p.qp(qpn)
	if t == nil {
		return
	}
	signaled := t.sigAll || wr.SendFlags&emu.SendSignaled != 0
	w := postedWR{id: wr.WRID, signaled: signaled}
	if wr.SendFlags&emu.SendInline == 0 {
		for _, s := range wr.SGList {
			if int(w.nkeys) == maxKeys {
				break
			}
			w.lkeys[w.nkeys] = s.LKey
			w.nkeys++
		}
	}
	t.mu.Lock()
	if signaled {
		t.unsig = 0
	} else {
		t.unsig++
	}
	never := t.depth > 0 && t.unsig >= t.depth && !t.reported
	if never {
		t.reported = true
	}
	// Unsignalled WRs leave the list when a later one completes; a
	// program that never signals keeps the list at a bound.
	if len(t.wrs) >= 2*t.depth+64 {
		t.drop(0, len(t.wrs)/2)
	}
	t.wrs = append(t.wrs, w)
	if signaled {
		t.nsig++
	}
	t.mu.Unlock()
	if never {
		id := wr.WRID
		p.set.add(p, SQNeverReclaimed, QPName(qpn), &id, "%d unsignalled send WRs in a row on a send queue of %d", t.depth, t.depth)
	}
}

// drop removes wrs[i:j]; t.mu held.
func (t *qpTrack) drop(i, j int) {
	for _, w := range t.wrs[i:j] {
		if w.signaled {
			t.nsig--
		}
	}
	t.wrs = append(t.wrs[:i], t.wrs[j:]...)
}

// Signalled returns how many signalled send WRs of QP qpn the device took
// whose completion it has not written (0 when the check is off).
func (p *Program) Signalled(qpn uint32) int {
	if p == nil {
		return 0
	}
	t := p.qp(qpn)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nsig
}

// CQMayOverflow records that the completions CQ handle of depth entries
// may have to hold at once exceed its depth: unpolled ones, signalled
// send WRs and receive WRs outstanding on the QPs feeding it, as QP
// qpn posted.
func (p *Program) CQMayOverflow(handle uint32, depth, unpolled, sends, recvs int, qpn uint32) {
	if p == nil {
		return
	}
	p.set.add(p, CQMayOverflow, fmt.Sprintf("CQ handle %d", handle), nil,
		"%d completions may be due at once on a CQ of %d entries: %d unpolled, %d signalled send WRs and %d receive WRs outstanding (as %s posted)",
		unpolled+sends+recvs, depth, unpolled, sends, recvs, QPName(qpn))
}

// Unposted takes back the last n WRs Posted to QP qpn: the device did
// not take them (they wait on the ring, or are refused).
func (p *Program) Unposted(qpn uint32, n int) {
	if p == nil {
		return
	}
	t := p.qp(qpn)
	if t == nil {
		return
	}
	t.mu.Lock()
	t.drop(max(0, len(t.wrs)-n), len(t.wrs))
	t.mu.Unlock()
}

// Completed records a send completion of QP qpn (its WR's id and
// status) that the device wrote to the CQ ring: the WR and every one
// posted before it are done. A send queue completes in order, and only a
// signalled WR completes successfully, so a success is the oldest
// signalled WR of that id (programs give many WRs one id); an error or a
// flush, which unsignalled WRs get too, is the oldest WR of that id.
func (p *Program) Completed(qpn uint32, wrID uint64, status emu.WCStatus) {
	if p == nil {
		return
	}
	t := p.qp(qpn)
	if t == nil {
		return
	}
	t.mu.Lock()
	for i, w := range t.wrs {
		if w.id == wrID && (w.signaled || status != emu.WCSuccess) {
			t.drop(0, i+1)
			break
		}
	}
	t.mu.Unlock()
}

// ErrorCompleted records an error completion (not a flush) of QP qpn
// written to the CQ ring while the program had produced sent WQEs up to
// the send ring's producer index prod.
func (p *Program) ErrorCompleted(qpn uint32, prod uint32) {
	if p == nil {
		return
	}
	if t := p.qp(qpn); t != nil {
		t.mu.Lock()
		if !t.errSeen {
			t.errSeen, t.errProd = true, prod
		}
		t.mu.Unlock()
	}
}

// PostedInError records send WRs (wrID the first) on the send ring of
// QP qpn in ERR, its producer index now prod: a finding when the program
// produced them after an error completion reached its CQ, unless it
// moved the QP to ERR itself (a drain). WRs it posted before the error
// (a stalled ring) are not.
func (p *Program) PostedInError(qpn uint32, wrID uint64, prod uint32) {
	if p == nil {
		return
	}
	t := p.qp(qpn)
	if t == nil {
		return
	}
	t.mu.Lock()
	found := t.errSeen && !t.toErr && prod != t.errProd
	if found {
		t.errProd = prod // each later post again
	}
	t.mu.Unlock()
	if found {
		p.set.add(p, PostToErrorQP, QPName(qpn), &wrID, "send WR posted to the QP in IBV_QPS_ERR after an error completion moved it there")
	}
}

// QPDestroyed records the destroy of QP qpn, onRing the signalled WQEs
// (first the first one's id) the device never took from its send ring.
func (p *Program) QPDestroyed(qpn uint32, onRing int, first uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	t := p.qps[qpn]
	delete(p.qps, qpn)
	p.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	n := onRing
	var id uint64
	found := onRing > 0
	if found {
		id = first
	}
	for _, w := range t.wrs {
		if w.signaled {
			if !found {
				id, found = w.id, true
			}
			n++
		}
	}
	t.mu.Unlock()
	if n > 0 {
		p.set.add(p, QPDestroyedBusy, QPName(qpn), &id, "destroyed with %d signalled send WRs not completed", n)
	}
}

// MRDeregistered records the deregistration of MR handle with lkey: a
// finding if a signalled send WR not completed names it.
func (p *Program) MRDeregistered(handle, lkey uint32) {
	if p == nil {
		return
	}
	p.mu.Lock()
	qps := make(map[uint32]*qpTrack, len(p.qps))
	for n, t := range p.qps {
		qps[n] = t
	}
	p.mu.Unlock()
	for qpn, t := range qps {
		t.mu.Lock()
		var id uint64
		n := 0
		for _, w := range t.wrs {
			if !w.signaled {
				continue
			}
			for _, k := range w.lkeys[:w.nkeys] {
				if k == lkey {
					if n == 0 {
						id = w.id
					}
					n++
					break
				}
			}
		}
		t.mu.Unlock()
		if n > 0 {
			p.set.add(p, MRDeregisteredBusy, fmt.Sprintf("MR handle %d lkey 0x%x", handle, lkey), &id,
				"deregistered with %d signalled send WRs of %s naming it not completed", n, QPName(qpn))
		}
	}
}

// CQOverflowed records a completion (of QP qpn, WR wrID) lost because the
// ring of CQ handle was full.
func (p *Program) CQOverflowed(handle uint32, depth int, qpn uint32, wrID uint64) {
	if p == nil {
		return
	}
	p.set.add(p, CQOverflow, fmt.Sprintf("CQ handle %d", handle), &wrID,
		"a completion of %s found all %d entries of the CQ unpolled", QPName(qpn), depth)
}

// Unpolled records a completion left in CQ handle's ring, never polled,
// when the CQ went away.
func (p *Program) Unpolled(handle uint32, qpn uint32, wrID uint64, status emu.WCStatus) {
	if p == nil || status == emu.WCSuccess || status == emu.WCWRFlushErr {
		return
	}
	p.set.add(p, ErrorIgnored, QPName(qpn), &wrID, "completion with status %v left unpolled in CQ handle %d", status, handle)
}

// Leaked records an object the program never destroyed: kind (PD, MR,
// ...), its handle and what else names it (an MR's lkey, a QP's number).
func (p *Program) Leaked(kind string, handle uint32, what string) {
	if p == nil {
		return
	}
	obj := fmt.Sprintf("%s handle %d", kind, handle)
	if what != "" {
		obj += " " + what
	}
	p.set.add(p, Leak, obj, nil, "%s not destroyed before the device was closed", kind)
}

// RNRNAKSent records an RNR NAK QP qpn's responder sent: no receive WR
// for an arriving SEND. srq is how a finding names the QP's SRQ ("" for
// its own RQ), armed whether the program ever armed the SRQ's limit
// event.
func (p *Program) RNRNAKSent(qpn uint32, srq string, armed bool) {
	if p == nil {
		return
	}
	obj, what := QPName(qpn), "receive queue"
	if srq != "" {
		obj, what = srq, "SRQ"
	}
	now := p.set.now()
	p.mu.Lock()
	if p.starved == nil {
		p.starved = map[string]*starve{}
	}
	st := p.starved[obj]
	if st == nil {
		st = &starve{first: now}
		p.starved[obj] = st
	}
	st.last = now
	st.n++
	n, span := st.n, st.last.Sub(st.first)
	p.mu.Unlock()
	detail := fmt.Sprintf("%d RNR NAKs sent by %s over %v: the %s was empty when a SEND arrived", n, QPName(qpn), span.Round(time.Microsecond), what)
	if srq != "" && !armed {
		detail += "; its limit event was never armed (IBV_SRQ_LIMIT)"
	}
	p.set.record(p, ReceiveStarved, obj, nil, true, "%s", detail)
}

// PayloadSent records the payload of packet psn of QP qpn's send WR
// wrID, read from its source: a finding if the QP sent that packet of
// that WR before with other bytes (a retransmission reading a buffer the
// program changed).
func (p *Program) PayloadSent(qpn, psn uint32, wrID uint64, payload []byte) {
	if p == nil {
		return
	}
	t := p.qp(qpn)
	if t == nil {
		return
	}
	sum := crc32.Checksum(payload, castagnoli)
	t.mu.Lock()
	if t.sums == nil {
		t.sums = new([sumSlots]sentSum)
	}
	e := &t.sums[psn%sumSlots]
	changed := e.psn == psn|sumUsed && e.wrID == wrID && e.sum != sum
	*e = sentSum{psn: psn | sumUsed, wrID: wrID, sum: sum}
	t.mu.Unlock()
	if changed {
		p.set.add(p, SendBufferChanged, QPName(qpn), &wrID,
			"a retransmission of PSN %#x read other bytes (%d of them) than its first transmission", psn, len(payload))
	}
}
