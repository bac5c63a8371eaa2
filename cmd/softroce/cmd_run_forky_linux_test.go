package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/debroot"
	"github.com/softroce/softroce/internal/testenv"
)

// Debian 14's userspace (rdma-core 65, perftest, pyverbs 65 on python3.14,
// glibc 2.43) through softroce, unprivileged: the daemon runs on this host
// as nobody, and the programs, which need forky's glibc, run as nobody in
// a tree of forky's packages (internal/debroot), entered through a user
// and a mount namespace of their own (debroot.Tree.UserArgv: root of that
// user namespace, nobody on the host), with the preload library, the sysfs
// tree and the daemon's socket mapped in from their environment.

// forkyClient is what a forky program needs to reach one daemon.
type forkyClient struct {
	tree   *debroot.Tree
	home   string
	served []string // what serve printed: LD_PRELOAD, SYSFS_PATH, SOFTROCE_SOCK
	ns     *testenv.NetNS
}

// forkyVars are the variables of softroce's environment whose host paths
// UserArgv maps into the tree.
var forkyVars = []string{"LD_PRELOAD", "SYSFS_PATH", "SOFTROCE_SOCK"}

// forkyEnv is the environment forky's programs get besides forkyVars.
var forkyEnv = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}

// serveForForky starts `softroce serve -d NAME ARGS...` as nobody.
func serveForForky(t *testing.T, name string, args ...string) *forkyClient {
	t.Helper()
	tree := debroot.ForTest(t, debroot.ForkyRDMA())
	debroot.RequireUserArgv(t)
	needCC(t)
	home := userHome(t)
	served := serveAsUser(t, home, name, args...)
	return &forkyClient{tree: tree, home: home, served: served, ns: testenv.NewNetNS(t)}
}

// command runs a forky program (a path in the tree) as nobody in the
// client's network namespace.
func (c *forkyClient) command(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	line, err := c.tree.UserArgv(nil, forkyEnv, forkyVars, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return userCommandIn(t, c.ns, c.home, c.served, line[0], line[1:]...)
}

// run runs a forky program to its end (at most a minute).
func (c *forkyClient) run(t *testing.T, argv ...string) (string, string, error) {
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

// forkyODPCaps is the ODP block rdma-core 65's ibv_devinfo -v prints for
// rxe 7.3 (what a 7.3 kernel's rxe prints in the peer VM).
const forkyODPCaps = `	general_odp_caps:
					ODP_SUPPORT
	rc_odp_caps:
					SUPPORT_SEND
					SUPPORT_RECV
					SUPPORT_WRITE
					SUPPORT_READ
					SUPPORT_ATOMIC
					SUPPORT_SRQ
					SUPPORT_FLUSH
					SUPPORT_ATOMIC_WRITE
	uc_odp_caps:
					NO SUPPORT
	ud_odp_caps:
					SUPPORT_SEND
					SUPPORT_RECV
					SUPPORT_SRQ
	xrc_odp_caps:
					NO SUPPORT
`

// TestForkyDevinfoThroughDaemon: Debian 14's ibv_devices lists the served
// device and its ibv_devinfo -v prints it as on kernel rxe 7.3, the ODP
// capabilities by name included.
func TestForkyDevinfoThroughDaemon(t *testing.T) {
	c := serveForForky(t, "rxe65", "--ip", "10.78.0.1/24")
	out, errOut, err := c.run(t, "/usr/bin/ibv_devices")
	if err != nil || !regexp.MustCompile(`(?m)^\s+rxe65\s+[0-9a-f]{16}$`).MatchString(out) {
		t.Errorf("forky's ibv_devices: %v; does it list rxe65?\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, errOut, err = c.run(t, "/usr/bin/ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, want := range []string{
		`(?m)^hca_id:\trxe65$`,
		`(?m)^\ttransport:\t+InfiniBand \(0\)$`,
		`(?m)^\tvendor_id:\t+0xffffff$`,
		`(?m)^\t\t\tstate:\t+PORT_ACTIVE \(4\)$`,
		`(?m)^\t\t\tlink_layer:\t+Ethernet$`,
		`(?m)^\t\t\tGID\[  1\]:\t+::ffff:10\.78\.0\.1, RoCE v2$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("forky's ibv_devinfo -v output does not match %q", want)
		}
	}
	if !strings.Contains(out, forkyODPCaps) {
		t.Errorf("forky's ibv_devinfo -v lacks rxe 7.3's ODP caps:\n%s", forkyODPCaps)
	}
	if t.Failed() {
		t.Logf("ibv_devinfo -v:\n%s\nstderr:\n%s", out, errOut)
	}
}

// TestForkyPingpongAndPerftestThroughDaemon: Debian 14's ibv_rc_pingpong,
// server and client on one daemon, plain and on ODP MRs (-o) with the data
// checked; implicit ODP (-o -O) refused as rxe refuses it (the device
// reports no IBV_ODP_SUPPORT_IMPLICIT); perftest's ib_write_bw and
// ib_send_bw with --odp.
func TestForkyPingpongAndPerftestThroughDaemon(t *testing.T) {
	c := serveForForky(t, "rxe66", "--ip", "10.78.0.1/24")
	start := func(argv ...string) *exec.Cmd { return c.command(t, argv...) }
	for i, tc := range []struct {
		tool string
		args []string
		want string
	}{
		{"ibv_rc_pingpong", []string{"-d", "rxe66", "-g", "1", "-n", "200", "-c"}, "1638400 bytes in"},
		{"ibv_rc_pingpong", []string{"-d", "rxe66", "-g", "1", "-n", "200", "-c", "-o"}, "1638400 bytes in"},
		{"ib_write_bw", []string{"-d", "rxe66", "-x", "1", "-F", "-n", "200", "--odp"}, "#bytes"},
		{"ib_send_bw", []string{"-d", "rxe66", "-x", "1", "-F", "-n", "200", "--odp"}, "#bytes"},
	} {
		t.Run(strings.Join(append([]string{tc.tool}, tc.args[len(tc.args)-1]), " "), func(t *testing.T) {
			pair(t, start, "/usr/bin/"+tc.tool, append(tc.args, "-p", strconv.Itoa(19090+i)), tc.want, tc.want)
		})
	}
	t.Run("ibv_rc_pingpong -o -O", func(t *testing.T) {
		out, errOut, err := c.run(t, "/usr/bin/ibv_rc_pingpong", "-d", "rxe66", "-g", "1", "-o", "-O", "-p", "19099")
		if err == nil || !strings.Contains(errOut, "The device doesn't support implicit ODP") {
			t.Errorf("implicit ODP: %v, want it refused (no implicit ODP on rxe)\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
		}
	})
}
