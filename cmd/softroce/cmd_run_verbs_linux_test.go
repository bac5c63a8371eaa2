package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/uverbsd"
)

// TestIbvDevinfoPrintsTheDevice: Debian's ibv_devinfo -v, run through
// "softroce run" by an unprivileged user, opens the device (GET_CONTEXT,
// QUERY_DEVICE, QUERY_PORT through the preload library and the daemon) and
// prints it as on kernel rxe: an Ethernet port, active, with the GID
// table of the link's addresses (the link-local GID, then --ip's).
func TestIbvDevinfoPrintsTheDevice(t *testing.T) {
	tool := distroTool(t, "ibv_devinfo", "ibverbs-utils")
	needCC(t)
	out, errOut, code := asUser(t, "run", "-d", "rxe3", "--ip", "10.77.0.1/24", "--", tool, "-v")
	if code != 0 {
		t.Fatalf("softroce run -- ibv_devinfo -v: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`(?m)^hca_id:\trxe3$`,
		`(?m)^\ttransport:\t+InfiniBand \(0\)$`,
		`(?m)^\tnode_guid:\t+[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$`,
		`(?m)^\tvendor_id:\t+0xffffff$`,
		`(?m)^\tphys_port_cnt:\t+1$`,
		`(?m)^\t\t\tstate:\t+PORT_ACTIVE \(4\)$`,
		`(?m)^\t\t\tlink_layer:\t+Ethernet$`,
		`(?m)^\t\t\tGID\[  0\]:\t+fe80::[0-9a-f:]+, RoCE v2$`,
		`(?m)^\t\t\tGID\[  1\]:\t+::ffff:10\.77\.0\.1, RoCE v2$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("ibv_devinfo -v output does not match %q", want)
		}
	}
	if t.Failed() {
		t.Logf("ibv_devinfo -v:\n%s", out)
	}
}

// pingpongCases are the pingpong runs of the daemon tests: each tool with
// and without a completion channel (-e), with the bytes both sides report.
var pingpongCases = []struct {
	tool  string
	extra []string
	bytes string
}{
	{"ibv_rc_pingpong", nil, "1638400 bytes in"},
	{"ibv_rc_pingpong", []string{"-e"}, "1638400 bytes in"},
	{"ibv_uc_pingpong", nil, "1638400 bytes in"},
	{"ibv_uc_pingpong", []string{"-e"}, "1638400 bytes in"},
	{"ibv_ud_pingpong", nil, "409600 bytes in"},
	{"ibv_ud_pingpong", []string{"-e"}, "409600 bytes in"},
	{"ibv_srq_pingpong", nil, "1638400 bytes in"},
	{"ibv_srq_pingpong", []string{"-e"}, "1638400 bytes in"},
}

// pingpongArgs are the arguments of the i'th pingpong case on device dev:
// 200 iterations with the data checked (-c), GID index 1 (the --ip
// address), a port of its own from base.
func pingpongArgs(dev string, base, i int, extra []string) []string {
	return append([]string{"-d", dev, "-g", "1", "-n", "200", "-c", "-p", strconv.Itoa(base + i)}, extra...)
}

// TestPingpongsOnOneDaemon: Debian's ibv_*_pingpong as server and as
// client, both unprivileged, on one "softroce serve" on the default
// in-memory link: the client reaches the server's GID (the device loops a
// packet to its own address back, as rxe does), the receivers check the
// data (-c) and both exit 0. The -e runs wait for completions on a
// completion channel (ibv_get_cq_event).
func TestPingpongsOnOneDaemon(t *testing.T) {
	needCC(t)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe6", "--ip", "10.78.0.1/24")
	for i, tc := range pingpongCases {
		t.Run(strings.Join(append([]string{tc.tool}, tc.extra...), " "), func(t *testing.T) {
			tool := distroTool(t, tc.tool, "ibverbs-utils")
			pingpongs(t, home, env, tool, pingpongArgs("rxe6", 18780, i, tc.extra), tc.bytes, tc.bytes)
		})
	}
}

// perftestCase is one perftest run of the daemon tests.
type perftestCase struct {
	tool  string
	extra []string
}

// perftestCases are the perftest runs of the daemon tests: the eight
// tools with their defaults and 200 iterations, then in their modes: a
// timed run (-D: SIGALRM in the middle of the verbs), both directions,
// several QPs, every size from 2 bytes to 8 MiB (-a, with perftest's least
// iteration count), SRQ, UC and UD. perftest posts with ibv_post_send on
// rxe (its ibv_wr_* path is for the devices it lists, "ibv_wr* API: OFF"),
// as on kernel rxe; testdata/verbs_rxe_ops.c drives ibv_wr_*.
func perftestCases() []perftestCase {
	var cases []perftestCase
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw",
		"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
		cases = append(cases, perftestCase{tool, []string{"-n", "200"}})
	}
	return append(cases,
		perftestCase{"ib_write_bw", []string{"-D", "2"}},
		perftestCase{"ib_atomic_bw", []string{"-D", "2"}},
		perftestCase{"ib_send_bw", []string{"-b", "-n", "200"}},
		perftestCase{"ib_write_bw", []string{"-q", "4", "-n", "200"}},
		perftestCase{"ib_read_bw", []string{"-q", "4", "-n", "200"}},
		perftestCase{"ib_write_bw", []string{"-a", "-n", "5"}},
		perftestCase{"ib_send_bw", []string{"--use-srq", "-n", "200"}},
		perftestCase{"ib_send_bw", []string{"-c", "UC", "-n", "200"}},
		perftestCase{"ib_write_bw", []string{"-c", "UC", "-n", "200"}},
		perftestCase{"ib_send_bw", []string{"-c", "UD", "-n", "200"}},
		perftestCase{"ib_send_lat", []string{"-c", "UD", "-n", "200"}},
	)
}

// perftestMemlock is the flag of the perftest daemons: ib_write_bw -a
// registers two 8 MiB buffers, past the 8 MiB RLIMIT_MEMLOCK a CI host
// commonly gives its users (which a root without CAP_SYS_RESOURCE cannot
// lift either); the daemon then refuses the MR with ENOMEM, as the kernel
// does (TestRegMRChargesRLIMITMEMLOCK), unless it is told not to charge.
const perftestMemlock = "--no-memlock"

// perftestRun returns the arguments of the i'th perftest case on device
// dev (GID index 1, a port of its own from base) and what the server must
// print: the passive side of READ and atomic latency tests prints no
// result, as with the kernel's rxe.
//
// perftest calibrates its cycle counter against gettimeofday for each
// report (some 0.2 s of samples) and exits when a busy machine spoils the
// fit ("Can't produce a report"); -F lets it report anyway, so a run
// depends on its transfers alone (-a makes 23 reports).
func perftestRun(c perftestCase, dev string, base, i int) (args []string, serverWant string) {
	args = append([]string{"-d", dev, "-x", "1", "-F", "-p", strconv.Itoa(base + i)}, c.extra...)
	serverWant = "#bytes"
	if c.tool == "ib_read_lat" || c.tool == "ib_atomic_lat" {
		serverWant = ""
	}
	return args, serverWant
}

// TestPerftestOnOneDaemon: the eight perftest tools of Debian, unprivileged,
// server and client on one "softroce serve", in every case of
// perftestCases: both exit 0 and print their result line.
//
// The daemon pins without charging RLIMIT_MEMLOCK (perftestMemlock).
func TestPerftestOnOneDaemon(t *testing.T) {
	needCC(t)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe8", "--ip", "10.78.0.1/24", perftestMemlock)
	for i, c := range perftestCases() {
		t.Run(strings.Join(append([]string{c.tool}, c.extra...), " "), func(t *testing.T) {
			path := distroTool(t, c.tool, "perftest")
			args, serverWant := perftestRun(c, "rxe8", 18790, i)
			pingpongs(t, home, env, path, args, serverWant, "#bytes")
		})
	}
}

// gidRE matches the GID of 10.78.0.1 as the pingpongs and perftest print
// it.
var gidRE = regexp.MustCompile(`GID ::ffff:10\.78\.0\.1|GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:78:00:01`)

// pingpongs runs tool as server, then as client of 127.0.0.1, with env
// (userCommand in home), and checks what pair checks.
func pingpongs(t *testing.T, home string, env []string, tool string, args []string, serverWant, clientWant string) {
	t.Helper()
	pair(t, userStarts(t, home, env), tool, args, serverWant, clientWant)
}

// pair runs tool as server, then as client of 127.0.0.1, each with the
// command start makes for its argv, and checks that both exit 0, name the
// GID of 10.78.0.1 and print serverWant and clientWant. The server
// listens once it has its QP; until then the client cannot connect and
// says so.
func pair(t *testing.T, start func(argv ...string) *exec.Cmd, tool string, args []string, serverWant, clientWant string) {
	t.Helper()
	sout, cout := serverClient(t, start, tool, args, append(slices.Clone(args), "127.0.0.1"), "Couldn't connect", serverWant, clientWant)
	for _, c := range []struct{ who, out string }{{"client", cout}, {"server", sout}} {
		if !gidRE.MatchString(c.out) {
			t.Errorf("%s output lacks the GID of 10.78.0.1:\n%s", c.who, c.out)
		}
	}
}

// TestKilledProgramsLeaveTheDaemonServing: a pingpong server and client
// killed (SIGKILL) in the middle of a long transfer have their objects torn
// down by the daemon (each connection's end closes its File, as
// ib_uverbs_close), and the daemon goes on serving: a new pair on the same
// device completes with its data checked.
func TestKilledProgramsLeaveTheDaemonServing(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe9", "--ip", "10.78.0.1/24")
	long := []string{"-d", "rxe9", "-g", "1", "-n", "100000000", "-p", "18811"}
	server := userCommand(t, home, env, tool, long...)
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Wait()
	defer server.Process.Kill()
	time.Sleep(500 * time.Millisecond)
	client := userCommand(t, home, env, tool, append(long, "127.0.0.1")...)
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	for _, c := range []*exec.Cmd{client, server} {
		c.Process.Kill()
	}
	if err := client.Wait(); err == nil {
		t.Fatal("the long client finished before it was killed")
	}
	pingpongs(t, home, env, tool, []string{"-d", "rxe9", "-g", "1", "-n", "200", "-c", "-p", "18812"},
		"1638400 bytes in", "1638400 bytes in")
}

// TestTwoRunsShareADaemon: "softroce run" of an ibv_rc_pingpong server
// serves the device; "softroce run" of the client finds it serving and
// uses it. The server's run keeps the daemon until the client is done,
// and both exit 0 with the programs' status.
func TestTwoRunsShareADaemon(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	args := []string{"-d", "rxe7", "-g", "1", "-n", "200", "-c", "-p", "18831"}
	server := userCommand(t, home, nil, "softroce", append([]string{"run", "-d", "rxe7", "--ip", "10.78.0.1/24", "--", tool}, args...)...)
	var sout bytes.Buffer
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	serverDone := make(chan error, 1)
	go func() { serverDone <- server.Wait() }()
	defer server.Process.Kill()
	// The client's run must find the server's daemon (with its --ip),
	// not serve one of its own.
	dir := filepath.Join(home, "run", "softroce", "rxe7")
	for deadline := time.Now().Add(15 * time.Second); !uverbsd.Serving(dir); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server's run does not serve rxe7:\n%s", sout.String())
		}
	}
	var cout []byte
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cout, err = userCommand(t, home, nil, "softroce", append([]string{"run", "-d", "rxe7", "--", tool}, append(args, "127.0.0.1")...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(cout), "Couldn't connect") || time.Now().After(deadline) {
			break
		}
		// Until the server listens, the client cannot connect.
	}
	if err != nil {
		t.Fatalf("client run: %v\n%s\nserver:\n%s", err, cout, sout.String())
	}
	select {
	case err := <-serverDone:
		if err != nil {
			t.Fatalf("server run: %v\n%s", err, sout.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("server run did not finish:\n%s", sout.String())
	}
	for who, out := range map[string]string{"client": string(cout), "server": sout.String()} {
		if !strings.Contains(out, "1638400 bytes in") || !gidRE.MatchString(out) {
			t.Errorf("%s output:\n%s", who, out)
		}
	}
}
