package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/check"
	"github.com/softroce/softroce/internal/testenv"
)

// checkPrograms are testdata/check's programs, each committing one
// misuse, and the findings softroce run --check gives each (its "fixed"
// twin gets none).
var checkPrograms = []struct {
	prog  string
	name  check.Name
	count int // findings of that name (one per object)
}{
	{"leak", check.Leak, 5}, // PD, CQ, MR, two QPs
	{"qp_destroyed_busy", check.QPDestroyedBusy, 1},
	{"mr_deregistered_busy", check.MRDeregisteredBusy, 1},
	{"cq_overflow", check.CQOverflow, 1},
	{"sq_never_reclaimed", check.SQNeverReclaimed, 1},
	{"error_completion_ignored", check.ErrorIgnored, 1},
	{"post_to_error_qp", check.PostToErrorQP, 1},
	{"receive_starvation", check.ReceiveStarved, 2}, // b's receive queue, the SRQ
	{"cq_can_overflow", check.CQMayOverflow, 1},
	{"send_buffer_changed", check.SendBufferChanged, 1},
}

// buildCheckProgram builds testdata/check/NAME.c into dir.
func buildCheckProgram(t *testing.T, dir, name string) string {
	t.Helper()
	needCC(t)
	_, err := os.Stat("/usr/include/infiniband/verbs.h")
	testenv.Require(t, err == nil, "libibverbs' headers are not installed (Debian package libibverbs-dev)")
	bin := filepath.Join(dir, name)
	out, err := exec.Command("cc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "check", name+".c"), "-libverbs").CombinedOutput()
	if err != nil {
		t.Fatalf("cc %s.c: %v\n%s", name, err, out)
	}
	return bin
}

// runChecked runs prog with args through softroce run --check=fail as a
// user and returns its findings (--check-out), its exit status and its
// output.
func runChecked(t *testing.T, home, dev, ip string, flags []string, prog string, args ...string) ([]check.Finding, int, string) {
	t.Helper()
	out := filepath.Join(home, "run", "findings.json") // the user's own directory
	os.Remove(out)
	line := append([]string{"run", "-d", dev, "--ip", ip, "--check=fail", "--check-out", out}, flags...)
	line = append(append(line, "--", prog), args...)
	cmd := userCommand(t, home, nil, "softroce", line...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", prog, err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("%s %v: no --check-out file (%v); output:\n%s", prog, args, err, b.String())
	}
	defer f.Close()
	found, err := check.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	return found, code, b.String()
}

// TestCheckFindsEachMisuseAndNotItsFix: each program of testdata/check,
// run as a user through softroce run --check=fail, gets exactly its
// finding (and exit status 66), and its fixed twin none (exit status 0).
func TestCheckFindsEachMisuseAndNotItsFix(t *testing.T) {
	home := userHome(t)
	for i, c := range checkPrograms {
		t.Run(c.prog, func(t *testing.T) {
			prog := buildCheckProgram(t, home, c.prog)
			dev, ip := fmt.Sprintf("rxe4%d", i), fmt.Sprintf("10.78.%d.1/24", 40+i)
			found, code, out := runChecked(t, home, dev, ip, nil, prog)
			if code != checkFailStatus {
				t.Errorf("misuse: exit status %d, want %d; output:\n%s", code, checkFailStatus, out)
			}
			n := 0
			for _, f := range found {
				if f.Name != c.name {
					t.Errorf("misuse: finding %s on %s (%s), want only %s", f.Name, f.Object, f.Detail, c.name)
					continue
				}
				n++
				if f.Count < 1 || f.First.IsZero() || f.Object == "" || f.Program == "" {
					t.Errorf("misuse: finding without its object, count or first occurrence: %+v", f)
				}
			}
			if n != c.count {
				t.Errorf("misuse: %d findings %s, want %d; output:\n%s", n, c.name, c.count, out)
			}
			if !strings.Contains(out, "ok done") || !strings.Contains(out, string(c.name)+": ") {
				t.Errorf("misuse: the program did not finish, or the report does not name %s:\n%s", c.name, out)
			}
			found, code, out = runChecked(t, home, dev, ip, nil, prog, "fixed")
			if code != 0 || len(found) != 0 || !strings.Contains(out, "ok done") {
				t.Errorf("fixed: exit status %d, findings %+v; output:\n%s", code, found, out)
			}
		})
	}
}

// TestPostsBeyondTheCapsAreRefusedAsOnRxe: testdata/verbs_post_limits.c
// through softroce run --check=fail as a user: a send WR with more SGEs
// than max_send_sge, inline data beyond max_inline_data and a receive WR
// with more SGEs than max_recv_sge are refused (by librxe, as on kernel
// rxe) and send nothing; softroce is not more permissive there, and the
// check finds nothing.
func TestPostsBeyondTheCapsAreRefusedAsOnRxe(t *testing.T) {
	home := userHome(t)
	prog := buildVerbsProgram(t, home, "verbs_post_limits")
	found, code, out := runChecked(t, home, "rxe39", "10.78.39.1/24", nil, prog)
	if code != 0 || len(found) != 0 {
		t.Fatalf("exit status %d, findings %+v; output:\n%s", code, found, out)
	}
	for _, want := range []string{
		"ok a send WR beyond max_send_sge is refused",
		"ok inline data beyond max_inline_data is refused",
		"ok a receive WR beyond max_recv_sge is refused",
		"ok a post within the capacities completes, alone",
		"ok done",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestCheckIgnoreSuppressesByName: --check-ignore NAME drops that
// finding, and with nothing left softroce run exits with the program's 0.
func TestCheckIgnoreSuppressesByName(t *testing.T) {
	home := userHome(t)
	prog := buildCheckProgram(t, home, "leak")
	found, code, out := runChecked(t, home, "rxe49", "10.78.49.1/24", []string{"--check-ignore", "leak"}, prog)
	if code != 0 || len(found) != 0 {
		t.Fatalf("exit status %d, findings %+v; output:\n%s", code, found, out)
	}
	// An unknown name is refused before anything runs.
	cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe49", "--check-ignore", "no-such", "--", "true")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), `no finding is named "no-such"`) {
		t.Fatalf("unknown --check-ignore: %v\n%s", err, b)
	}
}

// TestCheckWarnReportsAndKeepsTheExitStatus: --check (warn) prints the
// report but softroce run exits with the program's status.
func TestCheckWarnReportsAndKeepsTheExitStatus(t *testing.T) {
	home := userHome(t)
	prog := buildCheckProgram(t, home, "leak")
	cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe48", "--ip", "10.78.48.1/24", "--check", "--", prog)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--check (warn): %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "softroce check: 5 findings") ||
		!slices.ContainsFunc(strings.Split(string(b), "\n"), func(l string) bool { return strings.HasPrefix(l, "leak (") }) {
		t.Fatalf("no report of the 5 leaks with the explanation:\n%s", b)
	}
}

// checkedStarts returns a start function for serverClient that runs each
// program through softroce run --check=fail on the serving daemon dev,
// with --check-ignore for each name of ignore.
func checkedStarts(t *testing.T, home, dev string, ignore ...check.Name) func(argv ...string) *exec.Cmd {
	return checkedStartsEnv(t, home, dev, nil, ignore...)
}

// checkedStartsEnv is checkedStarts with env added to the programs'
// environment.
func checkedStartsEnv(t *testing.T, home, dev string, env []string, ignore ...check.Name) func(argv ...string) *exec.Cmd {
	return func(argv ...string) *exec.Cmd {
		line := []string{"run", "-d", dev, "--check=fail"}
		for _, n := range ignore {
			line = append(line, "--check-ignore", string(n))
		}
		return userCommand(t, home, env, "softroce", append(append(line, "--"), argv...)...)
	}
}

// TestCheckFindsNothingInTheDebianTools: Debian's pingpongs, perftest's
// eight tools and librdmacm's examples, each side through softroce run
// --check=fail on a serve --check daemon, exit 0: no findings, but for
// the real misuses docs/testing-your-program.md shows from their
// sources (ignored here by name, on those programs alone):
// ibv_srq_pingpong destroys its QPs with sends in flight
// (qp-destroyed-busy), ib_send_bw's client leaks its receive CQ and
// ib_atomic_lat's server everything (leak).
func TestCheckFindsNothingInTheDebianTools(t *testing.T) {
	needCC(t)
	home := userHome(t)
	const dev = "rxe47"
	serveAsUser(t, home, dev, "--ip", "10.78.47.1/24", "--check=fail", perftestMemlock)
	type tc struct {
		tool, pkg              string
		server, client         []string
		serverWant, clientWant string
		ignore                 []check.Name
	}
	port := 19470
	next := func() string { port++; return strconv.Itoa(port) }
	var cases []tc
	for _, pp := range []string{"rc", "uc", "ud", "srq"} {
		p := next()
		args := []string{"-d", dev, "-g", "1", "-n", "200", "-c", "-p", p}
		c := tc{"ibv_" + pp + "_pingpong", "ibverbs-utils", args, append(slices.Clone(args), "127.0.0.1"), "bytes in", "bytes in", nil}
		if pp == "srq" {
			c.ignore = []check.Name{check.QPDestroyedBusy}
		}
		cases = append(cases, c)
	}
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw",
		"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
		args, serverWant := perftestRun(perftestCase{tool, []string{"-n", "200"}}, dev, port+1, 0)
		next()
		c := tc{tool, "perftest", args, append(slices.Clone(args), "127.0.0.1"), serverWant, "#bytes", nil}
		if tool == "ib_send_bw" || tool == "ib_atomic_lat" {
			c.ignore = []check.Name{check.Leak}
		}
		cases = append(cases, c)
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			path := distroTool(t, c.tool, c.pkg)
			start := checkedStarts(t, home, dev, c.ignore...)
			sout, cout := serverClient(t, start, path, c.server, c.client, "Couldn't connect", c.serverWant, c.clientWant)
			for _, out := range []string{sout, cout} {
				if !strings.Contains(out, "softroce check: no findings") {
					t.Errorf("no report of no findings:\n%s", out)
				}
			}
		})
	}
	// librdmacm's examples, their clients started once the server
	// listens (cmPairWith), which requires both to exit 0: no findings.
	const ip = "10.78.47.1"
	run := func(tool string, args ...string) *exec.Cmd {
		return checkedStarts(t, home, dev)(append([]string{tool}, args...)...)
	}
	for _, c := range []struct {
		server, client         string
		sargs, cargs           []string
		serverWant, clientWant string
	}{
		{"rping", "rping", []string{"-s", "-a", ip, "-p", next(), "-C", "10", "-v"}, []string{"-c", "-a", ip, "-C", "10", "-v"}, "", "ping data: rdma-ping-9"},
		{"ucmatose", "ucmatose", []string{"-b", ip, "-p", next()}, []string{"-s", ip}, "return status 0", "return status 0"},
		{"rdma_server", "rdma_client", []string{"-s", ip, "-p", next()}, []string{"-s", ip}, "rdma_server: end 0", "rdma_client: end 0"},
	} {
		t.Run(c.server, func(t *testing.T) {
			server := distroRDMACMTool(t, c.server, "rdmacm-utils")
			client := distroRDMACMTool(t, c.client, "rdmacm-utils")
			port := serverPort(c.server, c.sargs)
			cmPairWith(t, cmDaemon(t, home, dev, run), server, client, c.sargs, append(c.cargs, "-p", port), port, c.serverWant, c.clientWant)
		})
	}
}

// TestCheckFindsNothingInUCXAndLibfabric: UCX's ucx_perftest over
// rc_verbs (active messages, zero-copy PUT) and libfabric's fi_pingpong
// over the verbs provider's datagram endpoint, each side through softroce
// run --check=fail on a serve --check daemon, exit 0 with no findings.
func TestCheckFindsNothingInUCXAndLibfabric(t *testing.T) {
	needCC(t)
	home := userHome(t)
	const dev = "rxe45"
	serveAsUser(t, home, dev, "--ip", "10.78.45.1/24", "--check=fail", perftestMemlock)
	t.Run("ucx_perftest", func(t *testing.T) {
		perftest := distroModuleUser(t, "ucx_perftest", "ucx-utils", "/usr/lib/*/ucx/libuct_ib.so.0", "libucx0")
		start := checkedStartsEnv(t, home, dev, []string{"UCX_IB_ETH_PAUSE_ON=y"})
		for i, c := range [][]string{{"am_lat", "short", "64"}, {"put_bw", "zcopy", "65536"}} {
			args := []string{"-d", dev + ":1", "-x", "rc_verbs", "-t", c[0], "-D", c[1], "-s", c[2], "-n", "1000", "-p", strconv.Itoa(18560 + i)}
			sout, cout := serverClient(t, start, perftest, args, append(args, "127.0.0.1"),
				"Connection refused", "Accepted connection from 127.0.0.1", "Final:                  1000")
			for _, out := range []string{sout, cout} {
				if !strings.Contains(out, "softroce check: no findings") {
					t.Errorf("%s: no report of no findings:\n%s", c[0], out)
				}
			}
		}
	})
	t.Run("fi_pingpong", func(t *testing.T) {
		ping := distroTool(t, "fi_pingpong", "libfabric-bin")
		// (The rdm endpoint, which TestLibfabricVerbsProviderOnTheDaemon runs in the
		// serve environment, failed in fi_domain with ENODATA when started
		// through softroce run, before any verbs finding: left out until
		// that is understood.)
		for i, c := range [][]string{{"verbs", "dgram", "1000"}} {
			args := []string{"-p", c[0], "-e", c[1], "-c", "-I", "200", "-S", c[2]}
			port := strconv.Itoa(18562 + i)
			if err := fabricPair(t, checkedStarts(t, home, dev), ping, append(args, "-B", port), append(args, "-P", port, "127.0.0.1")); err != nil {
				t.Fatalf("%s: %v", c[1], err)
			}
		}
	})
}

// TestCheckLiveAsksTheServingDaemon: a program run in serve --check's
// environment (no softroce run) leaks; softroce check --live -d NAME
// reports the leaks, --fail makes that exit status 66, --json is the
// --check-out format that softroce check FILE reads back; serve writes
// all its findings to its --check-out file when it ends.
func TestCheckLiveAsksTheServingDaemon(t *testing.T) {
	home := userHome(t)
	prog := buildCheckProgram(t, home, "leak")
	const dev = "rxe46"
	serveOut := filepath.Join(home, "run", "serve.json")
	t.Run("serve", func(t *testing.T) {
		env := serveAsUser(t, home, dev, "--ip", "10.78.46.1/24", "--check", "--check-out", serveOut)
		if out, err := userCommand(t, home, env, prog).CombinedOutput(); err != nil {
			t.Fatalf("leak: %v\n%s", err, out)
		}
		var out []byte
		var err error
		// The daemon's findings come at the program's close, which it
		// may not have finished yet.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, err = userCommand(t, home, nil, "softroce", "check", "--live", "-d", dev, "--fail").CombinedOutput()
			if strings.Contains(string(out), "5 findings") || time.Now().After(deadline) {
				break
			}
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != checkFailStatus || !strings.Contains(string(out), "leak: QP handle 4") {
			t.Fatalf("check --live --fail: %v\n%s", err, out)
		}
		js, err := userCommand(t, home, nil, "softroce", "check", "--live", "-d", dev, "--json").Output()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(home, "run", "live.json")
		if err := os.WriteFile(path, js, 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := userCommand(t, home, nil, "softroce", "check", path).CombinedOutput()
		if err != nil || !strings.Contains(string(back), "softroce check: 5 findings") {
			t.Fatalf("check FILE: %v\n%s", err, back)
		}
	})
	f, err := os.Open(serveOut)
	if err != nil {
		t.Fatalf("serve --check-out: %v", err)
	}
	defer f.Close()
	found, err := check.ReadJSON(f)
	if err != nil || len(found) != 5 || found[0].Name != check.Leak {
		t.Fatalf("serve --check-out: %+v, %v", found, err)
	}
}

// TestCheckFindsNothingInPyverbsSuite: rdma-core's own test suite
// (pyverbs, as TestRDMACoreTestSuiteOnTheDaemon runs it) through softroce
// run --check=fail passes with no findings; its bad-flow tests (posts to
// a QP in RESET, refused) are no misuse.
func TestCheckFindsNothingInPyverbsSuite(t *testing.T) {
	needCC(t)
	const suite = "/usr/share/doc/rdma-core/tests"
	out, err := exec.Command("dpkg", "-S", suite+"/run_tests.py").Output()
	testenv.Require(t, err == nil && strings.HasPrefix(string(out), "python3-pyverbs:"),
		"rdma-core's test suite is not installed (Debian package python3-pyverbs)")
	home := userHome(t)
	dir := filepath.Join(home, "rdma-core", "tests")
	copySuite(t, suite, dir)
	findings := filepath.Join(home, "run", "pyverbs.json")
	cmd := userCommand(t, home, nil, "softroce", "run", "-d", "rxe44", "--ip", "10.78.44.1/24", "--check=fail", "--check-out", findings, "--",
		"/usr/bin/python3", filepath.Join(dir, "run_tests.py"), "--dev", "rxe44", "--gid", "1")
	cmd.Dir = filepath.Dir(dir)
	res, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(res), "softroce check: no findings") {
		t.Fatalf("rdma-core's tests with --check=fail: %v\n%s", err, res)
	}
	if _, err := os.Stat(findings); err != nil {
		t.Fatalf("no --check-out: %v", err)
	}
}
