package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// diagTool checks that tool is infiniband-diags' own file (dpkg owns it),
// so the test runs the unmodified program a user has, and returns its
// path.
func diagTool(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		// /usr/sbin is not on every PATH.
		path, err = exec.LookPath(filepath.Join("/usr/sbin", tool))
	}
	testenv.Require(t, err == nil, tool+" is not installed (Debian package infiniband-diags)")
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("dpkg", "-S", real).Output()
	if err != nil {
		out, err = exec.Command("dpkg", "-S", strings.TrimPrefix(real, "/usr")).Output()
	}
	testenv.Require(t, err == nil, "dpkg does not own "+real)
	if pkg, _, _ := strings.Cut(string(out), ":"); pkg != "infiniband-diags" {
		t.Fatalf("%s belongs to %q, not infiniband-diags", real, pkg)
	}
	return path
}

// kernelSections reads testdata/rxe-7.3-ibstat.txt: what kernel rxe prints,
// by command.
func kernelSections(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "rxe-7.3-ibstat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	secs := map[string]string{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") && cur == "" {
			continue
		}
		if name, ok := strings.CutPrefix(l, "===SEC "); ok {
			cur = strings.TrimSuffix(name, "===")
			continue
		}
		secs[cur] += l + "\n"
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return secs
}

// The kernel reference's device: its name and node GUID (the port GUID and
// the default GID's interface ID are the same EUI-64).
const (
	kernelDev  = "rxe0"
	kernelGUID = "505400fffe4d000a"
)

// asKernelShapes returns the kernel's output of a command with its device's
// name and GUID replaced by dev's and guid's (16 hex digits), in every
// form the tools print them.
func asKernelShapes(want, dev, guid string) string {
	groups := func(g string) string { // 5054:00ff:fe4d:000a
		return g[0:4] + ":" + g[4:8] + ":" + g[8:12] + ":" + g[12:16]
	}
	return strings.NewReplacer("'"+kernelDev+"'", "'"+dev+"'", kernelDev+"\n", dev+"\n",
		"0x"+kernelGUID, "0x"+guid, groups(kernelGUID), groups(guid)).Replace(want)
}

// TestIbstatShowsTheDeviceAsKernelRxe: Debian 12's unmodified ibstat
// (libibumad) and ibstatus (a shell script reading sysfs with cd, globs,
// test and cat), run unprivileged through `softroce run` on a host without
// /sys/class/infiniband, describe the served device as they describe
// kernel rxe's: the same lines (CA type, firmware and hardware version
// empty; port state, physical state, rate, LIDs, capability mask, link
// layer), with the device's own name and GUIDs; ibstat -l and -p list it,
// and ibv_devices agrees on the node GUID.
func TestIbstatShowsTheDeviceAsKernelRxe(t *testing.T) {
	devices := distroTool(t, "ibv_devices", "ibverbs-utils")
	ibstat := diagTool(t, "ibstat")
	ibstatus := diagTool(t, "ibstatus")
	needCC(t)
	const dev = "rxe41"
	home := userHome(t)
	serveAsUser(t, home, dev)
	run := func(args ...string) string {
		t.Helper()
		out, err := runUser(t, userCommand(t, home, nil, "softroce", append([]string{"run", "-d", dev, "--"}, args...)...), 60*time.Second)
		if err != nil {
			t.Fatalf("softroce run -- %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	var guid string
	for _, l := range strings.Split(run(devices), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == dev {
			guid = f[1]
		}
	}
	if len(guid) != 16 {
		t.Fatalf("ibv_devices lists no %s with a node GUID", dev)
	}
	kernel := kernelSections(t)
	for _, c := range []struct {
		section string
		args    []string
	}{
		{"ibstat", []string{ibstat}},
		{"ibstat -l", []string{ibstat, "-l"}},
		{"ibstat -p", []string{ibstat, "-p"}},
		{"ibstatus", []string{ibstatus}},
	} {
		want, ok := kernel[c.section]
		if !ok {
			t.Fatalf("testdata has no %q section", c.section)
		}
		want = strings.TrimRight(asKernelShapes(want, dev, guid), "\n")
		got := strings.TrimRight(run(c.args...), "\n")
		if got != want {
			t.Errorf("%s prints:\n%s\nkernel rxe's, with %s's name and GUID:\n%s", c.section, got, dev, want)
		}
	}
}

// buildUmadProgram compiles testdata/NAME.c (on the uapi headers only)
// into dir.
func buildUmadProgram(t *testing.T, dir, name string) string {
	t.Helper()
	needCC(t)
	_, err := os.Stat("/usr/include/rdma/ib_user_mad.h")
	testenv.Require(t, err == nil, "the kernel's uapi headers are not installed (Debian package linux-libc-dev)")
	bin := filepath.Join(dir, name)
	out, err := exec.Command("cc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", name+".c")).CombinedOutput()
	if err != nil {
		t.Fatalf("cc %s.c: %v\n%s", name, err, out)
	}
	return bin
}

// pmaCounters parses umad_pma's "name value" lines.
func pmaCounters(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	c := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 0, 64)
		if err == nil {
			c[f[0]] = v
		}
	}
	for _, k := range []string{"capability_mask", "link_downed", "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"} {
		if _, ok := c[k]; !ok {
			t.Fatalf("umad_pma printed no %s:\n%s", k, out)
		}
	}
	return c
}

// TestUmadPMACountersMoveWithTraffic: through /dev/infiniband/umad0 under
// `softroce run`, unprivileged, a program registers a Performance
// Management agent as libibumad does and reads the port's PMA as rxe 7.2
// answers it: ClassPortInfo with the extended-width capability (0x0200),
// PortCounters with LinkDownedCounter, PortCountersExtended with the data
// (in 4-byte words) and packet counters. An ibv_rc_pingpong pair of 500
// 4 KiB exchanges between the reads moves the counters by at least that
// traffic each way. Then ib_umad's refusals: each call it refuses gets
// its errno (umad_pma.c checks), and the daemon serves on.
func TestUmadPMACountersMoveWithTraffic(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	const dev = "rxe42"
	home := userHome(t)
	prog := buildUmadProgram(t, home, "umad_pma")
	env := serveAsUser(t, home, dev, "--ip", "10.78.0.1/24")
	pma := func(args ...string) string {
		t.Helper()
		out, err := runUser(t, userCommand(t, home, env, prog, append([]string{dev}, args...)...), 60*time.Second)
		if err != nil {
			t.Fatalf("umad_pma: %v\n%s", err, out)
		}
		return out
	}
	before := pmaCounters(t, pma())
	t.Logf("before the pingpong: %v", before)
	if before["capability_mask"] != 0x0200 {
		t.Errorf("ClassPortInfo CapabilityMask %#x, rxe's is 0x0200 (IB_PMA_CLASS_CAP_EXT_WIDTH)", before["capability_mask"])
	}
	const iters, size = 500, 4096
	pingpongs(t, home, env, tool, []string{"-d", dev, "-g", "1", "-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-p", "18842"},
		"4096000 bytes in", "4096000 bytes in")
	after := pmaCounters(t, pma())
	t.Logf("after: %v", after)
	// Both programs are on this port: it sends and receives every
	// message, 4 KiB in 4 packets at the default 1024-byte MTU.
	moved := uint64(2 * iters * size)
	for _, c := range []struct {
		name  string
		least uint64
	}{
		{"port_xmit_data", moved / 4},
		{"port_rcv_data", moved / 4},
		{"port_xmit_packets", 2 * iters * size / 1024},
		{"port_rcv_packets", 2 * iters * size / 1024},
	} {
		if d := after[c.name] - before[c.name]; after[c.name] < before[c.name] || d < c.least {
			t.Errorf("%s moved by %d over the pingpong (%d before, %d after), want at least %d",
				c.name, d, before[c.name], after[c.name], c.least)
		}
	}
	if after["link_downed"] != 0 {
		t.Errorf("link_downed %d, want 0", after["link_downed"])
	}
	// The kernel's sysfs shows the same PMA counters (ports/1/counters,
	// rewritten every uverbsd.CounterRefresh): read with cat, through
	// the preload library.
	for _, name := range []string{"port_xmit_data", "port_rcv_packets"} {
		path := "/sys/class/infiniband/" + dev + "/ports/1/counters/" + name
		var v uint64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out, err := runUser(t, userCommand(t, home, env, "cat", path), 30*time.Second)
			if err != nil {
				t.Fatalf("cat %s: %v\n%s", path, err, out)
			}
			if v, err = strconv.ParseUint(strings.TrimSpace(out), 10, 64); err != nil {
				t.Fatalf("%s reads %q", path, out)
			}
			if v >= after[name] || time.Now().After(deadline) {
				break
			}
		}
		if v < after[name] {
			t.Errorf("%s reads %d, below the PMA's %d read before it", path, v, after[name])
		}
	}
	out := pma("checks")
	if !strings.HasSuffix(out, "done\n") || strings.Contains(out, "FAIL") {
		t.Fatalf("umad_pma checks:\n%s", out)
	}
	if n := strings.Count(out, ": ok\n"); n < 20 {
		t.Fatalf("umad_pma made %d checks, want 20:\n%s", n, out)
	}
}

// TestPerfqueryFailsAsOnKernelRxe: Debian's perfquery opens umad0 and
// registers agents for the subnet management class (QP0) besides the
// performance class; a RoCE port has no QP0, and ib_umad refuses the
// registration (ib_register_mad_agent: EPROTONOSUPPORT), so perfquery
// ends as it does on kernel rxe, before sending a MAD; the PMA it would
// read answers other libibumad programs (TestUmadPMACountersMoveWithTraffic).
func TestPerfqueryFailsAsOnKernelRxe(t *testing.T) {
	perfquery := diagTool(t, "perfquery")
	needCC(t)
	const dev = "rxe43"
	home := userHome(t)
	serveAsUser(t, home, dev)
	for _, args := range [][]string{{perfquery}, {perfquery, "-x", "-C", dev, "-P", "1"}} {
		out, err := runUser(t, userCommand(t, home, nil, "softroce", append([]string{"run", "-d", dev, "--"}, args...)...), 60*time.Second)
		if err == nil || !strings.Contains(out, "client_register for mgmt 1 failed") {
			t.Errorf("%s: %v, want the SMI class's registration refused:\n%s", strings.Join(args, " "), err, out)
		}
	}
}
