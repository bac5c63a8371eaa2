package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
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
