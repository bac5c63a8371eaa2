package coverage

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
)

// Report is a profile laid over the kernel's space: the transition table of
// each QP type the profile touches, every completion status, every async
// event and every transport counter, each with its count (0 = never seen).
// It marshals to JSON as it is (softroce coverage --json).
type Report struct {
	Runs    uint64   `json:"runs"`
	Devices []string `json:"devices"`
	// Types has one entry per QP type with a recorded modify, in value
	// order.
	Types []TypeReport `json:"qp_types"`
	// Completions are the (opcode, status) pairs seen, in value order.
	Completions []CompletionCount `json:"completions"`
	// ErrorStatuses are every status but IB_WC_SUCCESS, with the number
	// of completions of any opcode that had it.
	ErrorStatuses []NameCount `json:"error_statuses"`
	// Events are every async event with the number dispatched.
	Events []NameCount `json:"events"`
	// Verbs are the failed verbs by errno, sorted.
	Verbs []VerbCount `json:"failed_verbs"`
	// Transport are TransportCounters with their values.
	Transport []CounterValue `json:"transport"`
	// Faults are the injected faults' rules with what each did, sorted.
	Faults []FaultCount `json:"faults"`
}

// TypeReport is the transition table of one QP type with what a profile
// did in it.
type TypeReport struct {
	Type string `json:"type"` // qpstate.Type.String ("IB_QPT_RC")
	// Taken is how many of the table's valid transitions were made at
	// least once; Valid is how many there are.
	Taken int `json:"taken"`
	Valid int `json:"valid"`
	// Transitions are the table's valid transitions, in (cur, next)
	// order, taken or not.
	Transitions []TransitionReport `json:"transitions"`
	// Invalid are the attempts at pairs outside the table, by result.
	Invalid []Attempt `json:"invalid"`
	t       qpstate.Type
}

// TransitionReport is one valid cell of the transition table.
type TransitionReport struct {
	Cur  string `json:"cur"`  // short state name ("RESET")
	Next string `json:"next"` // short state name
	// Count is the number of successful modifies.
	Count uint64 `json:"count"`
	// Required is what the table requires besides IB_QP_STATE.
	Required string `json:"required"`
	// OptionalGiven and OptionalNever split the table's optional
	// attributes into those given in a successful modify and the rest.
	OptionalGiven string `json:"optional_given"`
	OptionalNever string `json:"optional_never"`
	// Failed are the attempts that failed, by errno.
	Failed []ErrnoCount `json:"failed"`
	cur    qpstate.State
	next   qpstate.State
}

// Attempt is a modify at a pair outside the table, with its result.
type Attempt struct {
	Cur   string `json:"cur"`
	Next  string `json:"next"`
	Errno string `json:"errno"` // "" when it succeeded
	Count uint64 `json:"count"`
}

// ErrnoCount is a number of failures with one errno.
type ErrnoCount struct {
	Errno string `json:"errno"`
	Count uint64 `json:"count"`
}

// CompletionCount is the number of completions of an opcode and status.
type CompletionCount struct {
	Opcode string `json:"opcode"`
	Status string `json:"status"`
	Count  uint64 `json:"count"`
}

// NameCount is a kernel name with a count.
type NameCount struct {
	Name  string `json:"name"`
	Count uint64 `json:"count"`
}

// VerbCount is a failed verb with its errno and count.
type VerbCount struct {
	Verb  string `json:"verb"`
	Errno string `json:"errno"`
	Count uint64 `json:"count"`
}

// CounterValue is a transport counter, what it counts and its value.
type CounterValue struct {
	Counter string `json:"counter"`
	Desc    string `json:"desc"`
	Count   uint64 `json:"count"`
}

// NewReport lays p over the kernel's space.
func NewReport(p *Profile) *Report {
	r := &Report{Runs: p.Runs, Devices: slices.Clone(p.Devices), Types: []TypeReport{},
		Completions: []CompletionCount{}, Verbs: []VerbCount{}, Faults: []FaultCount{}}
	for _, k := range sortedFaults(p.Faults) {
		r.Faults = append(r.Faults, FaultCount{k.Rule, k.Action, p.Faults[k]})
	}
	if r.Devices == nil {
		r.Devices = []string{}
	}
	keys := sortedModify(p.Modify)
	for _, t := range qpstate.Types() {
		if !slices.ContainsFunc(keys, func(k ModifyKey) bool { return k.Type == t }) {
			continue
		}
		r.Types = append(r.Types, typeReport(t, keys, p.Modify))
	}
	statusCount := map[emu.WCStatus]uint64{}
	for _, k := range sortedCompletions(p.Completions) {
		n := p.Completions[k]
		r.Completions = append(r.Completions, CompletionCount{k.Opcode.String(), k.Status.String(), n})
		statusCount[k.Status] += n
	}
	for _, s := range WCStatuses() {
		if s != emu.WCSuccess {
			r.ErrorStatuses = append(r.ErrorStatuses, NameCount{s.String(), statusCount[s]})
		}
	}
	for _, e := range EventTypes() {
		r.Events = append(r.Events, NameCount{e.String(), p.Events[e]})
	}
	for _, k := range sortedVerbs(p.Verbs) {
		r.Verbs = append(r.Verbs, VerbCount{k.Verb, errnoName(k.Errno), p.Verbs[k]})
	}
	for _, c := range TransportCounters {
		r.Transport = append(r.Transport, CounterValue{c.Name, c.Desc, p.Transport[c.Name]})
	}
	return r
}

func typeReport(t qpstate.Type, keys []ModifyKey, counts map[ModifyKey]uint64) TypeReport {
	tr := TypeReport{Type: t.String(), Transitions: []TransitionReport{}, Invalid: []Attempt{}, t: t}
	for cur := qpstate.StateReset; cur <= qpstate.StateErr; cur++ {
		for next := qpstate.StateReset; next <= qpstate.StateErr; next++ {
			req, opt, ok := qpstate.Masks(cur, next, t)
			if !ok {
				continue
			}
			x := TransitionReport{Cur: cur.Name(), Next: next.Name(), Required: maskString(req),
				Failed: []ErrnoCount{}, cur: cur, next: next}
			var given qpstate.AttrMask
			for _, k := range keys {
				if k.Type != t || k.Cur != cur || k.Next != next {
					continue
				}
				if k.Errno == 0 {
					x.Count += counts[k]
					given |= k.Mask
				} else {
					x.Failed = addErrno(x.Failed, errnoName(k.Errno), counts[k])
				}
			}
			x.OptionalGiven, x.OptionalNever = maskString(given&opt), maskString(opt&^given)
			tr.Valid++
			if x.Count > 0 {
				tr.Taken++
			}
			tr.Transitions = append(tr.Transitions, x)
		}
	}
	for _, k := range keys {
		if k.Type != t || qpstate.ValidPair(k.Cur, k.Next) {
			continue
		}
		e := errnoName(k.Errno)
		if i := slices.IndexFunc(tr.Invalid, func(a Attempt) bool {
			return a.Cur == k.Cur.Name() && a.Next == k.Next.Name() && a.Errno == e
		}); i >= 0 {
			tr.Invalid[i].Count += counts[k]
		} else {
			tr.Invalid = append(tr.Invalid, Attempt{k.Cur.Name(), k.Next.Name(), e, counts[k]})
		}
	}
	return tr
}

func addErrno(l []ErrnoCount, e string, n uint64) []ErrnoCount {
	for i := range l {
		if l[i].Errno == e {
			l[i].Count += n
			return l
		}
	}
	return append(l, ErrnoCount{e, n})
}

// maskString is the short names of m, "-" when empty.
func maskString(m qpstate.AttrMask) string {
	if m == 0 {
		return "-"
	}
	return m.ShortString()
}

// Taken returns how many times the valid transition cur -> next of QP type
// t was made successfully, and false when the report has no such cell
// (t not in the report or the pair not in the table).
func (r *Report) Taken(t qpstate.Type, cur, next qpstate.State) (uint64, bool) {
	for i := range r.Types {
		if r.Types[i].t != t {
			continue
		}
		for _, x := range r.Types[i].Transitions {
			if x.cur == cur && x.next == next {
				return x.Count, true
			}
		}
	}
	return 0, false
}

// Attempts returns the report's attempts of QP type t at pairs outside
// the table.
func (r *Report) Attempts(t qpstate.Type) []Attempt {
	for i := range r.Types {
		if r.Types[i].t == t {
			return r.Types[i].Invalid
		}
	}
	return nil
}

// WriteText writes the report for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	runs := "runs"
	if r.Runs == 1 {
		runs = "run"
	}
	fmt.Fprintf(&b, "coverage of %d %s on %s\n", r.Runs, runs, orNone(strings.Join(r.Devices, ", ")))
	if len(r.Types) == 0 {
		b.WriteString("\nno modify QP recorded\n")
	}
	for _, tr := range r.Types {
		fmt.Fprintf(&b, "\n%s: %d of %d valid transitions taken\n", tr.Type, tr.Taken, tr.Valid)
		var never []string
		for _, x := range tr.Transitions {
			if x.Count == 0 && len(x.Failed) == 0 {
				never = append(never, x.Cur+"->"+x.Next)
				continue
			}
			fmt.Fprintf(&b, "  %-12s %6d ok", x.Cur+"->"+x.Next, x.Count)
			for _, f := range x.Failed {
				fmt.Fprintf(&b, ", %d %s", f.Count, f.Errno)
			}
			fmt.Fprintf(&b, "\n      required %s; optional given %s; optional never %s\n",
				x.Required, x.OptionalGiven, x.OptionalNever)
		}
		if len(never) > 0 {
			fmt.Fprintf(&b, "  never taken: %s\n", strings.Join(never, " "))
		}
		for _, a := range tr.Invalid {
			res := a.Errno
			if res == "" {
				res = "ok (no IB_QP_STATE: the table was not consulted)"
			}
			fmt.Fprintf(&b, "  invalid %-12s %6d %s\n", a.Cur+"->"+a.Next, a.Count, res)
		}
	}
	if len(r.Completions) > 0 {
		b.WriteString("\ncompletions:\n")
		for _, c := range r.Completions {
			fmt.Fprintf(&b, "  %-26s %-26s %d\n", c.Opcode, c.Status, c.Count)
		}
	}
	writeSeen(&b, "error completion statuses", r.ErrorStatuses)
	writeSeen(&b, "async events", r.Events)
	if len(r.Verbs) > 0 {
		b.WriteString("\nfailed verbs:\n")
		for _, v := range r.Verbs {
			fmt.Fprintf(&b, "  %-16s %-10s %d\n", v.Verb, v.Errno, v.Count)
		}
	}
	if len(r.Faults) > 0 {
		b.WriteString("\nfaults injected:\n")
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "  %s: %s %d\n", f.Rule, f.Action, f.Count)
		}
	}
	b.WriteString("\ntransport:\n")
	for _, c := range r.Transport {
		fmt.Fprintf(&b, "  %-24s %6d  %s\n", c.Counter, c.Count, c.Desc)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeSeen(b *strings.Builder, what string, l []NameCount) {
	var seen, never []string
	for _, c := range l {
		if c.Count > 0 {
			seen = append(seen, fmt.Sprintf("%s %d", c.Name, c.Count))
		} else {
			never = append(never, c.Name)
		}
	}
	fmt.Fprintf(b, "\n%s: %d of %d seen\n", what, len(seen), len(l))
	for _, s := range seen {
		fmt.Fprintf(b, "  %s\n", s)
	}
	if len(never) > 0 {
		fmt.Fprintf(b, "  never: %s\n", strings.Join(never, " "))
	}
}

func orNone(s string) string {
	if s == "" {
		return "no device"
	}
	return s
}

// QPType returns the QP type the entry is about.
func (tr *TypeReport) QPType() qpstate.Type { return tr.t }
