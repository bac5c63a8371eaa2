package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/debroot"
)

var updatePyverbs = flag.Bool("update-pyverbs", false, "rewrite testdata/"+pyverbsSoftroce+" from this run of rdma-core 65's suite")

// The recorded results of rdma-core 65's pyverbs suite: on softroce (this
// package's run, with -update-pyverbs), and on kernel rxe 7.3 in the peer
// VM (conformance/peer's run; the file comes from there, in this format).
const (
	pyverbsSoftroce = "pyverbs65-softroce.txt"
)

// pyResult is one test's outcome: "ok", "FAIL", "ERROR", "skipped",
// "expected failure" or "unexpected success", with the reason a skip, an
// error or a failure gives (its exception's last line).
type pyResult struct{ result, reason string }

// pyHeader starts unittest's verbose report of one test: its name and id;
// then perhaps its docstring's first line, " ... ", and the outcome, which
// what the test's programs print may push to a line of its own.
var (
	pyHeader  = regexp.MustCompile(`^\w+ \(([\w.]+)\)`)
	pyOutcome = regexp.MustCompile(`^(ok|FAIL|ERROR|expected failure|unexpected success|skipped (.*))$`)
)

// parsePyverbs returns the outcome of every test in unittest -v output.
func parsePyverbs(log string) map[string]pyResult {
	res := make(map[string]pyResult)
	var cur string // the test whose outcome is due
	var dots bool  // its " ... " is seen
	for _, l := range strings.Split(log, "\n") {
		if m := pyHeader.FindStringSubmatchIndex(l); m != nil {
			cur, dots, l = l[m[2]:m[3]], false, l[m[1]:]
		}
		if cur == "" {
			continue
		}
		if !dots {
			i := strings.Index(l, " ... ")
			if i < 0 {
				continue
			}
			dots, l = true, l[i+len(" ... "):]
		}
		m := pyOutcome.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		r := pyResult{result: m[1]}
		if strings.HasPrefix(m[1], "skipped ") {
			r = pyResult{result: "skipped", reason: strings.Trim(m[2], `'"`)}
		}
		res[cur] = r
		cur = ""
	}
	// The report of each error and failure at the end: its exception's
	// last line is the reason.
	for _, block := range strings.Split(log, "\n"+strings.Repeat("=", 70)+"\n")[1:] {
		m := pyReport.FindStringSubmatch(block)
		if m == nil {
			continue
		}
		if r, ok := res[m[2]]; !ok || r.result != m[1] {
			continue
		}
		r := res[m[2]]
		block, _, _ = strings.Cut(block, "\n"+strings.Repeat("-", 70)+"\nRan ")
		lines := strings.Split(strings.TrimSpace(block), "\n")
		r.reason = strings.TrimSpace(lines[len(lines)-1])
		res[m[2]] = r
	}
	return res
}

// pyReport starts the report of an error or failure.
var pyReport = regexp.MustCompile(`^(ERROR|FAIL): \w+ \(([\w.]+)\)`)

// formatPyverbs is the testdata format: one test a line, "ID\tRESULT" or
// "ID\tskipped\tREASON", sorted by id.
func formatPyverbs(res map[string]pyResult) string {
	ids := make([]string, 0, len(res))
	for id := range res {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		r := res[id]
		if r.reason != "" {
			fmt.Fprintf(&b, "%s\t%s\t%s\n", id, r.result, strings.NewReplacer("\n", " ", "\t", " ").Replace(r.reason))
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", id, r.result)
		}
	}
	return b.String()
}

// readPyverbs reads a testdata file of formatPyverbs.
func readPyverbs(t *testing.T, name string) (map[string]pyResult, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		return nil, err
	}
	res := make(map[string]pyResult)
	for i, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.SplitN(l, "\t", 3)
		if len(f) < 2 {
			t.Fatalf("%s:%d: %q is not ID\\tRESULT", name, i+1, l)
		}
		r := pyResult{result: f[1]}
		if len(f) == 3 {
			r.reason = f[2]
		}
		res[f[0]] = r
	}
	return res, nil
}

// lostTests are the tests that pass in ref and do not in got, each with
// what it does in got.
func lostTests(ref, got map[string]pyResult) []string {
	var lost []string
	for id, r := range ref {
		if r.result != "ok" {
			continue
		}
		if g, ok := got[id]; !ok {
			lost = append(lost, id+": did not run")
		} else if g.result != "ok" {
			lost = append(lost, strings.TrimSpace(id+": "+g.result+" "+g.reason))
		}
	}
	sort.Strings(lost)
	return lost
}

func countPyverbs(res map[string]pyResult) map[string]int {
	n := make(map[string]int)
	for _, r := range res {
		n[r.result]++
	}
	return n
}

func TestParsePyverbs(t *testing.T) {
	const log = `test_a (tests.test_x.X.test_a) ... ok
test_b (tests.test_x.X.test_b)
Test the b thing ... skipped 'No ODP caps'
test_c (tests.test_x.X.test_c) ... FAIL
test_d (tests.test_y.Y.test_d) ... ERROR
test_e (tests.test_y.Y.test_e) ... skipped "Device rxe0 doesn't have net interface"
test_f (tests.test_y.Y.test_f) ... Failed to open NETLINK_RDMA socket
ERROR
test_g (tests.test_y.Y.test_g)
A docstring. ... some output
more output
ok
noise ... ok

======================================================================
ERROR: test_f (tests.test_y.Y.test_f)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "x.py", line 1, in f
subprocess.CalledProcessError: Command 'rdma' returned non-zero exit status 1.

======================================================================
FAIL: test_c (tests.test_x.X.test_c)
----------------------------------------------------------------------
AssertionError: 1 != 2

----------------------------------------------------------------------
Ran 7 tests in 1.000s
`
	got := parsePyverbs(log)
	want := map[string]pyResult{
		"tests.test_x.X.test_a": {"ok", ""},
		"tests.test_x.X.test_b": {"skipped", "No ODP caps"},
		"tests.test_x.X.test_c": {"FAIL", "AssertionError: 1 != 2"},
		"tests.test_y.Y.test_d": {"ERROR", ""},
		"tests.test_y.Y.test_e": {"skipped", "Device rxe0 doesn't have net interface"},
		"tests.test_y.Y.test_f": {"ERROR", "subprocess.CalledProcessError: Command 'rdma' returned non-zero exit status 1."},
		"tests.test_y.Y.test_g": {"ok", ""},
	}
	if formatPyverbs(got) != formatPyverbs(want) {
		t.Errorf("parsePyverbs:\n%s\nwant:\n%s", formatPyverbs(got), formatPyverbs(want))
	}
	ref := map[string]pyResult{"a": {"ok", ""}, "b": {"ok", ""}, "c": {"skipped", "x"}, "d": {"ok", ""}}
	lost := lostTests(ref, map[string]pyResult{"a": {"ok", ""}, "b": {"skipped", "No ODP caps"}, "c": {"FAIL", ""}})
	if w := []string{"b: skipped No ODP caps", "d: did not run"}; strings.Join(lost, "|") != strings.Join(w, "|") {
		t.Errorf("lostTests = %q, want %q", lost, w)
	}
}

// runForkyPyverbs runs rdma-core 65's test suite (python3-pyverbs ships it
// in /usr/share/doc/rdma-core/tests, partly gzipped) on Debian 14's
// python3.14 and pyverbs, unprivileged under `softroce run` on the default
// in-memory link, and returns unittest's output.
func runForkyPyverbs(t *testing.T) string {
	t.Helper()
	tree := debroot.ForTest(t, debroot.ForkyRDMA())
	debroot.RequireUserArgv(t)
	needCC(t)
	home := userHome(t)
	dir := filepath.Join(home, "suite")
	copySuite(t, filepath.Join(tree.Dir, "usr/share/doc/rdma-core/tests"), filepath.Join(dir, "tests"))
	line, err := tree.UserArgv([]debroot.Bind{{Host: dir, Path: "/run/suite"}}, forkyEnv, forkyVars,
		"/usr/bin/python3", "/run/suite/tests/run_tests.py", "--dev", "rxe67", "--gid", "1", "-v")
	if err != nil {
		t.Fatal(err)
	}
	cmd := userCommand(t, home, nil, "softroce", append([]string{"run", "-d", "rxe67", "--ip", "10.78.0.1/24", "--"}, line...)...)
	timer := time.AfterFunc(15*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	if len(parsePyverbs(string(out))) == 0 {
		t.Fatalf("rdma-core 65's suite ran no test (%v):\n%s", err, out)
	}
	return string(out)
}

// TestForkyPyverbsSuiteUnderRun: rdma-core 65's own suite under softroce
// run, unprivileged: no test that passed in the recorded run
// (testdata/pyverbs65-softroce.txt) fails, errs or skips now. With
// -update-pyverbs it rewrites that file from this run.
func TestForkyPyverbsSuiteUnderRun(t *testing.T) {
	log := runForkyPyverbs(t)
	got := parsePyverbs(log)
	t.Logf("rdma-core 65's suite on softroce: %v; %s", countPyverbs(got),
		strings.Join(regexp.MustCompile(`(?m)^(Ran \d+ tests.*|OK.*|FAILED.*)$`).FindAllString(log, -1), "; "))
	if m := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindStringSubmatch(log); m == nil || m[1] != strconv.Itoa(len(got)) {
		t.Fatalf("unittest's summary %q, %d outcomes read: the suite did not end or its output was not understood\n%s", m, len(got), log)
	}
	if *updatePyverbs {
		if err := os.WriteFile(filepath.Join("testdata", pyverbsSoftroce), []byte(formatPyverbs(got)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote testdata/%s", pyverbsSoftroce)
	}
	ref, err := readPyverbs(t, pyverbsSoftroce)
	if err != nil {
		t.Fatal(err)
	}
	if lost := lostTests(ref, got); len(lost) > 0 {
		t.Errorf("%d tests that passed in testdata/%s do not now:\n%s\n\n%s", len(lost), pyverbsSoftroce, strings.Join(lost, "\n"), log)
	}
}
