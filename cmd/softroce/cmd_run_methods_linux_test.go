package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/uverbs"
	"github.com/softroce/softroce/uverbsd"
)

// The methods ibv_rc_pingpong and ib_write_bw call on kernel rxe, as
// conformance/peer recorded them with its ioctl tracer (the same on 6.1
// with rdma-core 44 and 6.12 with rdma-core 56): "== TOOL server" or
// "client", then "OBJECT METHOD WRITE_CMD ERRNO" lines.
const (
	methodsKernel61  = "../../conformance/peer/testdata/verbs_methods.kernel-6.1.txt"
	methodsKernel612 = "../../conformance/peer/testdata/verbs_methods.kernel-6.12.txt"
)

// methodRuns are conformance/peer's MethodRuns on a device of ours:
// each tool's arguments (the client's add 127.0.0.1) and what the
// server and the client print.
var methodRuns = []struct {
	tool               string
	args               func(dev string) []string
	serverWant, client string
}{
	{"ibv_rc_pingpong", func(dev string) []string { return []string{"-d", dev, "-g", "1", "-n", "10", "-p", "18515"} }, "bytes in", "bytes in"},
	{"ib_write_bw", func(dev string) []string { return []string{"-d", dev, "-x", "1", "-n", "50", "-F", "-p", "18516"} }, "#bytes", "#bytes"},
}

// kernelMethods reads a recording: for each "TOOL server|client", the
// calls as "NAME ERRNO" (uverbs.MethodNameOf).
func kernelMethods(t *testing.T, file string) map[string][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runs := map[string][]string{}
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "== "); ok {
			cur = name
			continue
		}
		var obj, method uint16
		var cmd int64
		var errno int
		if _, err := fmt.Sscanf(line, "%d %d %d %d", &obj, &method, &cmd, &errno); err != nil || cur == "" {
			t.Fatalf("%s: line %q", file, line)
		}
		runs[cur] = append(runs[cur], uverbs.MethodNameOf(obj, method, cmd)+" "+strconv.Itoa(errno))
	}
	return runs
}

// daemonMethods returns the daemon's method log: the calls of each pid
// as "NAME ERRNO", and the pids in the order of their first call.
func daemonMethods(t *testing.T, dir string, skip int) (map[string][]string, []string, int) {
	t.Helper()
	out, err := uverbsd.Control(dir, "methods", "log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if out == "" {
		lines = nil
	}
	calls := map[string][]string{}
	var pids []string
	for _, l := range lines[min(skip, len(lines)):] {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("methods log line %q", l)
		}
		if _, ok := calls[f[0]]; !ok {
			pids = append(pids, f[0])
		}
		calls[f[0]] = append(calls[f[0]], f[1]+" "+f[2])
	}
	return calls, pids, len(lines)
}

// daemonDir is the directory of the daemon env names.
func daemonDir(t *testing.T, env []string) string {
	t.Helper()
	for _, kv := range env {
		if sock, ok := strings.CutPrefix(kv, "SOFTROCE_SOCK="); ok {
			return filepath.Dir(sock)
		}
	}
	t.Fatalf("no SOFTROCE_SOCK in %q", env)
	return ""
}

// checkMethods runs each of methodRuns with start and compares the
// daemon's method log of its server (the first pid) and its client (the
// last: a client started before the server listened is retried) with
// the kernel's.
func checkMethods(t *testing.T, start func(argv ...string) *exec.Cmd, toolPath func(string) string, dir, dev string, want map[string][]string) {
	t.Helper()
	for _, r := range methodRuns {
		t.Run(r.tool, func(t *testing.T) {
			_, _, before := daemonMethods(t, dir, 0)
			args := r.args(dev)
			serverClient(t, start, toolPath(r.tool), args, append(args, "127.0.0.1"), "Couldn't connect", r.serverWant, r.client)
			calls, pids, _ := daemonMethods(t, dir, before)
			// The processes that ran to the end (the last call is the
			// kernel's last): the first is the server, the last the
			// client; a client tried before the server listened ends
			// early.
			last := want[r.tool+" server"][len(want[r.tool+" server"])-1]
			var done []string
			for _, p := range pids {
				if c := calls[p]; len(c) > 0 && c[len(c)-1] == last {
					done = append(done, p)
				}
			}
			if len(done) < 2 {
				t.Fatalf("the daemon logged %d processes that ran to their end (%q), want a server and a client: %v", len(done), last, calls)
			}
			// The server starts first, but on a loaded machine the
			// client's first call can come before the server's: the
			// two are told apart by what they called.
			first, second := strings.Join(calls[done[0]], "\n"), strings.Join(calls[done[len(done)-1]], "\n")
			server, client := strings.Join(want[r.tool+" server"], "\n"), strings.Join(want[r.tool+" client"], "\n")
			if first == client && second == server {
				first, second = second, first
			}
			for _, c := range []struct{ who, got, kernel string }{{"server", first, server}, {"client", second, client}} {
				if c.got != c.kernel {
					t.Errorf("%s %s: the daemon's methods\n%s\nkernel rxe's\n%s", r.tool, c.who, c.got, c.kernel)
				}
			}
		})
	}
}

// TestVerbsMethodsAsOnKernel: Debian 12's ibv_rc_pingpong and ib_write_bw,
// as nobody on one daemon, take the ioctl ABI and call the uverbs methods
// kernel rxe's libibverbs calls, in its order and with its results (the
// daemon's method log against conformance/peer's recording); with
// SOFTROCE_VERBS_ABI=write they run on the write() ABI and call none.
func TestVerbsMethodsAsOnKernel(t *testing.T) {
	needCC(t)
	want := kernelMethods(t, methodsKernel61)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe27", "--ip", "10.78.0.1/24", perftestMemlock)
	dir := daemonDir(t, env)
	distro := func(tool string) string {
		pkg := "ibverbs-utils"
		if strings.HasPrefix(tool, "ib_") {
			pkg = "perftest"
		}
		return distroTool(t, tool, pkg)
	}
	checkMethods(t, userStarts(t, home, env), distro, dir, "rxe27", want)

	t.Run("write ABI", func(t *testing.T) {
		_, _, before := daemonMethods(t, dir, 0)
		writeEnv := append(append([]string(nil), env...), "SOFTROCE_VERBS_ABI=write")
		pair(t, userStarts(t, home, writeEnv), distro("ibv_rc_pingpong"), pingpongArgs("rxe27", 18520, 0, nil), "bytes in", "bytes in")
		if calls, _, _ := daemonMethods(t, dir, before); len(calls) != 0 {
			t.Errorf("SOFTROCE_VERBS_ABI=write: the programs called ioctl methods: %v", calls)
		}
	})
}

// TestTrixieVerbsMethodsAsOnKernel: TestVerbsMethodsAsOnKernel with
// Debian 13's tools (rdma-core 56, perftest 25.01) in the chroot, against
// the 6.12 VM's recording.
func TestTrixieVerbsMethodsAsOnKernel(t *testing.T) {
	want := kernelMethods(t, methodsKernel612)
	c := serveForTrixie(t, "rxe28", "--ip", "10.78.0.1/24", perftestMemlock)
	checkMethods(t, func(argv ...string) *exec.Cmd { return c.command(t, argv...) },
		func(tool string) string { return "/usr/bin/" + tool }, c.dir, "rxe28", want)
}
