package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/softroce/softroce/uverbsd"
)

// userDirs points the per-user runtime and cache directories at the test's.
func userDirs(t *testing.T) {
	t.Helper()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
}

func needCC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler to build the preload library:", err)
	}
}

func TestRunExitStatusIsTheProgramsAndSeesTheEnvironment(t *testing.T) {
	needCC(t)
	userDirs(t)
	var out, errb bytes.Buffer
	code := run([]string{"run", "--", "sh", "-c", `test -S "$SOFTROCE_SOCK" && test -f "$SYSFS_PATH/class/infiniband_verbs/uverbs0/ibdev" && echo "$LD_PRELOAD"; exit 7`}, &out, &errb)
	if code != 7 {
		t.Fatalf("exit status %d, want the program's 7; stderr: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "libsoftroce-preload-") {
		t.Fatalf("the program did not see the daemon's socket, tree and library: %q", out.String())
	}
}

// TestProgramEnvSetsTheDeviceAndKeepsTheUsersDefaults: the program's
// environment has the device's variables over the user's, libraries the
// user preloads after softroce's, and UCX's mmap hooks off unless the user
// set their mode.
func TestProgramEnvSetsTheDeviceAndKeepsTheUsersDefaults(t *testing.T) {
	dev := uverbsd.Env("/run/d", "/cache/p.so")
	for _, tc := range []struct {
		base, want []string
	}{
		{[]string{"HOME=/h", "SYSFS_PATH=/sys", "LD_PRELOAD=/u.so"},
			[]string{"HOME=/h", "SYSFS_PATH=/run/d/sysfs", "LD_PRELOAD=/cache/p.so:/u.so", "SOFTROCE_SOCK=/run/d/sock", "UCX_MEM_MMAP_HOOK_MODE=none"}},
		{[]string{"UCX_MEM_MMAP_HOOK_MODE=bistro"},
			[]string{"UCX_MEM_MMAP_HOOK_MODE=bistro", "LD_PRELOAD=/cache/p.so", "SYSFS_PATH=/run/d/sysfs", "SOFTROCE_SOCK=/run/d/sock"}},
	} {
		if got := programEnv(tc.base, dev); !slices.Equal(got, tc.want) {
			t.Errorf("programEnv(%q) = %q, want %q", tc.base, got, tc.want)
		}
	}
}

func TestRunUsesTheServingDaemon(t *testing.T) {
	needCC(t)
	userDirs(t)
	var errb bytes.Buffer
	lf := &linkFlags{dev: "rxe5"}
	dir, err := uverbsd.DeviceDir(lf.dev)
	if err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(&env{stdout: &errb, stderr: &errb}, lf, &daemonFlags{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	// A second daemon on the name would fail (EADDRINUSE): run must use
	// the one that serves.
	var out bytes.Buffer
	if code := run([]string{"run", "-d", "rxe5", "--", "sh", "-c", `cat "$SYSFS_PATH/class/infiniband_verbs/uverbs0/ibdev"`}, &out, &errb); code != 0 {
		t.Fatalf("exit status %d: %s", code, errb.String())
	}
	if out.String() != "rxe5\n" {
		t.Fatalf("ibdev %q", out.String())
	}
	out.Reset()
	if code := run([]string{"env", "-d", "rxe5"}, &out, &errb); code != 0 {
		t.Fatalf("env: exit status %d: %s", code, errb.String())
	}
	for _, want := range []string{"export LD_PRELOAD=", "export SYSFS_PATH=" + d.srv.SysfsPath(), "export SOFTROCE_SOCK=" + d.srv.SocketPath()} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("env output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestServeRefusesNamesLibrxeIgnores(t *testing.T) {
	userDirs(t)
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "-d", "softroce0"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `starting with "rxe"`) {
		t.Fatalf("serve -d softroce0: exit %d, stderr %q", code, errb.String())
	}
	if code := run([]string{"run", "-d", "rxe/../x", "--", "true"}, &out, &errb); code != 1 {
		t.Fatalf("run -d rxe/../x: exit %d", code)
	}
}
