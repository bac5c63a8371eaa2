package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/uverbsd"
)

func init() {
	register(command{
		name:     "coverage",
		summary:  "report coverage profiles (QP transitions, completions, events, failed verbs, transport) against the kernel's space",
		operands: "FILE... | --live [-d NAME] [FILE...]",
		run:      runCoverage,
	})
}

// runCoverage merges the profile files given (counts add, cells are the
// union, as go tool covdata merge does) and prints the report: the
// transition table of each QP type the runs touched, with what was taken,
// never taken and attempted outside it; the completion statuses and async
// events seen and never seen; the failed verbs; the transport counters.
// --json prints the same report as JSON, --dot the state machine with the
// taken transitions weighted and the untaken ones dashed.
func runCoverage(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "coverage")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	asDot := fs.Bool("dot", false, "print the QP state machine of the QP types the runs touched as a Graphviz DOT graph, edges weighted by the times taken (render: dot -Tsvg)")
	merged := fs.String("o", "", "also write the merged profile to `FILE`")
	live := fs.Bool("live", false, "ask the daemon serving -d (softroce serve, softroce run) for its profile so far, merged with the FILEs given")
	dev := fs.String("d", defaultServeName, "the device `NAME` of the daemon --live asks")
	flagUsage := fs.Usage
	fs.Usage = func() {
		flagUsage()
		fmt.Fprint(stderr, `
Each FILE is a profile written by softroce loopback, serve or run with
--coverage FILE; several merge into one report (counts add). --live asks a
serving daemon for what it has recorded so far.

example: softroce loopback -test rc -n 10 --coverage rc.json && softroce coverage rc.json
         softroce coverage --live -d rxe0
`)
	}
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) == 0 && !*live || *asJSON && *asDot {
		fs.Usage()
		return errUsage
	}
	p, err := coverage.ReadFiles(operands...)
	if err != nil {
		return err
	}
	if *live {
		q, err := liveProfile(*dev)
		if err != nil {
			return err
		}
		p.Merge(q)
	}
	if *merged != "" {
		if err := coverage.WriteFile(*merged, p); err != nil {
			return err
		}
	}
	rep := coverage.NewReport(p)
	switch {
	case *asJSON:
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	case *asDot:
		var types []qpstate.Type
		for i := range rep.Types {
			types = append(types, rep.Types[i].QPType())
		}
		if len(types) == 0 {
			types = []qpstate.Type{qpstate.TypeRC}
		}
		_, err = io.WriteString(stdout, dotGraph(types, rep))
		return err
	}
	return rep.WriteText(stdout)
}

// liveProfile asks the daemon serving dev for its profile so far.
func liveProfile(dev string) (*coverage.Profile, error) {
	dir, err := uverbsd.DeviceDir(dev)
	if err != nil {
		return nil, err
	}
	out, err := uverbsd.Control(dir, "coverage")
	if err != nil {
		return nil, fmt.Errorf("coverage --live -d %s: %w", dev, err)
	}
	return coverage.Decode(strings.NewReader(out))
}
