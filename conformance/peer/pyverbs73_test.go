package peer

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/testenv"
)

// pyverbs73 holds the per-test results of rdma-core 65's own suite
// (python3-pyverbs: /usr/share/doc/rdma-core/tests) on the Forky VM's rxe
// 7.3, run as root: "NAME (CLASS) ... RESULT" lines in the suite's order.
const pyverbs73 = "testdata/rxe-7.3.pyverbs.txt"

// pyverbsTree is the Debian 14 tree the suite runs in: pyverbs, its
// Python, iproute2 (the suite's rdma_cm setup runs `rdma link` and `ip
// addr`) and coreutils (test_get_pkey_index runs cat).
func pyverbsTree() debroot.Config {
	return debroot.Config{Suite: "forky", Packages: []string{"python3-pyverbs", "python3", "iproute2", "coreutils"}}
}

// pyverbsResult matches a result of unittest -v: the test's name and
// class, an optional docstring line, " ... ", and its result, on the next
// line when the test printed something of its own after the dots.
var pyverbsResult = regexp.MustCompile(`(?m)^(test\w*) \(([\w.]+)\)\n?(?:[^\n]*?) \.\.\. (?:[^\n]*\n)?(ok|skipped.*|FAIL|ERROR|expected failure|unexpected success)$`)

// pyverbsResults returns the result lines of a unittest -v log.
func pyverbsResults(log string) []string {
	var out []string
	for _, m := range pyverbsResult.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1]+" ("+m[2]+") ... "+m[3])
	}
	return out
}

// TestKernelPyverbsForky runs rdma-core 65's suite in the Forky VM (a
// Debian 14 tree in /chroot of the run archive) against rxe 7.3: no test
// fails or errs, and the results are those of pyverbs73.
// SOFTROCE_RECORD=1 records them anew.
func TestKernelPyverbsForky(t *testing.T) {
	testenv.RequireRoot(t)
	img := buildTestImageFor(t, Forky)
	tr := debroot.ForTest(t, pyverbsTree())
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	con, err := os.Create(filepath.Join(dir, "vm1.console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	ip4, ip6 := lab.PeerAddr(1)
	vm, err := lab.StartVM(ctx, VMConfig{Image: img, Name: "vm1", IP: ip4, IP6: ip6,
		Console: con, Memory: 1536, Chroot: tr.Dir, Timeout: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Kill(); <-vm.Done() })
	if _, err := vm.WaitConsole(ctx, markerAgent); err != nil {
		t.Fatal(err)
	}
	const suite = "/usr/share/doc/rdma-core/tests"
	r, err := vm.Run(ctx, "mount --bind /dev /chroot/dev && mount -t proc proc /chroot/proc && mount -t sysfs sysfs /chroot/sys && "+
		"cp -r /chroot"+suite+" /chroot/tmp/tests && gunzip /chroot/tmp/tests/*.gz && "+
		"cd /chroot/tmp && chroot /chroot /usr/bin/python3 /tmp/tests/run_tests.py --dev rxe0 --gid 1 -v 2>&1")
	if err != nil {
		t.Fatal(err)
	}
	log := strings.ReplaceAll(r.Output, "\r", "")
	os.WriteFile(filepath.Join(dir, "pyverbs.log"), []byte(log), 0o644)
	res := pyverbsResults(log)
	if m := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindStringSubmatch(log); m == nil || m[1] != strconv.Itoa(len(res)) {
		t.Errorf("%d result lines read, the suite says %v", len(res), m)
	}
	var passed int
	for _, l := range res {
		if strings.HasSuffix(l, " ... ok") {
			passed++
		}
		if strings.HasSuffix(l, " ... FAIL") || strings.HasSuffix(l, " ... ERROR") {
			t.Errorf("on rxe 7.3: %s", l)
		}
	}
	if r.Status != 0 || passed < 100 {
		t.Fatalf("the suite: status %d, %d passed of %d; log in %s\n%s", r.Status, passed, len(res), dir, log)
	}
	got := strings.Join(res, "\n") + "\n"
	if os.Getenv("SOFTROCE_RECORD") == "1" {
		if err := os.WriteFile(pyverbs73, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(pyverbs73)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("rdma-core 65's suite on rxe 7.3 changed:\n%s\nrecorded:\n%s", got, want)
	}
}
