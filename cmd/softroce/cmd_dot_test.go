package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/softroce/softroce/qpstate"
)

var edgeRE = regexp.MustCompile(`^\s*(\w+) -> (\w+) \[label="([^"]*)", tooltip="([^"]*)"\];$`)

// parseEdges returns the edges of a DOT graph printed by dot, keyed
// "FROM->TO", with their labels; it fails on duplicate edges.
func parseEdges(t *testing.T, out string) map[string][2]string {
	t.Helper()
	edges := map[string][2]string{}
	for _, line := range strings.Split(out, "\n") {
		m := edgeRE.FindStringSubmatch(line)
		if m == nil {
			if strings.Contains(line, "->") {
				t.Fatalf("unparsed edge line %q", line)
			}
			continue
		}
		k := m[1] + "->" + m[2]
		if _, dup := edges[k]; dup {
			t.Fatalf("duplicate edge %s", k)
		}
		edges[k] = [2]string{m[3], m[4]}
	}
	return edges
}

func TestDotRC(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"dot", "-type", "RC"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	if !strings.HasPrefix(s, "digraph qp_states_RC {") || !strings.HasSuffix(s, "}\n") ||
		strings.Count(s, "{") != strings.Count(s, "}") {
		t.Fatalf("not a single balanced digraph:\n%s", s)
	}
	edges := parseEdges(t, s)
	if len(edges) != 22 {
		t.Fatalf("%d edges, want the 22 valid transitions", len(edges))
	}
	for cur := qpstate.StateReset; cur <= qpstate.StateErr; cur++ {
		for next := qpstate.StateReset; next <= qpstate.StateErr; next++ {
			req, opt, ok := qpstate.Masks(cur, next, qpstate.TypeRC)
			e, found := edges[cur.Name()+"->"+next.Name()]
			if found != ok {
				t.Errorf("%s->%s: edge present %v, valid %v", cur.Name(), next.Name(), found, ok)
				continue
			}
			if !ok {
				continue
			}
			wantLabel := ""
			if req != 0 {
				wantLabel = strings.ReplaceAll(req.ShortString(), "|", `\n`)
			}
			if e[0] != wantLabel {
				t.Errorf("%s->%s label %q, want %q", cur.Name(), next.Name(), e[0], wantLabel)
			}
			if opt != 0 && e[1] != "optional: "+opt.ShortString() {
				t.Errorf("%s->%s tooltip %q", cur.Name(), next.Name(), e[1])
			}
		}
	}
	if e := edges["RTR->RTS"]; e[0] != `TIMEOUT\nRETRY_CNT\nRNR_RETRY\nMAX_QP_RD_ATOMIC\nSQ_PSN` {
		t.Errorf("RTR->RTS label %q", e[0])
	}
}

func TestDotAll(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"dot", "-type", "all"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	if strings.Count(s, "{") != strings.Count(s, "}") {
		t.Fatal("unbalanced braces")
	}
	edges := parseEdges(t, s)
	if want := 22 * len(qpstate.Types()); len(edges) != want {
		t.Fatalf("%d edges, want %d", len(edges), want)
	}
	for _, ty := range qpstate.Types() {
		if !strings.Contains(s, fmt.Sprintf("subgraph cluster_%s {", ty.Name())) {
			t.Errorf("no cluster for %v", ty)
		}
		req, _, _ := qpstate.Masks(qpstate.StateReset, qpstate.StateInit, ty)
		want := ""
		if req != 0 {
			want = strings.ReplaceAll(req.ShortString(), "|", `\n`)
		}
		if e := edges[ty.Name()+"_RESET->"+ty.Name()+"_INIT"]; e[0] != want {
			t.Errorf("%v RESET->INIT label %q, want %q", ty, e[0], want)
		}
	}
}

func TestDotUsage(t *testing.T) {
	for _, args := range [][]string{{"dot", "-type", "RD"}, {"dot", "extra"}, {"dot", "-type", "7"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
