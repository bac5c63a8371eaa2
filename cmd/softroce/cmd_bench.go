package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"

	"github.com/softroce/softroce/bench"
)

func init() {
	register(command{
		name:    "bench",
		summary: "measure softroce against baselines taken in the same run (perftest-style ratios)",
		run:     runBench,
	})
}

// runBench runs package bench's measurements and prints their rows; missed
// targets are reported, not failures. The TAP rows need root (they create
// a network namespace) and say "skipped: needs root" without it.
func runBench(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "bench")
	quick := fs.Bool("quick", false, "run every measurement briefly (a smoke run: numbers are noisy)")
	asJSON := fs.Bool("json", false, "print the rows as JSON")
	groups := fs.String("group", "", "comma-separated `GROUPS` to run (wire, inproc, scale, tap, udp, daemon); empty runs all")
	coalesce := fs.Bool("coalesce-acks", false, "run the inproc, tap, latency and udp devices with hfi1-style deferred ACKs (not rxe's: --coalesce-acks of the link flags); their rows' names end in"+bench.CoalesceSuffix)
	verbose := fs.Bool("v", false, "log progress to stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a pprof CPU profile of the run to `file`")
	memProfile := fs.String("memprofile", "", "write a pprof allocation profile of the run to `file`")
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fs.Usage()
		return errUsage
	}
	o := bench.Options{Quick: *quick, CoalesceACKs: *coalesce}
	if *groups != "" {
		o.Groups = splitComma(*groups)
	}
	if *verbose {
		o.Log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *memProfile != "" {
		runtime.MemProfileRate = 4096 // fine enough to see per-packet allocations
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rows, err := bench.Run(ctx, o)
	if *memProfile != "" {
		if perr := writeHeapProfile(*memProfile); err == nil {
			err = perr
		}
	}
	var werr error
	if *asJSON {
		werr = bench.WriteJSON(stdout, rows)
	} else {
		werr = bench.Write(stdout, rows)
	}
	if err != nil {
		return err
	}
	return werr
}

// writeHeapProfile writes the allocation profile (pprof -sample_index
// alloc_objects shows where allocations came from).
func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
