package main

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// TestRDMACoreTestSuiteOnTheDaemon: rdma-core's own test suite, as Debian
// ships it with pyverbs (python3-pyverbs: /usr/share/doc/rdma-core/tests),
// run unprivileged through softroce run on the distribution's Python:
// every test passes or skips for a reason the suite gives (another
// vendor's device, a feature rxe lacks), none fails or errs, and the
// traffic tests of rxe's verbs pass (RC and UD SENDs, RDMA WRITE and READ,
// atomics, ATOMIC_WRITE through the ibv_wr_* API, SRQs, memory windows,
// and on ODP MRs RC and UD SENDs, SRQs, RDMA WRITE and READ, atomics).
func TestRDMACoreTestSuiteOnTheDaemon(t *testing.T) {
	needCC(t)
	const suite = "/usr/share/doc/rdma-core/tests"
	out, err := exec.Command("dpkg", "-S", suite+"/run_tests.py").Output()
	testenv.Require(t, err == nil && strings.HasPrefix(string(out), "python3-pyverbs:"),
		"rdma-core's test suite is not installed (Debian package python3-pyverbs)")
	mods, _ := filepath.Glob("/usr/lib/python3/dist-packages/pyverbs/device.*.so")
	if len(mods) == 0 {
		t.Fatal("pyverbs has no device module (Debian package python3-pyverbs)")
	}
	if out, err := exec.Command("ldd", mods[0]).Output(); err != nil || !strings.Contains(string(out), "libibverbs.so.1 => ") {
		t.Fatalf("ldd %s shows no libibverbs (%v):\n%s", mods[0], err, out)
	}
	home := userHome(t)
	dir := filepath.Join(home, "rdma-core", "tests")
	copySuite(t, suite, dir)
	cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe33", "--ip", "10.78.0.1/24", "--",
		"/usr/bin/python3", filepath.Join(dir, "run_tests.py"), "--dev", "rxe33", "--gid", "1", "-v")
	cmd.Dir = filepath.Dir(dir)
	res, err := cmd.CombinedOutput()
	log := string(res)
	bad := regexp.MustCompile(`(?m)^(FAIL|ERROR): .*$`).FindAllString(log, -1)
	if err != nil || len(bad) > 0 {
		t.Fatalf("rdma-core's tests: %v; failed:\n%s\n\n%s", err, strings.Join(bad, "\n"), log)
	}
	passed := regexp.MustCompile(`(?m) \.\.\. ok$`).FindAllString(log, -1)
	for _, want := range []string{
		"test_qp_ex_rc_send ", "test_qp_ex_ud_send ", "test_qp_ex_rc_rdma_write ", "test_qp_ex_rc_rdma_read ",
		"test_qp_ex_rc_atomic_cmp_swp ", "test_qp_ex_rc_atomic_fetch_add ", "test_qp_ex_rc_atomic_write ",
		"Test ibv_query_gid_table() ", "Test ibv_query_gid_ex() with an empty index ",
		// On-demand paging MRs, as on rxe 6.15 and later.
		"test_odp_rc_traffic ", "test_odp_rc_srq_traffic ", "test_odp_ud_traffic ", "test_odp_rc_rdma_write ",
		"test_odp_rc_rdma_read ", "test_odp_rc_atomic_cmp_and_swp ", "test_odp_rc_atomic_fetch_and_add ",
	} {
		// A test prints its name, or its docstring's first line.
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `.*\.\.\. ok$`).MatchString(log) {
			t.Errorf("%sdid not pass", want)
		}
	}
	if len(passed) < 80 {
		t.Errorf("%d tests passed, want at least 80 (rdma-core 44's suite on rxe)", len(passed))
	}
	if t.Failed() {
		t.Log(log)
	}
}

// copySuite copies the suite's files from src to dst, unpacking those
// Debian compressed (.py.gz), readable by the user of userHome.
func copySuite(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		name := e.Name()
		if n, ok := strings.CutSuffix(name, ".gz"); ok {
			zr, err := gzip.NewReader(in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r, name = zr, n
		}
		b, err := io.ReadAll(r)
		in.Close()
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
