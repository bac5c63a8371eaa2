package main

import (
	"fmt"
	"io"
	"math/bits"
	"strings"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/qpstate"
)

func init() {
	register(command{
		name:    "dot",
		summary: "print the kernel's QP state machine as a Graphviz DOT graph",
		run:     runDot,
	})
}

// runDot prints the transition table of qpstate as DOT: one node per state,
// one edge per valid transition labelled with the attributes it requires
// besides IB_QP_STATE (optional ones in the edge tooltip). With -type all,
// each QP type is a cluster. Render with: softroce dot -type RC | dot -Tsvg.
func runDot(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "dot")
	typeName := fs.String("type", "RC", "the QP type `TYPE` to draw (RC, UC, UD, ...), or all for every type")
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) != 0 {
		fs.Usage()
		return errUsage
	}
	var types []qpstate.Type
	if strings.EqualFold(*typeName, "all") {
		types = qpstate.Types()
	} else {
		t, err := qpstate.ParseType(*typeName)
		if err != nil || !t.IsValid() {
			fmt.Fprintf(stderr, "softroce dot: unknown QP type %q\n", *typeName)
			return errUsage
		}
		types = []qpstate.Type{t}
	}
	_, err = io.WriteString(stdout, dotGraph(types, nil))
	return err
}

// dotGraph renders the state machine of the given QP types. With a
// coverage report cov, each valid transition is labelled with the times
// it was taken and drawn with a width growing with that count, an untaken
// one is dashed, and the attempts at pairs outside the table are red
// dotted edges labelled with their result (softroce coverage --dot).
func dotGraph(types []qpstate.Type, cov *coverage.Report) string {
	var b strings.Builder
	name := "qp_states_all"
	if len(types) == 1 {
		name = "qp_states_" + types[0].Name()
	}
	fmt.Fprintf(&b, "digraph %s {\n", name)
	b.WriteString("\trankdir=LR;\n\tnewrank=true;\n")
	b.WriteString("\tlabelloc=t;\n")
	title := "QP state machine (ib_modify_qp_is_ok)"
	if cov != nil {
		title = "QP transition coverage (ib_modify_qp_is_ok)"
	}
	if len(types) == 1 {
		title += " for " + types[0].String()
	}
	legend := "edge labels: attributes required besides IB_QP_STATE; hover for optional ones"
	if cov != nil {
		legend = "edge labels: times taken, then the attributes required besides IB_QP_STATE;\n" +
			"dashed: never taken; red dotted: attempts outside the table and their result"
	}
	fmt.Fprintf(&b, "\tlabel=%s;\n", dotQuote(title+"\n"+legend))
	b.WriteString("\tnode [shape=ellipse, fontname=\"Helvetica\"];\n\tedge [fontname=\"Helvetica\", fontsize=10];\n")
	for _, t := range types {
		indent := "\t"
		prefix := ""
		if len(types) > 1 {
			prefix = t.Name() + "_"
			fmt.Fprintf(&b, "\tsubgraph cluster_%s {\n\t\tlabel=%s;\n", t.Name(), dotQuote(t.String()))
			indent = "\t\t"
		}
		for s := qpstate.StateReset; s <= qpstate.StateErr; s++ {
			fmt.Fprintf(&b, "%s%s%s [label=%s];\n", indent, prefix, s.Name(), dotQuote(s.Name()))
		}
		for cur := qpstate.StateReset; cur <= qpstate.StateErr; cur++ {
			for next := qpstate.StateReset; next <= qpstate.StateErr; next++ {
				req, opt, ok := qpstate.Masks(cur, next, t)
				if !ok {
					continue
				}
				label := ""
				if req != 0 {
					label = strings.ReplaceAll(req.ShortString(), "|", "\n")
				}
				tooltip := "optional: none"
				if opt != 0 {
					tooltip = "optional: " + opt.ShortString()
				}
				style := ""
				if cov != nil {
					n, _ := cov.Taken(t, cur, next)
					label = fmt.Sprintf("%d×\n%s", n, label)
					if n == 0 {
						style = ", style=dashed, color=gray50"
					} else {
						style = fmt.Sprintf(", penwidth=%d", 1+bits.Len64(n))
					}
				}
				fmt.Fprintf(&b, "%s%s%s -> %s%s [label=%s, tooltip=%s%s];\n", indent,
					prefix, cur.Name(), prefix, next.Name(), dotQuote(strings.TrimSuffix(label, "\n")), dotQuote(tooltip), style)
			}
		}
		if cov != nil {
			for _, a := range cov.Attempts(t) {
				res := a.Errno
				if res == "" {
					res = "ok"
				}
				fmt.Fprintf(&b, "%s%s%s -> %s%s [label=%s, tooltip=%s, style=dotted, color=red, fontcolor=red, constraint=false];\n",
					indent, prefix, a.Cur, prefix, a.Next, dotQuote(fmt.Sprintf("%d× %s", a.Count, res)),
					dotQuote("outside the transition table"))
			}
		}
		if len(types) > 1 {
			b.WriteString("\t}\n")
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// dotQuote returns s as a DOT double-quoted string: backslashes and quotes
// escaped, newlines as the \n line break escape.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
