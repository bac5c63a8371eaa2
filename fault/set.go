package fault

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// Config configures NewSet.
type Config struct {
	// Seed seeds the draws of the prob= rules: the same seed, rules and
	// frames give the same decisions, frame for frame.
	Seed uint64
	// Clock times the at= of port rules; nil means clock.Real.
	Clock clock.Clock
	// Logf, if set, is told of every action a rule takes.
	Logf func(format string, args ...any)
	// Record, if set, is told of every action a rule takes (a coverage
	// profile: coverage.Recorder.Fault). It must not block.
	Record func(rule, action string)
	// Port applies a port rule (down, up, gid) to the device; nil makes
	// port rules an error (EOPNOTSUPP) when added.
	Port func(r *Rule) error
	// QPErr moves the QP numbered qpn to ERR (qp:err); nil makes qp:err
	// an error (EOPNOTSUPP) when added.
	QPErr func(qpn uint32) error
	// Responder tells what the QP numbered qpn would put in an ACK
	// (qp:rnr answers for it); nil, or false, lets the SEND through. It
	// is called from the link's write path: it must not take a lock the
	// device holds while writing.
	Responder func(qpn uint32) (Responder, bool)
	// CQsOf returns the CQs of the QP numbered qpn (its send and receive
	// CQ), as the values CQ will be asked about; nil makes cq rules an
	// error (EOPNOTSUPP) when added.
	CQsOf func(qpn uint32) ([]any, error)
}

// Responder is what a responder QP puts in an acknowledgement: the
// requester's QP number, its RNR timer code and its MSN.
type Responder struct {
	DestQPN     uint32
	MinRNRTimer uint8
	MSN         uint32
}

// Set is the rules in force on one device. Its Frame method is a
// link.FaultConfig.Schedule; Verb is the daemon's command intercept. It
// is safe for concurrent use.
type Set struct {
	cfg Config
	clk clock.Clock

	// nFrame, nRewrite and nCQ count the rules Frame, Rewrite and CQ
	// consult, so that with none they return at once, without the lock.
	nFrame, nRewrite, nCQ atomic.Int32

	mu     sync.Mutex
	rng    *rand.Rand
	next   int
	rules  map[int]*entry
	order  []*entry // rules by id
	closed bool
}

// counter returns the counter of the hook that consults r, or nil.
func (s *Set) counter(r *Rule) *atomic.Int32 {
	switch {
	case r.Kind == KindWire || r.Kind == KindQP && r.Action == "silent":
		return &s.nFrame
	case r.Kind == KindQP && (r.Action == "rnr" || r.Action == "invalidate"):
		return &s.nRewrite
	case r.Kind == KindCQ || r.Kind == KindQP && r.Action == "err" && r.After != 0:
		return &s.nCQ
	}
	return nil
}

type entry struct {
	id      int
	r       *Rule
	text    string
	seen    uint64 // matching frames (wire) or commands (verbs)
	applied uint64
	timer   clock.Timer
	// nakking: qp:rnr answered the first packet of a SEND; its middle
	// and last packets are dropped, as a responder in the RNR state does.
	nakking bool
	cqs     []any // the CQs a cq rule acts on
	fired   bool  // a qp:err after= rule has started to act
}

// NewSet returns an empty set.
func NewSet(cfg Config) *Set {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	return &Set{cfg: cfg, clk: clk, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6661756c74)), next: 1, rules: map[int]*entry{}}
}

// Add puts r in force and returns its id (for Del). A port rule acts now,
// or At later.
func (s *Set) Add(r *Rule) (int, error) {
	if r.Kind == KindPort && s.cfg.Port == nil {
		return 0, fmt.Errorf("fault: %s: this device has no port control: %w", r, unix.EOPNOTSUPP)
	}
	if r.Kind == KindQP && r.Action == "err" && s.cfg.QPErr == nil {
		return 0, fmt.Errorf("fault: %s: this device cannot reach its QPs: %w", r, unix.EOPNOTSUPP)
	}
	var cqs []any
	if r.Kind == KindCQ {
		if s.cfg.CQsOf == nil {
			return 0, fmt.Errorf("fault: %s: this device cannot reach its CQs: %w", r, unix.EOPNOTSUPP)
		}
		var err error
		if cqs, err = s.cfg.CQsOf(r.QP); err != nil {
			return 0, fmt.Errorf("fault: %s: %w", r, err)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, fmt.Errorf("fault: the set is closed: %w", unix.ESHUTDOWN)
	}
	e := &entry{id: s.next, r: r, text: r.String(), cqs: cqs}
	s.next++
	s.rules[e.id] = e
	s.order = append(s.order, e)
	if c := s.counter(r); c != nil {
		c.Add(1)
	}
	s.mu.Unlock()
	s.logf("fault %d added: %s", e.id, e.text)
	if r.Kind == KindPort || r.Kind == KindQP && r.Action == "err" && r.After == 0 {
		if r.At == 0 {
			return e.id, s.act(e)
		}
		s.mu.Lock()
		e.timer = s.clk.AfterFunc(r.At, func() { s.act(e) })
		s.mu.Unlock()
	}
	return e.id, nil
}

// act applies a port or qp:err rule once.
func (s *Set) act(e *entry) error {
	s.mu.Lock()
	if s.closed || s.rules[e.id] != e {
		s.mu.Unlock()
		return nil
	}
	e.applied++
	s.mu.Unlock()
	var err error
	if e.r.Kind == KindQP {
		err = s.cfg.QPErr(e.r.QP)
	} else {
		err = s.cfg.Port(e.r)
	}
	if err != nil {
		s.logf("fault %d %s: %v", e.id, e.text, err)
		return fmt.Errorf("fault: %s: %w", e.text, err)
	}
	if e.r.Kind == KindQP {
		s.did(e, "qp to ERR", "")
		return nil
	}
	action := "port " + e.r.Action
	if e.r.Action == "gid" {
		action += " " + e.r.IP.String()
	}
	s.did(e, action, "")
	return nil
}

func (s *Set) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// did logs and records one action of e; detail (if any) goes to the log
// only, so that the coverage cells stay few.
// The log tells the first few actions of each rule; the rest are counted
// (List, the coverage profile).
func (s *Set) did(e *entry, action, detail string) {
	s.mu.Lock()
	n := e.applied
	s.mu.Unlock()
	switch {
	case n <= maxLogged:
		s.logf("fault %d %s: %s%s", e.id, e.text, action, detail)
	case n == maxLogged+1:
		s.logf("fault %d %s: %s%s (further actions are counted, not logged: softroce fault list)", e.id, e.text, action, detail)
	}
	if s.cfg.Record != nil {
		s.cfg.Record(e.text, action)
	}
}

// Del removes the rule with id (a pending port action is cancelled).
func (s *Set) Del(id int) error {
	s.mu.Lock()
	e, ok := s.rules[id]
	if ok {
		delete(s.rules, id)
		s.order = slices.DeleteFunc(s.order, func(x *entry) bool { return x == e })
		if c := s.counter(e.r); c != nil {
			c.Add(-1)
		}
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("fault: no rule %d: %w", id, unix.ENOENT)
	}
	s.logf("fault %d deleted: %s", id, e.text)
	return nil
}

// List returns the rules in force, one line each: "ID RULE applied=N".
func (s *Set) List() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, 0, len(s.rules))
	for id := range s.rules {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		e := s.rules[id]
		out = append(out, strconv.Itoa(id)+" "+e.text+" applied="+strconv.FormatUint(e.applied, 10))
	}
	return out
}

// HasVerbRule reports whether a verbs rule names verb (as KnownVerb
// spells it), used up or not: while one does, every such command must
// reach Verb.
func (s *Set) HasVerbRule(verb string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.rules {
		if e.r.Kind == KindVerbs && e.r.Verb == verb {
			return true
		}
	}
	return false
}

// Close cancels pending port actions; later Adds fail.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, e := range s.rules {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
}

// sorted returns the entries in id order; s.mu held.
func (s *Set) sorted() []*entry { return s.order }

// maxLogged is how many actions of a rule the log tells one by one.
const maxLogged = 5

var wireActions = map[string]link.Action{
	"drop": link.Drop, "duplicate": link.Duplicate, "reorder": link.Reorder, "corrupt": link.Corrupt,
	"delay": link.Delay, "silent": link.Drop,
}

// Frame decides the faults of one frame the device sends: the union of the
// actions of the wire and qp rules that take it. It is a
// link.FaultConfig.Schedule (i is unused: each rule counts its own
// matching frames). Frames that are not RoCEv2 pass.
func (s *Set) Frame(_ uint64, frame []byte) link.Action {
	if s.nFrame.Load() == 0 {
		return 0
	}
	s.mu.Lock()
	p, err := wire.Parse(frame)
	if err != nil {
		s.mu.Unlock()
		return 0
	}
	bth := p.BTH()
	op, qpn, psn := bth.Opcode(), bth.DestQP(), bth.PSN()
	var act link.Action
	var did []*entry
	for _, e := range s.sorted() {
		r := e.r
		if r.Kind != KindWire && !(r.Kind == KindQP && r.Action == "silent") {
			continue
		}
		if r.HasQP && r.QP != qpn || !r.MatchOpcode(op) || r.HasPSN && (psn < r.PSNLo || psn > r.PSNHi) {
			continue
		}
		e.seen++
		limit := r.Count
		if limit == 0 && r.Nth != 0 {
			limit = 1
		}
		if limit != 0 && e.applied >= limit || r.Nth != 0 && e.seen < r.Nth {
			continue
		}
		if r.Prob != 0 && s.rng.Float64() >= r.Prob {
			continue
		}
		e.applied++
		act |= wireActions[r.Action]
		did = append(did, e)
	}
	s.mu.Unlock()
	for _, e := range did {
		s.did(e, e.r.Action+" "+op.String(), fmt.Sprintf(" qp=%#x psn=%d", qpn, psn))
	}
	return act
}

// Verb is the daemon's intercept of a uverbs command, by its name as
// uverbs.CommandName gives it: the first verbs rule naming the command
// that has failures left fails it with its errno.
func (s *Set) Verb(command string) error {
	v := VerbOf(command)
	if v == "" {
		return nil
	}
	s.mu.Lock()
	var hit *entry
	for _, e := range s.sorted() {
		r := e.r
		if r.Kind != KindVerbs || r.Verb != v {
			continue
		}
		e.seen++
		if limit := max(r.Count, 1); e.applied >= limit {
			continue
		}
		e.applied++
		hit = e
		break
	}
	s.mu.Unlock()
	if hit == nil {
		return nil
	}
	s.did(hit, "fail "+unix.ErrnoName(hit.r.Errno), "")
	return fmt.Errorf("fault %s: %w", hit.text, hit.r.Errno)
}

// Rewrite applies the rules that change a frame the device sends rather
// than its fate: qp:rnr answers a SEND for its QP with an RNR NAK (the
// returned frame replaces the SEND), qp:invalidate changes a request's
// R_Key. It returns nil to send frame as it is, an empty slice to send
// nothing, or the frame to send instead (frame itself is not modified).
func (s *Set) Rewrite(frame []byte) []byte {
	if s.nRewrite.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	p, err := wire.Parse(frame)
	if err != nil {
		s.mu.Unlock()
		return nil
	}
	bth := p.BTH()
	op, qpn, psn := bth.Opcode(), bth.DestQP(), bth.PSN()
	var out []byte
	var did *entry
	var action, detail string
	for _, e := range s.sorted() {
		r := e.r
		if r.Kind != KindQP || r.HasQP && r.QP != qpn {
			continue
		}
		switch r.Action {
		case "rnr":
			if op.Transport() != wire.TransportRC || op.Flags()&wire.FlagSend == 0 || !op.IsRequest() {
				continue
			}
			if !op.IsFirst() {
				if e.nakking {
					out, did, action = []byte{}, e, ""
					if op.IsLast() {
						e.nakking = false
					}
				}
				continue
			}
			if e.applied >= max(r.Count, 1) || s.cfg.Responder == nil {
				continue
			}
			resp, ok := s.cfg.Responder(qpn)
			if !ok {
				continue
			}
			nak, err := rnrNAK(&p, resp)
			if err != nil {
				continue
			}
			e.applied++
			e.nakking = !op.IsLast()
			out, did, action = nak, e, "rnr nak "+op.String()
			detail = fmt.Sprintf(" qp=%#x psn=%d to qp=%#x", qpn, psn, resp.DestQPN)
		case "invalidate":
			// The R_Key is bytes 8..11 of the RETH and of the
			// AtomicETH alike.
			h, ok := op.HeaderOffset(wire.HdrRETH)
			if !ok {
				h, ok = op.HeaderOffset(wire.HdrAtomicETH)
			}
			if !ok {
				continue
			}
			off := p.BTHOffset() + h + 8
			if binary.BigEndian.Uint32(frame[off:]) != r.RKey {
				continue
			}
			if r.Count != 0 && e.applied >= r.Count {
				continue
			}
			c := append([]byte(nil), frame...)
			c[off+3] ^= 0xff // the same MR index, another key byte: check_rkey's key mismatch
			if wire.SealICRC(c, p.L3Offset()) != nil {
				continue
			}
			e.applied++
			out, did, action = c, e, "invalidate "+op.String()
			detail = fmt.Sprintf(" qp=%#x psn=%d rkey=%#x", qpn, psn, r.RKey)
		}
		if did != nil && action != "" {
			break
		}
	}
	s.mu.Unlock()
	if did != nil && action != "" {
		s.did(did, action, detail)
	}
	return out
}

// rnrNAK builds the RNR NAK the responder of p's destination QP would send
// for p: addresses swapped, RC ACKNOWLEDGE to the requester QP with p's
// PSN, AETH with the responder's RNR timer and MSN (rxe_resp.c send_ack).
func rnrNAK(p *wire.Packet, r Responder) ([]byte, error) {
	bth := p.BTH()
	f := wire.Frame{DstMAC: p.EthSrc(), SrcMAC: p.EthDst(), VLAN: p.HasVLAN(), VLANTCI: p.VLANTCI(),
		Src: p.Dst(), Dst: p.Src(), HopLimit: 64, SrcPort: p.UDPSrcPort(),
		BTH:  wire.BTHFields{Opcode: wire.RCAcknowledge, PKey: bth.PKey(), DestQP: r.DestQPN, PSN: bth.PSN()},
		AETH: wire.AETHFields{Syndrome: wire.RNRNAKSyndrome(r.MinRNRTimer), MSN: r.MSN}}
	b := make([]byte, f.Len())
	n, err := wire.Build(b, &f)
	return b[:n], err
}

// Link is the link a device writes to under a Set: frames go through the
// Set's Rewrite, then to the faulty link (the inner link behind the faults
// that decide frames' fates, a link.Faults whose Schedule is the Set's
// Frame) while the Set has rules for frames, and straight to the inner
// link when it has none, so that a device with no such rule pays one
// atomic load per batch. Reads pass straight through to the inner link.
type Link struct {
	link.Link           // the inner link
	faulty    link.Link // the inner link behind the faults
	set       *Set
	out       [][]byte
	mu        sync.Mutex
}

// Passes reports whether the Set has no rule that rewrites frames or
// decides their fate: a Link then passes every frame on unchanged.
func (s *Set) Passes() bool { return s.nFrame.Load() == 0 && s.nRewrite.Load() == 0 }

// NewLink returns a Link writing to inner, or to faulty (which wraps
// inner and is closed by Close) while s has rules for frames.
func NewLink(inner, faulty link.Link, s *Set) *Link {
	return &Link{Link: inner, faulty: faulty, set: s}
}

// Close closes the faulty link, which closes the inner one.
func (l *Link) Close() error { return l.faulty.Close() }

// next is where frames go after the rewrite.
func (l *Link) next() link.Link {
	if l.set.nFrame.Load() == 0 {
		return l.Link
	}
	return l.faulty
}

// WritePackets rewrites the frames and writes the result on. It returns
// len(bufs) when the next link took every frame.
func (l *Link) WritePackets(bufs [][]byte) (int, error) {
	if l.set.nRewrite.Load() == 0 {
		return l.next().WritePackets(bufs)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = l.out[:0]
	changed := false
	for _, b := range bufs {
		r := l.set.Rewrite(b)
		switch {
		case r == nil:
			l.out = append(l.out, b)
		case len(r) == 0:
			changed = true
		default:
			l.out = append(l.out, r)
			changed = true
		}
	}
	if !changed {
		return l.next().WritePackets(bufs)
	}
	if len(l.out) == 0 {
		return len(bufs), nil
	}
	if _, err := l.next().WritePackets(l.out); err != nil {
		return 0, err
	}
	return len(bufs), nil
}

// CQ decides the faults of one completion of the QP numbered qpn bound for
// cq (one of the values CQsOf returned): whether the CQ is to be treated as
// full, or how long the completion waits. It also counts the QP's
// completed work requests for qp:err,after=N. It is called with the
// device's lock held; the action is logged and recorded without calling
// back into the device.
func (s *Set) CQ(cq any, qpn uint32) (overflow bool, delay time.Duration) {
	if s.nCQ.Load() == 0 {
		return false, 0
	}
	s.mu.Lock()
	var hit *entry
	for _, e := range s.sorted() {
		r := e.r
		if r.Kind == KindQP && r.Action == "err" && r.After != 0 && r.QP == qpn && !e.fired {
			// The QP's After-th work request completes: the QP moves
			// to ERR, outside the device's lock.
			if e.seen++; e.seen >= r.After {
				e.fired = true
				go s.act(e)
			}
			continue
		}
		if r.Kind != KindCQ || !slices.Contains(e.cqs, cq) {
			continue
		}
		limit := r.Count
		if limit == 0 && r.Action == "overflow" {
			limit = 1
		}
		if limit != 0 && e.applied >= limit {
			continue
		}
		e.applied++
		hit = e
		break
	}
	s.mu.Unlock()
	if hit == nil {
		return false, 0
	}
	// The log may block (a full pipe): it is told from another goroutine,
	// as the device's lock is held here.
	if hit.r.Action == "overflow" {
		go s.did(hit, "cq overflow", "")
		return true, 0
	}
	go s.did(hit, "cq delay "+hit.r.By.String(), "")
	return false, hit.r.By
}
