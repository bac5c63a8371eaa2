// Package bench measures softroce against baselines taken in the same run,
// on the same machine, as `softroce bench` prints them.
//
// Shared, noisy machines make absolute numbers unstable; ratios to a
// baseline measured moments before, under the same load, are not. So every
// measurement here is a Row holding the value, the baseline it is judged
// against, their ratio and, where the project set one (docs/performance.md),
// a target the ratio or value must meet:
//
//   - wire: SealICRC against hash/crc32 over the same bytes; Parse and
//     Build against a copy of the frame;
//   - in-process RC WRITE over a link.Pipe against a plain copy of the
//     same bytes (memory bandwidth), with allocations per packet;
//   - the same over two TAP devices on a bridge in a network namespace the
//     run creates, against the raw TAP frame rate (root only);
//   - RC SEND pingpong latency over those TAPs against a kernel UDP
//     pingpong in the same namespace (root only);
//   - the cost of creating, connecting and destroying many RC QPs;
//   - Debian's ib_write_bw and ib_send_lat, unmodified, on a softroce
//     daemon against the in-process RC WRITE and pingpong (Linux, with
//     perftest and a C compiler for the preload library).
//
// The emulated devices answer as rxe does, one ACK for every packet that
// asks for one; with Options.CoalesceACKs they defer and merge their ACKs
// as hfi1 does, and the rows they make say so (CoalesceSuffix).
//
// Measurement and baseline run alternately, several rounds, keeping the
// best of each, so that a burst of load from another process penalizes
// neither more than the other.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one measurement next to its baseline.
type Row struct {
	// Group is the section: "wire", "inproc", "tap", "latency", "scale",
	// "udp", "daemon".
	Group string `json:"group"`
	// Name says what was measured, e.g. "RC WRITE mtu=4096 msg=1MiB".
	Name string `json:"name"`
	// Value is the measurement, in Unit.
	Value float64 `json:"value"`
	Unit  string  `json:"unit"` // unit of Value, e.g. "Gb/s", "ns/frame"
	// Baseline names what Value is compared with; BaseValue is its
	// measurement in BaseUnit (for a row judged only by a fixed target,
	// the target itself, marked "target").
	Baseline  string  `json:"baseline"`
	BaseValue float64 `json:"base_value"` // the baseline's measurement, or the target, in BaseUnit
	BaseUnit  string  `json:"base_unit"`  // unit of BaseValue
	// Ratio is Value relative to BaseValue, oriented as RatioNote says
	// (for rows whose baseline is zero allocations, the excess).
	Ratio     float64 `json:"ratio"`
	RatioNote string  `json:"ratio_note,omitempty"` // what Ratio measures: "(throughput)", "(time)" or "(excess)"
	// Target is the goal in words ("ratio >= 0.25"); empty when the row
	// is informative only. Pass reports whether it was met.
	Target string `json:"target,omitempty"`
	Pass   bool   `json:"pass"` // whether Target was met; false when Target is empty
	// Detail, for a target of several parts, says which were met.
	Detail string `json:"detail,omitempty"`
	// Skipped, if not empty, says why the row was not measured (the
	// numeric fields are then zero).
	Skipped string `json:"skipped,omitempty"`
	// ACKs, for a row whose devices move RC traffic (inproc, tap,
	// latency, udp), says how they acknowledged: AcksRxe or AcksHfi1.
	ACKs string `json:"acks,omitempty"`
}

// The values of Row.ACKs.
const (
	AcksRxe  = "rxe"        // one ACK for every packet that asks for one, at once (the default)
	AcksHfi1 = "hfi1-style" // deferred and merged (Options.CoalesceACKs)
)

// Options configures Run.
type Options struct {
	// Quick runs every measurement briefly (a smoke run for CI): numbers
	// are printed but noisy.
	Quick bool
	// Log, if set, receives progress lines.
	Log io.Writer
	// Groups, if not empty, selects the groups to run by name.
	Groups []string
	// CoalesceACKs runs the devices of the inproc, tap, latency and udp
	// rows with rxe.Config.CoalesceACKs (hfi1-style deferred ACKs) and
	// marks those rows' names with CoalesceSuffix. Without it every
	// device answers as rxe: one ACK per packet that asks for one.
	CoalesceACKs bool
}

// CoalesceSuffix ends the name of a row whose devices ran with
// Options.CoalesceACKs.
const CoalesceSuffix = " [hfi1-style ACKs]"

// coalesceGroups are the groups whose devices Options.CoalesceACKs
// changes ("tap" also makes the "latency" rows).
var coalesceGroups = []string{"inproc", "tap", "udp"}

// round is the time one side of one measurement runs for in a round.
func (o *Options) round() time.Duration {
	if o.Quick {
		return 20 * time.Millisecond
	}
	return 300 * time.Millisecond
}

// rounds is how many alternations of measurement and baseline run.
func (o *Options) rounds() int {
	if o.Quick {
		return 1
	}
	return 3
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

func (o *Options) want(group string) bool {
	if len(o.Groups) == 0 {
		return true
	}
	return slices.Contains(o.Groups, group)
}

// group is one section of the run.
type group struct {
	name string
	run  func(ctx context.Context, o *Options) ([]Row, error)
}

// groups is the run order: cheap and root-free first.
var groups = []group{
	{"wire", runWire},
	{"inproc", runInproc},
	{"scale", runScale},
	{"tap", runTAP}, // also produces the "latency" rows
	{"udp", runUDP},
	{"daemon", runDaemon},
}

// Run runs the selected measurements in order and returns their rows. A
// group that fails returns its error with the rows measured so far.
func Run(ctx context.Context, o Options) ([]Row, error) {
	for _, name := range o.Groups {
		if !slices.ContainsFunc(groups, func(g group) bool { return g.name == name }) {
			return nil, fmt.Errorf("unknown group %q (want wire, inproc, scale, tap, udp or daemon)", name)
		}
	}
	var rows []Row
	for _, g := range groups {
		if !o.want(g.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rows, err
		}
		o.logf("# %s", g.name)
		rs, err := g.run(ctx, &o)
		if slices.Contains(coalesceGroups, g.name) {
			for i := range rs {
				rs[i].ACKs = AcksRxe
				if o.CoalesceACKs {
					rs[i].Name += CoalesceSuffix
					rs[i].ACKs = AcksHfi1
				}
			}
		}
		rows = append(rows, rs...)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", g.name, err)
		}
	}
	return rows, nil
}

// atLeast returns a row judged by Ratio >= min.
func (r Row) atLeast(min float64) Row {
	r.Target = fmt.Sprintf("ratio >= %g", min)
	r.Pass = r.Ratio >= min
	return r
}

// atMost returns a row judged by Ratio <= max.
func (r Row) atMost(max float64) Row {
	r.Target = fmt.Sprintf("ratio <= %g", max)
	r.Pass = r.Ratio <= max
	return r
}

// ratio returns a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Write prints rows as perftest-style columns.
func Write(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\ttest\tvalue\tunit\tbaseline\tvalue\tunit\tratio\ttarget\tresult\t")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t%s\t%s\t-\t%s\t-\t%s\tskipped: %s\t\n",
				r.Group, r.Name, r.Unit, r.Baseline, r.BaseUnit, orDash(r.Target), r.Skipped)
			continue
		}
		res := "-"
		if r.Target != "" {
			res = "MISS"
			if r.Pass {
				res = "PASS"
			}
			if r.Detail != "" {
				res += " (" + r.Detail + ")"
			}
		}
		ratio := num(r.Ratio)
		if r.RatioNote != "" {
			ratio += " " + r.RatioNote
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Group, r.Name, num(r.Value), r.Unit,
			r.Baseline, num(r.BaseValue), r.BaseUnit, ratio, orDash(r.Target), res)
	}
	return tw.Flush()
}

// WriteJSON prints rows as a JSON array.
func WriteJSON(w io.Writer, rows []Row) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	e.SetEscapeHTML(false) // targets read "ratio >= 0.8"
	if rows == nil {
		rows = []Row{}
	}
	return e.Encode(rows)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// num formats a value with three significant digits or more.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
	}
}

// timeOp runs f(n) with n growing until it takes at least d and returns
// the time per operation.
func timeOp(d time.Duration, f func(n int)) time.Duration {
	n := 1
	for {
		start := time.Now()
		f(n)
		el := time.Since(start)
		if el >= d || n >= 1<<30 {
			return el / time.Duration(n)
		}
		next := n * 2
		if el > 0 {
			next = int(float64(n) * 1.2 * float64(d) / float64(el))
		}
		n = min(max(next, n+1), 100*n)
	}
}

// bestOf alternates a and b for rounds rounds and returns the smallest
// time per operation of each.
func bestOf(rounds int, a, b func() time.Duration) (ta, tb time.Duration) {
	ta, tb = time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range rounds {
		ta = min(ta, a())
		tb = min(tb, b())
	}
	return ta, tb
}
