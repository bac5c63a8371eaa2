package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/testenv"
)

// Debian 13's userspace (rdma-core 56, perftest 25.01) through softroce:
// the daemon runs on this host as nobody, the programs run as nobody in a
// chroot made from trixie's packages (internal/debroot, built once and
// cached), with the preload library, the sysfs tree and the socket the
// daemon printed bound into the chroot. Different rdma-core versions take
// different ABI paths (ioctl or write commands, the ex variants, the
// provider's queue layout), so each release is a client of its own; the
// cases are those Debian 12's tools run (pingpongCases, perftestCases).

// trixieClient is what a program in the tree needs to reach one daemon.
type trixieClient struct {
	tree  *debroot.Tree
	env   []string
	binds []debroot.Bind
	ns    *testenv.NetNS // the TCP exchanges of server and client
	dir   string         // the daemon's directory, as the host sees it
}

// serveForTrixie starts `softroce serve -d NAME ARGS...` as nobody
// (serveAsUser) and maps the environment it prints into the tree.
func serveForTrixie(t *testing.T, name string, args ...string) *trixieClient {
	t.Helper()
	return serveForTree(t, debroot.TrixieRDMA(), name, args...)
}

// serveForTree is serveForTrixie for the programs of the tree cfg
// describes.
func serveForTree(t *testing.T, cfg debroot.Config, name string, args ...string) *trixieClient {
	t.Helper()
	tree := debroot.ForTest(t, cfg)
	needCC(t)
	served := serveAsUser(t, userHome(t), name, args...)
	env, binds := debroot.HostPaths(append([]string{"PATH=/usr/bin:/bin"}, served...),
		"LD_PRELOAD", "SYSFS_PATH", "SOFTROCE_SOCK")
	return &trixieClient{tree: tree, env: env, binds: binds, ns: testenv.NewNetNS(t), dir: daemonDir(t, served)}
}

// command runs a trixie program (a path in the tree) as nobody in the
// chroot, in the client's network namespace.
func (c *trixieClient) command(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd, err := c.tree.Command(context.Background(), c.binds, c.env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	in := c.ns.Command(cmd.Path, cmd.Args[1:]...)
	in.Env = cmd.Env
	return in
}

// run runs a trixie program to its end (at most a minute).
func (c *trixieClient) run(t *testing.T, argv ...string) (string, string, error) {
	t.Helper()
	cmd := c.command(t, argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	return out.String(), errb.String(), err
}

// pair runs a trixie tool as server and as client, as pair does for
// Debian 12's.
func (c *trixieClient) pair(t *testing.T, tool string, args []string, serverWant, clientWant string) {
	t.Helper()
	pair(t, func(argv ...string) *exec.Cmd { return c.command(t, argv...) },
		"/usr/bin/"+tool, args, serverWant, clientWant)
}

// TestTrixieIbvDevicesAndDevinfoThroughDaemon: Debian 13's ibv_devices
// lists the served device and its ibv_devinfo -v prints it as on kernel
// rxe (an active Ethernet port, the GID table of the link's addresses).
func TestTrixieIbvDevicesAndDevinfoThroughDaemon(t *testing.T) {
	c := serveForTrixie(t, "rxe10", "--ip", "10.79.0.1/24")
	out, errOut, err := c.run(t, "/usr/bin/ibv_devices")
	if err != nil {
		t.Fatalf("ibv_devices: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^\s+rxe10\s+[0-9a-f]{16}$`).MatchString(out) {
		t.Errorf("trixie's ibv_devices does not list rxe10 with a node GUID:\n%s\nstderr:\n%s", out, errOut)
	}
	out, errOut, err = c.run(t, "/usr/bin/ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, want := range []string{
		`(?m)^hca_id:\trxe10$`,
		`(?m)^\ttransport:\t+InfiniBand \(0\)$`,
		`(?m)^\tnode_guid:\t+[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$`,
		`(?m)^\tvendor_id:\t+0xffffff$`,
		`(?m)^\tphys_port_cnt:\t+1$`,
		`(?m)^\t\t\tstate:\t+PORT_ACTIVE \(4\)$`,
		`(?m)^\t\t\tlink_layer:\t+Ethernet$`,
		`(?m)^\t\t\tGID\[  0\]:\t+fe80::[0-9a-f:]+, RoCE v2$`,
		`(?m)^\t\t\tGID\[  1\]:\t+::ffff:10\.79\.0\.1, RoCE v2$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("trixie's ibv_devinfo -v output does not match %q", want)
		}
	}
	if t.Failed() {
		t.Logf("ibv_devinfo -v:\n%s\nstderr:\n%s", out, errOut)
	}
}

// TestTrixiePingpongsThroughDaemon: Debian 13's ibv_*_pingpong, server
// and client as nobody in the chroot on one daemon, every case of
// pingpongCases: the data checked (-c), with and without completion
// channels (-e).
func TestTrixiePingpongsThroughDaemon(t *testing.T) {
	c := serveForTrixie(t, "rxe11", "--ip", "10.78.0.1/24")
	for i, tc := range pingpongCases {
		t.Run(strings.Join(append([]string{tc.tool}, tc.extra...), " "), func(t *testing.T) {
			c.pair(t, tc.tool, pingpongArgs("rxe11", 18880, i, tc.extra), tc.bytes, tc.bytes)
		})
	}
}

// TestTrixiePerftestThroughDaemon: perftest 25.01's eight tools as nobody
// in the chroot on one daemon, every case of perftestCases (perftestMemlock).
func TestTrixiePerftestThroughDaemon(t *testing.T) {
	c := serveForTrixie(t, "rxe12", "--ip", "10.78.0.1/24", perftestMemlock)
	for i, tc := range perftestCases() {
		t.Run(strings.Join(append([]string{tc.tool}, tc.extra...), " "), func(t *testing.T) {
			args, serverWant := perftestRun(tc, "rxe12", 18900, i)
			c.pair(t, tc.tool, args, serverWant, "#bytes")
		})
	}
}

// TestTrixieODPThroughDaemon: Debian 13's tools with on-demand paging, as
// nobody in the chroot on one daemon: ibv_rc_pingpong -o with the data
// checked, and perftest 25.01's --odp runs of WRITE, READ, SEND and
// atomics.
func TestTrixieODPThroughDaemon(t *testing.T) {
	c := serveForTrixie(t, "rxe64", "--ip", "10.78.0.1/24")
	for i, tc := range []struct {
		tool string
		args []string
		want string
	}{
		{"ibv_rc_pingpong", []string{"-d", "rxe64", "-g", "1", "-n", "200", "-c", "-o"}, "1638400 bytes in"},
		{"ib_write_bw", []string{"-d", "rxe64", "-x", "1", "-F", "-n", "200", "--odp"}, "#bytes"},
		{"ib_read_bw", []string{"-d", "rxe64", "-x", "1", "-F", "-n", "200", "--odp"}, "#bytes"},
		{"ib_send_bw", []string{"-d", "rxe64", "-x", "1", "-F", "-n", "200", "--odp"}, "#bytes"},
		{"ib_atomic_bw", []string{"-d", "rxe64", "-x", "1", "-F", "-n", "200", "--odp"}, "#bytes"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			c.pair(t, tc.tool, append(tc.args, "-p", strconv.Itoa(18990+i)), tc.want, tc.want)
		})
	}
}
