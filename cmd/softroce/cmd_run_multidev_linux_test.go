package main

import (
	"os"
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

// multiDev is a daemon serving rxe0 (10.79.0.1) and rxe1 (10.79.0.2) on
// one fabric for the user of home, and the environment it printed.
type multiDev struct {
	home string
	env  []string
}

// serveTwoDevices serves rxe0 and rxe1 from one daemon, unprivileged.
func serveTwoDevices(t *testing.T) multiDev {
	t.Helper()
	needCC(t)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe0", "--ip", "10.79.0.1/24", "-d", "rxe1", "--ip", "10.79.0.2/24", "--nodad", perftestMemlock)
	return multiDev{home: home, env: env}
}

// sentPkts returns device dev's sent_pkts counter as the daemon's sysfs
// tree shows it (refreshed every uverbsd.CounterRefresh).
func (m multiDev) sentPkts(t *testing.T, dev string) uint64 {
	t.Helper()
	p := filepath.Join(envValue(m.env, "SYSFS_PATH"), "class/infiniband", dev, "ports/1/hw_counters/sent_pkts")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return n
}

// sentSince waits for the counters to be refreshed and returns how many
// packets each device sent since before (by name).
func (m multiDev) sentSince(t *testing.T, before map[string]uint64) map[string]uint64 {
	t.Helper()
	time.Sleep(uverbsd.CounterRefresh + 200*time.Millisecond)
	out := map[string]uint64{}
	for dev, n := range before {
		out[dev] = m.sentPkts(t, dev) - n
	}
	return out
}

// counters returns the devices' sent_pkts now.
func (m multiDev) counters(t *testing.T) map[string]uint64 {
	return map[string]uint64{"rxe0": m.sentPkts(t, "rxe0"), "rxe1": m.sentPkts(t, "rxe1")}
}

// TestOneEnvironmentShowsEveryServedDevice: with rxe0 and rxe1 served by
// one daemon, "softroce run -- ibv_devices" (no -d) lists both, "softroce
// env" without -d prints that daemon's environment, and Debian's
// ibv_devinfo sees each device with its own GID (its own address) on
// uverbs0 and uverbs1. A second, separately started daemon makes env and
// run without -d refuse, naming both.
func TestOneEnvironmentShowsEveryServedDevice(t *testing.T) {
	devices := distroTool(t, "ibv_devices", "ibverbs-utils")
	devinfo := distroTool(t, "ibv_devinfo", "ibverbs-utils")
	m := serveTwoDevices(t)
	out, err := userCommand(t, m.home, nil, "softroce", "run", "--", devices).CombinedOutput()
	if err != nil {
		t.Fatalf("softroce run -- ibv_devices: %v\n%s", err, out)
	}
	for _, dev := range []string{"rxe0", "rxe1"} {
		if !regexp.MustCompile(`(?m)^\s+` + dev + `\s+[0-9a-f]{16}$`).Match(out) {
			t.Errorf("ibv_devices lists no %s:\n%s", dev, out)
		}
	}
	out, err = userCommand(t, m.home, nil, "softroce", "env").Output()
	if err != nil {
		t.Fatalf("softroce env: %v\n%s", err, out)
	}
	if want := "export SYSFS_PATH=" + envValue(m.env, "SYSFS_PATH") + "\n"; !strings.Contains(string(out), want) {
		t.Errorf("softroce env without -d:\n%s\nwant the serving daemon's %q", out, want)
	}
	for dev, gid := range map[string]string{"rxe0": "::ffff:10.79.0.1", "rxe1": "::ffff:10.79.0.2"} {
		out, err := userCommand(t, m.home, m.env, devinfo, "-v", "-d", dev).CombinedOutput()
		if err != nil {
			t.Fatalf("ibv_devinfo -d %s: %v\n%s", dev, err, out)
		}
		if !strings.Contains(string(out), "hca_id:\t"+dev+"\n") || !strings.Contains(string(out), gid+", RoCE v2") {
			t.Errorf("ibv_devinfo -v -d %s lacks its name or GID %s:\n%s", dev, gid, out)
		}
	}
	serveAsUser(t, m.home, "rxe5")
	for _, args := range [][]string{{"env"}, {"run", "--", "true"}} {
		out, err := userCommand(t, m.home, nil, "softroce", args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "separate daemons serve rxe0, rxe5") {
			t.Errorf("softroce %s with two daemons: %v, want their names and a failure:\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestWriteBandwidthFromOneDeviceToTheOther: Debian's ib_write_bw, server
// on rxe0 and client on rxe1 (the kernel rxe's two-device test), both
// exit 0 with their result, the client naming rxe1's GID as its own and
// rxe0's as the remote one; rxe1 sent the client's packets.
func TestWriteBandwidthFromOneDeviceToTheOther(t *testing.T) {
	bw := distroTool(t, "ib_write_bw", "perftest")
	m := serveTwoDevices(t)
	before := m.counters(t)
	common := []string{"-x", "1", "-F", "-n", "2000", "-p", "18830"}
	_, cout := serverClient(t, userStarts(t, m.home, m.env), bw, append([]string{"-d", "rxe0"}, common...),
		append(append([]string{"-d", "rxe1"}, common...), "127.0.0.1"), "Couldn't connect", "#bytes", "#bytes")
	local, remote := strings.Index(cout, "local address"), strings.Index(cout, "remote address")
	if local < 0 || remote < local ||
		!strings.Contains(cout[local:remote], "GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:79:00:02") ||
		!strings.Contains(cout[remote:], "GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:79:00:01") {
		t.Errorf("the client's local GID is not rxe1's, or its remote one not rxe0's:\n%s", cout)
	}
	// 2000 writes of 64 KiB in packets of at most 4 KiB.
	if sent := m.sentSince(t, before); sent["rxe1"] < 2000*16 {
		t.Errorf("rxe1 sent %d packets during the run, want at least %d", sent["rxe1"], 2000*16)
	}
}

// TestRpingFromAnAddressOfOneDeviceToTheOther: Debian's rping, the server
// on rxe0's address, the client bound to rxe1's (-I), each under
// "softroce run" without -d, exchange their 10 pings with the data
// verified (-v), and the rdma_cm sent the client's packets from rxe1. A
// server on the wildcard address (its ID on rxe0) takes a client of
// rxe1's address too: it listens on every device.
func TestRpingFromAnAddressOfOneDeviceToTheOther(t *testing.T) {
	rping := distroRDMACMTool(t, "rping", "rdmacm-utils")
	m := serveTwoDevices(t)
	before := m.counters(t)
	run := func(tool string, args ...string) *exec.Cmd {
		return userCommand(t, m.home, nil, "softroce", append([]string{"run", "--", tool}, args...)...)
	}
	want := "ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz"
	cmPairWith(t, cmDaemon(t, m.home, "rxe0", run), rping, rping,
		[]string{"-s", "-a", "10.79.0.1", "-p", "19301", "-C", "10", "-v"},
		[]string{"-c", "-I", "10.79.0.2", "-a", "10.79.0.1", "-p", "19301", "-C", "10", "-v"}, "19301", "server "+want, want)
	if sent := m.sentSince(t, before); sent["rxe1"] == 0 {
		t.Errorf("rxe1 sent nothing: the client did not connect from it")
	}
	cmPairWith(t, cmDaemon(t, m.home, "rxe0", run), rping, rping,
		[]string{"-s", "-p", "19302", "-C", "10", "-v"},
		[]string{"-c", "-a", "10.79.0.2", "-p", "19302", "-C", "10", "-v"}, "19302", "server "+want, want)
}

// TestUCXMultiRailOverBothDevices: UCX with UCX_NET_DEVICES=rxe0:1,rxe1:1
// runs ucx_perftest's tag bandwidth test of 1 MiB messages (rendezvous
// over RC, two rails): both programs end with their final report, and
// each device carried a share of the transfer.
func TestUCXMultiRailOverBothDevices(t *testing.T) {
	perftest := distroModuleUser(t, "ucx_perftest", "ucx-utils", "/usr/lib/*/ucx/libuct_ib.so.0", "libucx0")
	m := serveTwoDevices(t)
	// UD, UCX's wireup transport, checks a packet's L3 type against
	// wc.sl, which holds on an IPv6 GID only (TestUCXOnTheDaemon).
	env := append(slices.Clone(m.env), "UCX_NET_DEVICES=rxe0:1,rxe1:1", "UCX_TLS=rc_verbs,ud_verbs,self",
		"UCX_IB_ETH_PAUSE_ON=y", "UCX_MAX_RNDV_RAILS=2", "UCX_IB_GID_INDEX=0")
	before := m.counters(t)
	args := []string{"-t", "tag_bw", "-s", "1048576", "-n", "200", "-p", "18554"}
	_, cout := serverClient(t, userStarts(t, m.home, env), perftest, args, append(args, "127.0.0.1"),
		"Connection refused", "", "Final:")
	if !regexp.MustCompile(`Final:\s+200\s`).MatchString(cout) {
		t.Errorf("the client's final report is not of 200 iterations:\n%s", cout)
	}
	// 200 MiB in packets of at most 4 KiB is 51200 packets or more; each
	// rail carried a fifth of that at least.
	sent := m.sentSince(t, before)
	for _, dev := range []string{"rxe0", "rxe1"} {
		if sent[dev] < 10000 {
			t.Errorf("%s sent %d packets during the run, want a rail's share (%v)", dev, sent[dev], sent)
		}
	}
}
