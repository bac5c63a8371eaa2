package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/softroce/softroce/coverage"
	"github.com/softroce/softroce/internal/testenv"
)

// loopbackCoverage runs "softroce loopback" with args and --coverage and
// returns the profile file.
func loopbackCoverage(t *testing.T, name string, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	args = append([]string{"loopback", "--seed", "5", "--coverage", path}, args...)
	if code, out, errs := runCmd(t, args...); code != 0 {
		t.Fatalf("%q: exit %d\n%s\n%s", args, code, out, errs)
	}
	return path
}

// The profile of an RC pingpong in loopback has each side's RESET->INIT,
// INIT->RTR, RTR->RTS, then the RTS->ERR the workload stops with; the
// report says so, and its JSON form carries the same counts.
func TestCoverageOfLoopbackPingpong(t *testing.T) {
	path := loopbackCoverage(t, "rc.json", "-test", "rc", "-n", "10")
	p, err := coverage.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Runs != 1 || strings.Join(p.Devices, ",") != "rxe0,rxe1" {
		t.Errorf("runs %d devices %v, want 1 run of rxe0 and rxe1", p.Runs, p.Devices)
	}
	code, out, errs := runCmd(t, "coverage", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"coverage of 1 run on rxe0, rxe1\n",
		"IB_QPT_RC: 4 of 22 valid transitions taken\n",
		"  RESET->INIT       2 ok\n",
		"  INIT->RTR         2 ok\n",
		"  RTR->RTS          2 ok\n",
		"  RTS->ERR          2 ok\n",
		"  IB_WC_SEND                 IB_WC_SUCCESS              20\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCmd(t, "coverage", "--json", path)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errs)
	}
	var rep coverage.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if len(rep.Types) != 1 || rep.Types[0].Taken != 4 || rep.Types[0].Valid != 22 {
		t.Errorf("--json types %+v, want RC with 4 of 22 taken", rep.Types)
	}
}

// Several files merge: the counts of common cells add.
func TestCoverageMergesFiles(t *testing.T) {
	a := loopbackCoverage(t, "a.json", "-test", "rc", "-n", "5")
	b := loopbackCoverage(t, "b.json", "-test", "ud", "-n", "5")
	merged := filepath.Join(t.TempDir(), "merged.json")
	code, out, errs := runCmd(t, "coverage", "-o", merged, a, b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"coverage of 2 runs on rxe0, rxe1\n", "IB_QPT_RC: ", "IB_QPT_UD: "} {
		if !strings.Contains(out, want) {
			t.Errorf("merged report lacks %q:\n%s", want, out)
		}
	}
	pa, _ := coverage.ReadFiles(a)
	pb, _ := coverage.ReadFiles(b)
	pm, err := coverage.ReadFiles(merged)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range pm.Modify {
		if n != pa.Modify[k]+pb.Modify[k] {
			t.Errorf("%+v: merged %d, want %d+%d", k, n, pa.Modify[k], pb.Modify[k])
		}
	}
	if len(pm.Modify) < len(pa.Modify) || len(pm.Modify) < len(pb.Modify) {
		t.Errorf("merged profile lost cells")
	}
}

var coverageEdgeRE = regexp.MustCompile(`^\s*(\w+) -> (\w+) \[label="([^"]*)", tooltip="([^"]*)"(.*)\];$`)

// --dot draws the graph softroce dot draws, with every valid transition
// labelled by its count: taken ones wider, untaken ones dashed. Where
// graphviz is installed, dot must accept it.
func TestCoverageDot(t *testing.T) {
	path := loopbackCoverage(t, "rc.json", "-test", "rc", "-n", "5")
	code, out, errs := runCmd(t, "coverage", "--dot", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasPrefix(out, "digraph qp_states_RC {") || !strings.HasSuffix(out, "}\n") ||
		strings.Count(out, "{") != strings.Count(out, "}") {
		t.Fatalf("not a single balanced digraph:\n%s", out)
	}
	taken := map[string]bool{"RESET->INIT": true, "INIT->RTR": true, "RTR->RTS": true, "RTS->ERR": true}
	edges := 0
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "->") {
			continue
		}
		m := coverageEdgeRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsed edge line %q", line)
		}
		edges++
		k := m[1] + "->" + m[2]
		if taken[k] {
			if !strings.HasPrefix(m[3], "2×") || !strings.Contains(m[5], "penwidth=") {
				t.Errorf("taken edge %s: %q", k, line)
			}
		} else if !strings.HasPrefix(m[3], "0×") || !strings.Contains(m[5], "style=dashed") {
			t.Errorf("untaken edge %s: %q", k, line)
		}
	}
	if edges != 22 {
		t.Errorf("%d edges, want the 22 valid transitions", edges)
	}
	// The plain graph is the same graph: same nodes, same edges.
	_, plain, _ := runCmd(t, "dot", "-type", "RC")
	if got, want := strings.Count(out, " -> "), strings.Count(plain, " -> "); got != want {
		t.Errorf("--dot has %d edges, softroce dot %d", got, want)
	}
	// Two QP types are two clusters; attempts outside the table are red
	// dotted edges with their result.
	code, out2, errs := runCmd(t, "coverage", "--dot", filepath.Join("..", "..", "coverage", "testdata", "sample.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"subgraph cluster_RC {", "subgraph cluster_UD {",
		`RC_RESET -> RC_RTS [label="2× EINVAL", tooltip="outside the transition table", style=dotted, color=red`,
		`RC_RTR -> RC_RTR [label="1× ok", `,
		`RC_RESET -> RC_INIT [label="4×\nACCESS_FLAGS\nPKEY_INDEX\nPORT", tooltip="optional: none", penwidth=4];`,
	} {
		if !strings.Contains(out2, want) {
			t.Errorf("--dot of two types lacks %q:\n%s", want, out2)
		}
	}
	dot, err := exec.LookPath("dot")
	testenv.Require(t, err == nil, "graphviz is not installed (apt-get install graphviz)")
	for _, graph := range []string{out, out2} {
		cmd := exec.Command(dot, "-Tsvg")
		cmd.Stdin = strings.NewReader(graph)
		var svg, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &svg, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() != 0 {
			t.Fatalf("dot -Tsvg: %v\n%s\n%s", err, stderr.String(), graph)
		}
		if !bytes.Contains(svg.Bytes(), []byte("<svg")) {
			t.Errorf("dot -Tsvg wrote no SVG")
		}
	}
}

func TestCoverageUsage(t *testing.T) {
	for _, args := range [][]string{{"coverage"}, {"coverage", "--json", "--dot", "x.json"}} {
		if code, _, _ := runCmd(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	code, _, errs := runCmd(t, "coverage", filepath.Join(t.TempDir(), "missing.json"))
	if code != 1 || !strings.Contains(errs, "missing.json") {
		t.Errorf("missing file: exit %d, stderr %q", code, errs)
	}
}

// The profile's transport counters are the devices' NAK, RNR and retry
// counters summed: under loss, RC retries, and the profile says how often
// exactly as the counters loopback prints do.
func TestCoverageTransportCountersUnderLoss(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loss.json")
	code, out, errs := runCmd(t, "loopback", "--seed", "5", "--coverage", path, "-test", "rc", "-n", "30", "--loss", "0.2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	printed := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, " counters: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		for i := 0; i+1 < len(f); i += 2 {
			var v uint64
			if _, err := fmt.Sscan(f[i+1], &v); err != nil {
				t.Fatalf("counter line %q: %v", line, err)
			}
			printed[f[i]] += v
		}
	}
	p, err := coverage.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if printed["completer_retry_err"] == 0 {
		t.Fatalf("no retry under 20%% loss:\n%s", out)
	}
	for _, c := range coverage.TransportCounters {
		if p.Transport[c.Name] != printed[c.Name] {
			t.Errorf("%s: profile %d, loopback printed %d in all", c.Name, p.Transport[c.Name], printed[c.Name])
		}
	}
}
