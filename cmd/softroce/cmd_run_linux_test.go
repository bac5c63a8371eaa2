package main

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// distroTool checks that tool, the libibverbs it links and the rxe
// provider are the distribution's own files (dpkg owns them), so the test
// runs the unmodified userspace a user has.
func distroTool(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	testenv.Require(t, err == nil, tool+" is not installed (Debian package ibverbs-utils)")
	owner := func(p string) string {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("dpkg", "-S", real).Output()
		if err != nil {
			// usrmerge: dpkg knows /lib, the path may say /usr/lib.
			out, err = exec.Command("dpkg", "-S", strings.TrimPrefix(real, "/usr")).Output()
		}
		testenv.Require(t, err == nil, "dpkg does not own "+real)
		pkg, _, _ := strings.Cut(string(out), ":")
		return pkg
	}
	if pkg := owner(path); pkg != "ibverbs-utils" {
		t.Fatalf("%s belongs to %q, not ibverbs-utils", path, pkg)
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", path, err)
	}
	var libibverbs string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && strings.HasPrefix(f[0], "libibverbs.so") {
			libibverbs = f[2]
		}
	}
	if libibverbs == "" {
		t.Fatalf("ldd %s shows no libibverbs:\n%s", path, out)
	}
	if pkg := owner(libibverbs); pkg != "libibverbs1" {
		t.Fatalf("%s belongs to %q, not libibverbs1", libibverbs, pkg)
	}
	rxe, err := filepath.Glob("/usr/lib/*/libibverbs/librxe-rdmav34.so")
	if err != nil || len(rxe) == 0 {
		t.Fatal("librxe-rdmav34.so not found (Debian package ibverbs-providers)")
	}
	if pkg := owner(rxe[0]); pkg != "ibverbs-providers" {
		t.Fatalf("%s belongs to %q, not ibverbs-providers", rxe[0], pkg)
	}
	return path
}

// asUser runs "softroce ARGS..." as a user would: as root it drops to
// nobody with setpriv (no capabilities, no groups), with that user's own
// runtime and cache directories; otherwise as the current user. It
// returns stdout, stderr and the exit status.
func asUser(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	bin := softrocePath(t)
	home, err := os.MkdirTemp("", "softroce-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(home, "softroce")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home,
		"XDG_RUNTIME_DIR=" + filepath.Join(home, "run"), "XDG_CACHE_HOME=" + filepath.Join(home, "cache")}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, d := range []string{"run", "cache"} {
			p := filepath.Join(home, d)
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		_, err = exec.LookPath("setpriv")
		testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
		cmd = exec.Command("setpriv", append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--", exe}, args...)...)
	} else {
		cmd = exec.Command(exe, args...)
	}
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestIbvDevicesListsTheDevice: Debian's unmodified ibv_devices, run
// through "softroce run" by an unprivileged user on a host without
// /dev/infiniband or the RDMA netlink family, lists the served device with
// its node GUID.
func TestIbvDevicesListsTheDevice(t *testing.T) {
	tool := distroTool(t, "ibv_devices")
	needCC(t)
	out, errOut, code := asUser(t, "run", "-d", "rxe3", "--", tool)
	if code != 0 {
		t.Fatalf("softroce run -- ibv_devices: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var found bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "rxe3" && len(f[1]) == 16 {
			found = true
		}
	}
	if !found {
		t.Fatalf("ibv_devices does not list rxe3 with a node GUID:\n%s", out)
	}
}
