// Package check is softroce's RDMA sanitizer (softroce run --check): the
// daemon sees every command, every WQE and every completion of a program,
// and a Program, fed by hooks in package uverbs where it decodes them,
// finds the misuses of verbs that a hardware device tolerates silently
// until the day they lose data or hang: objects leaked at exit, QPs
// destroyed and MRs deregistered with work requests outstanding, CQs that
// overflow or can, send buffers changed while posted, send queues never
// reclaimed, error completions never looked at, posts to a QP in error,
// receive queues that ran dry.
//
// A Set holds the findings of every program of a daemon. Each finding has
// a stable Name, an explanation with the fix (Checks), and can be
// suppressed by name. A finding counts how often it occurred on one
// object and keeps its first occurrence.
package check

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Name is a finding's stable name: what --check-ignore takes and what the
// JSON report and docs/testing-your-program.md call it.
type Name string

// The findings.
const (
	// Leak: an object the program never destroyed before it closed the
	// device (ib_uverbs_close tore it down).
	Leak Name = "leak"
	// QPDestroyedBusy: a QP destroyed while signalled send WRs had not
	// completed, without moving it to ERR and draining it first.
	QPDestroyedBusy Name = "qp-destroyed-busy"
	// MRDeregisteredBusy: an MR deregistered while signalled send WRs
	// naming its lkey had not completed.
	MRDeregisteredBusy Name = "mr-deregistered-busy"
	// CQOverflow: the device had a completion for a CQ whose ring was
	// full (IB_EVENT_CQ_ERR).
	CQOverflow Name = "cq-overflow"
	// CQMayOverflow: the completions a CQ may have to hold at once
	// (unpolled, and due for the outstanding WRs of the QPs feeding it)
	// exceed its depth.
	CQMayOverflow Name = "cq-can-overflow"
	// SendBufferChanged: the bytes of a send WR's source changed while
	// the WR was outstanding, as a retransmission read them again.
	SendBufferChanged Name = "send-buffer-changed"
	// SQNeverReclaimed: a whole send queue depth of unsignalled WRs in a
	// row.
	SQNeverReclaimed Name = "sq-never-reclaimed"
	// ErrorIgnored: an error completion (other than a flush) the program
	// never polled before it destroyed the CQ or closed the device.
	ErrorIgnored Name = "error-completion-ignored"
	// PostToErrorQP: send WRs posted to a QP that an error, not the
	// program, had moved to ERR.
	PostToErrorQP Name = "post-to-error-qp"
	// ReceiveStarved: a QP's responder sent RNR NAKs, its receive queue
	// (or SRQ) empty when a SEND arrived.
	ReceiveStarved Name = "receive-starvation"
)

// Info describes one finding.
type Info struct {
	Name Name
	// Rule is the kernel or IBA rule the finding rests on.
	Rule string
	// Explain is what the finding means and how to fix it.
	Explain string
}

// Checks are the findings softroce knows, in the order of
// docs/testing-your-program.md.
var Checks = []Info{
	{Leak, "ib_uverbs_close (uverbs_destroy_ufile_hw)",
		"The program closed the device (or exited) with this object still created: the kernel tore it down for it. " +
			"A program that relies on that leaks on a long-lived context (a server that opens a context once and creates objects per connection " +
			"runs out of QPs, CQs or pinned memory). Fix: destroy every object in reverse order of creation " +
			"(ibv_destroy_qp, ibv_destroy_srq, ibv_destroy_cq, ibv_destroy_ah, ibv_dealloc_mw, ibv_dereg_mr, ibv_dealloc_pd) before ibv_close_device."},
	{QPDestroyedBusy, "ib_drain_qp: a QP is drained (moved to ERR, its flushes polled) before ib_destroy_qp",
		"The QP was destroyed while signalled send WRs had not completed: their completions are lost, and the peer may have received all, part or none of them. " +
			"Fix: wait for the completions of everything posted, or move the QP to ERR (ibv_modify_qp IBV_QPS_ERR), poll its flush completions (IBV_WC_WR_FLUSH_ERR) until the last WR's, then destroy it."},
	{MRDeregisteredBusy, "ib_dereg_mr frees the MR at once; rxe's copy_data then fails the WR (IBV_WC_LOC_PROT_ERR)",
		"The MR was deregistered while a signalled send WR naming its lkey had not completed. On hardware the device may still read that memory (or fail the WR with a protection error); on softroce the WR fails or reads freed memory. " +
			"Fix: poll the completions of every WR using the MR before ibv_dereg_mr."},
	{CQOverflow, "rxe_cq_post: a completion for a full CQ raises IB_EVENT_CQ_ERR and is lost",
		"A completion was due on a CQ whose every entry the program had not polled: the CQ overran, the device raised IBV_EVENT_CQ_ERR and the completion was lost. " +
			"Fix: size the CQ for every signalled send WR and every receive WR outstanding on all QPs and SRQs feeding it (ibv_create_cq's cqe, or ibv_resize_cq), and poll it often enough."},
	{CQMayOverflow, "rxe_cq_post: a completion for a full CQ raises IB_EVENT_CQ_ERR and is lost; ibv_create_cq's cqe is the completions the CQ holds",
		"When a QP posted, the completions its CQ may have to hold at once exceeded the CQ's depth: those not yet polled, one per signalled send WR outstanding and one per receive WR posted, on every QP (and SRQ) feeding the CQ. " +
			"Nothing overflowed yet, but if the WRs complete faster than the program polls, the CQ overruns (IBV_EVENT_CQ_ERR) and completions are lost. " +
			"Fix: create the CQ with at least as many entries as the signalled send WRs and the receive WRs its QPs may have outstanding together (ibv_create_cq's cqe, or ibv_resize_cq), or post fewer."},
	{SendBufferChanged, "ibv_post_send: the buffers of a WR that is not inline belong to the device until the WR completes",
		"The program changed the bytes of a send WR's source (a SEND, RDMA WRITE or atomic that is not IBV_SEND_INLINE) before the WR completed: a retransmission of one of its packets read other bytes than the first transmission. " +
			"On hardware the peer receives whichever bytes the DMA saw, the old, the new or a mix, and a retransmission may change data the peer already placed. " +
			"Fix: leave a WR's buffers alone until its completion is polled (signal it, or a later WR of the same send queue); reuse a buffer only after that, or send small data with IBV_SEND_INLINE."},
	{SQNeverReclaimed, "mlx5's post_send (mlx5_wq_overflow): send queue slots come back only through polled completions",
		"A whole send queue depth of unsignalled WRs was posted in a row. rxe frees a slot when the WR completes, signalled or not, so the program works on softroce and rxe; " +
			"common HCAs (mlx5, mlx4, efa, hns) free slots only when a signalled completion is polled, and there the next ibv_post_send fails with ENOMEM. " +
			"Fix: set IBV_SEND_SIGNALED on at least one WR in every send queue depth (e.g. every depth/2-th) and poll its completion."},
	{ErrorIgnored, "rxe_comp: an error completion moves the QP to ERR",
		"An error completion (not a flush) stayed in the CQ, never polled, until the CQ was destroyed or the device closed: the program never learned that a WR failed (a remote access error, retries exceeded, ...) and that its QP went to ERR. " +
			"Fix: poll the CQ to the end and check every completion's status (ibv_wc_status_str says what it is)."},
	{PostToErrorQP, "rxe's requester: WRs posted to a QP in ERR complete with IBV_WC_WR_FLUSH_ERR",
		"Send WRs were posted to a QP that an error, not the program, had moved to ERR: each completes in flush error and nothing is sent. The program missed the error completion or the IBV_EVENT_QP_FATAL that came before. " +
			"Fix: check every completion's status and stop posting to a QP whose completion failed; recover by ERR -> RESET -> INIT -> RTR -> RTS or a new QP."},
	{ReceiveStarved, "rxe_resp.c (RESPST_ERR_RNR): a SEND finding no receive WQE is answered with an RNR NAK; the requester waits min_rnr_timer and retries rnr_retry times",
		"A SEND arrived when the receive queue (or the SRQ) held no receive WR, and the QP answered with an RNR NAK: the sender stalled for min_rnr_timer and sent again, " +
			"and after rnr_retry NAKs in a row (unless it is 7, infinite) its WR fails with IBV_WC_RNR_RETRY_EXC_ERR and its QP goes to ERR. Each NAK costs the sender from 10 us to 655 ms. " +
			"Fix: post receive WRs before the peer can send (before moving the QP to RTR, or before telling the peer it may send), repost each one as soon as its completion is polled, " +
			"and keep at least as many posted as the peer may have in flight; for an SRQ, arm its limit event (ibv_modify_srq IBV_SRQ_LIMIT) and refill it on IBV_EVENT_SRQ_LIMIT_REACHED."},
}

// Lookup returns the Info of name.
func Lookup(name Name) (Info, bool) {
	for _, c := range Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Info{}, false
}

// Finding is one misuse on one object of one program, with how often it
// occurred and its first occurrence.
type Finding struct {
	Name    Name   `json:"name"`
	PID     int    `json:"pid"`
	Program string `json:"program"`
	// Object names the object: "QP 0x11", "CQ handle 2", "MR handle 3
	// lkey 0x1234".
	Object string `json:"object"`
	// WRID is the work request of the first occurrence, if one is named.
	WRID  *uint64   `json:"wr_id,omitempty"`
	Count int       `json:"count"`
	First time.Time `json:"first"`
	// Detail says what happened, at the first occurrence.
	Detail string `json:"detail"`

	ancestors []int
}

type key struct {
	pid    int
	name   Name
	object string
}

// Set is the findings of a daemon's programs. It is safe for concurrent
// use.
type Set struct {
	ignore map[Name]bool
	now    func() time.Time

	mu       sync.Mutex
	found    []*Finding
	index    map[key]*Finding
	programs map[int]*Program
	onEnd    func(pid int, found []Finding)
}

// Config configures a Set.
type Config struct {
	// Ignore are the findings not recorded (--check-ignore).
	Ignore []Name
	// Now is the clock of the first occurrences; nil means time.Now.
	Now func() time.Time
	// OnEnd, if set, is called when a program's last file closes, with
	// its findings (none: not called).
	OnEnd func(pid int, found []Finding)
}

// NewSet returns an empty Set. An unknown name in cfg.Ignore is an error.
func NewSet(cfg Config) (*Set, error) {
	s := &Set{ignore: map[Name]bool{}, now: cfg.Now, index: map[key]*Finding{}, programs: map[int]*Program{}, onEnd: cfg.OnEnd}
	if s.now == nil {
		s.now = time.Now
	}
	for _, n := range cfg.Ignore {
		if _, ok := Lookup(n); !ok {
			return nil, fmt.Errorf("check: no finding is named %q (softroce run -h lists them)", n)
		}
		s.ignore[n] = true
	}
	return s, nil
}

// Program returns the checker of the program pid (its command name comm,
// its ancestors' pids nearest first) for one more of its open files;
// Release ends that file's use of it.
func (s *Set) Program(pid int, comm string, ancestors []int) *Program {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.programs[pid]
	if p == nil {
		p = &Program{set: s, pid: pid, comm: comm, ancestors: ancestors, qps: map[uint32]*qpTrack{}}
		s.programs[pid] = p
	}
	p.files++
	return p
}

// add records one occurrence.
func (s *Set) add(p *Program, name Name, object string, wrID *uint64, format string, args ...any) {
	s.record(p, name, object, wrID, false, format, args...)
}

// record records one occurrence; update: its detail replaces the
// finding's (a detail that sums up every occurrence so far).
func (s *Set) record(p *Program, name Name, object string, wrID *uint64, update bool, format string, args ...any) {
	if s.ignore[name] {
		return
	}
	k := key{p.pid, name, object}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.index[k]; f != nil {
		f.Count++
		if update {
			f.Detail = fmt.Sprintf(format, args...)
		}
		return
	}
	f := &Finding{Name: name, PID: p.pid, Program: p.comm, Object: object, Count: 1, First: s.now(),
		Detail: fmt.Sprintf(format, args...), ancestors: p.ancestors}
	if wrID != nil {
		id := *wrID
		f.WRID = &id
	}
	s.index[k] = f
	s.found = append(s.found, f)
}

// All returns every finding so far, in order of first occurrence.
func (s *Set) All() []Finding {
	return s.select_(func(*Finding) bool { return true })
}

// Of returns the findings of the program pid and of its descendants.
func (s *Set) Of(pid int) []Finding {
	return s.select_(func(f *Finding) bool { return f.PID == pid || slices.Contains(f.ancestors, pid) })
}

func (s *Set) select_(keep func(*Finding) bool) []Finding {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Finding
	for _, f := range s.found {
		if keep(f) {
			out = append(out, *f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].First.Before(out[j].First) })
	return out
}

// Active reports whether a file of the program pid or of a descendant is
// open.
func (s *Set) Active(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.programs {
		if p.pid == pid || slices.Contains(p.ancestors, pid) {
			return true
		}
	}
	return false
}
