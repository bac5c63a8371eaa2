package fault

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"

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
}

// Set is the rules in force on one device. Its Frame method is a
// link.FaultConfig.Schedule; Verb is the daemon's command intercept. It
// is safe for concurrent use.
type Set struct {
	cfg Config
	clk clock.Clock

	mu     sync.Mutex
	rng    *rand.Rand
	next   int
	rules  map[int]*entry
	closed bool
}

type entry struct {
	id      int
	r       *Rule
	text    string
	seen    uint64 // matching frames (wire) or commands (verbs)
	applied uint64
	timer   clock.Timer
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
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, fmt.Errorf("fault: the set is closed: %w", unix.ESHUTDOWN)
	}
	e := &entry{id: s.next, r: r, text: r.String()}
	s.next++
	s.rules[e.id] = e
	s.mu.Unlock()
	s.logf("fault %d added: %s", e.id, e.text)
	if r.Kind == KindPort {
		if r.At == 0 {
			return e.id, s.port(e)
		}
		s.mu.Lock()
		e.timer = s.clk.AfterFunc(r.At, func() { s.port(e) })
		s.mu.Unlock()
	}
	return e.id, nil
}

// port applies a port rule once.
func (s *Set) port(e *entry) error {
	s.mu.Lock()
	if s.closed || s.rules[e.id] != e {
		s.mu.Unlock()
		return nil
	}
	e.applied++
	s.mu.Unlock()
	if err := s.cfg.Port(e.r); err != nil {
		s.logf("fault %d %s: %v", e.id, e.text, err)
		return fmt.Errorf("fault: %s: %w", e.text, err)
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
func (s *Set) sorted() []*entry {
	out := make([]*entry, 0, len(s.rules))
	for _, e := range s.rules {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

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
	s.mu.Lock()
	if len(s.rules) == 0 {
		s.mu.Unlock()
		return 0
	}
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
		if r.Kind != KindWire && r.Kind != KindQP {
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
