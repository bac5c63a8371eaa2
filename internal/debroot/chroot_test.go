package debroot

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// trixie returns the Debian 13 RDMA tree, built once per test binary.
func trixie(t *testing.T) *Tree {
	t.Helper()
	tr := ForTest(t, TrixieRDMA())
	_, err := exec.LookPath("dpkg-query")
	testenv.Require(t, err == nil, "dpkg-query is not installed")
	return tr
}

// emptySysfs returns a directory laid out as sysfs is on a host with
// ib_uverbs loaded and no RDMA device: the uverbs class and its ABI
// version, nothing else. mode is the directory's permission.
func emptySysfs(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	verbs := filepath.Join(dir, "class", "infiniband_verbs")
	if err := os.MkdirAll(verbs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(verbs, "abi_version"), []byte("6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTrixieTreeHoldsDebian13Packages checks the tree is Debian 13's
// userspace: the tree's dpkg database, read by the host's dpkg-query and
// dpkg, gives rdma-core 56 and perftest 25 and says which package
// installed each tool, and every recorded version is the one Build
// reports.
func TestTrixieTreeHoldsDebian13Packages(t *testing.T) {
	tr := trixie(t)
	for _, c := range []struct{ pkg, prefix string }{
		{"ibverbs-utils", "56."},
		{"ibverbs-providers", "56."},
		{"libibverbs1", "56."},
		{"librdmacm1t64", "56."},
		{"rdmacm-utils", "56."},
		{"perftest", "25."},
		{"libc6", "2.41"},
	} {
		out, err := exec.Command("dpkg-query", "--root="+tr.Dir, "-W", "-f=${Version}", c.pkg).Output()
		if err != nil {
			t.Errorf("dpkg-query %s: %v", c.pkg, err)
			continue
		}
		if v := string(out); !strings.HasPrefix(v, c.prefix) || v != tr.Versions[c.pkg] {
			t.Errorf("%s is %q in the tree, Build reports %q; want %s*", c.pkg, v, tr.Versions[c.pkg], c.prefix)
		}
	}
	for _, c := range []struct{ path, pkg string }{
		{"/usr/bin/ibv_devices", "ibverbs-utils"},
		{"/usr/bin/ib_write_bw", "perftest"},
		{"/usr/bin/rping", "rdmacm-utils"},
		{"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so", "ibverbs-providers"},
	} {
		out, err := exec.Command("dpkg", "--root="+tr.Dir, "-S", c.path).Output()
		if err != nil {
			t.Errorf("dpkg -S %s: %v", c.path, err)
			continue
		}
		// Multi-Arch: same packages are named with their architecture.
		if want := regexp.MustCompile(`^` + regexp.QuoteMeta(c.pkg) + `(:amd64)?: ` + regexp.QuoteMeta(c.path) + "\n$"); !want.Match(out) {
			t.Errorf("dpkg -S %s = %q, want %s", c.path, out, want)
		}
		if _, err := os.Stat(filepath.Join(tr.Dir, c.path)); err != nil {
			t.Errorf("%s: %v", c.path, err)
		}
	}
}

// TestTrixieIbvDevicesRunsAsNobodyInChroot runs Debian 13's ibv_devices
// chrooted into the tree as nobody, with a sysfs tree that has the uverbs
// class and no device (what the daemon's tree looks like before a device
// exists) bound in and named by SYSFS_PATH: it must start, load the
// tree's libibverbs and print its header and no device. With the sysfs
// directory closed to other users it must fail to find the uverbs class,
// which shows it does not run as root.
func TestTrixieIbvDevicesRunsAsNobodyInChroot(t *testing.T) {
	tr := trixie(t)
	header := regexp.MustCompile(`^\s+device\s+node GUID\n\s+------\s+----------------\n$`)
	for _, c := range []struct {
		name   string
		mode   os.FileMode
		wantOK bool
	}{
		{"readable sysfs", 0o755, true},
		{"sysfs closed to nobody", 0o700, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd, err := tr.Command(ctx, []Bind{{Host: emptySysfs(t, c.mode), Path: "/run/sysfs"}},
				[]string{"PATH=/usr/bin", "SYSFS_PATH=/run/sysfs"}, "/usr/bin/ibv_devices")
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			t.Logf("stdout:\n%sstderr:\n%s", stdout.String(), stderr.String())
			if c.wantOK {
				if err != nil {
					t.Fatalf("ibv_devices: %v", err)
				}
				if !header.MatchString(stdout.String()) {
					t.Errorf("ibv_devices printed %q, want its header and no device", stdout.String())
				}
				return
			}
			if err == nil || !strings.Contains(stderr.String(), "Failed to get IB devices list") {
				t.Errorf("ibv_devices with an unreadable sysfs: %v, stderr %q; want it to fail to list devices", err, stderr.String())
			}
		})
	}
}

// TestTrixieProgramsLoadHostPreloadAndSysfs checks the path a daemon on
// the host will use to reach programs in the tree: a preload library
// built on the host with the host's C compiler, and a sysfs tree, named
// by host paths in LD_PRELOAD and SYSFS_PATH and mapped by HostPaths. The
// library's constructor reports the uid it runs as, and trixie's
// ibv_devices, as nobody in the chroot, must have loaded it and read the
// sysfs tree (its header and no device).
func TestTrixieProgramsLoadHostPreloadAndSysfs(t *testing.T) {
	tr := trixie(t)
	cc, err := exec.LookPath("gcc")
	testenv.Require(t, err == nil, "gcc is not installed")
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(host, "probe.c")
	const code = `#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void probe(void) {
	fprintf(stderr, "preloaded uid=%d\n", (int)getuid());
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(host, "libprobe.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	sysfs := emptySysfs(t, 0o755)
	if err := os.Chmod(filepath.Dir(sysfs), 0o755); err != nil {
		t.Fatal(err)
	}
	env, binds := HostPaths([]string{"PATH=/usr/bin", "LD_PRELOAD=" + so, "SYSFS_PATH=" + sysfs, "TERM=dumb"}, "LD_PRELOAD", "SYSFS_PATH")
	if len(binds) != 2 || slices.Contains(env, "LD_PRELOAD="+so) || !slices.Contains(env, "TERM=dumb") {
		t.Fatalf("HostPaths = %v, %v: want both paths mapped, the rest kept", env, binds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, err := tr.Command(ctx, binds, env, "/usr/bin/ibv_devices")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ibv_devices: %v\nstderr: %s", err, stderr.String())
	}
	if want := "preloaded uid=65534\n"; stderr.String() != want {
		t.Errorf("stderr %q, want the probe's %q", stderr.String(), want)
	}
	if !strings.Contains(stdout.String(), "node GUID") {
		t.Errorf("stdout %q, want ibv_devices' header", stdout.String())
	}
}

func TestHostPathsBindsEachDirectoryOnce(t *testing.T) {
	env, binds := HostPaths([]string{
		"LD_PRELOAD=/cache/softroce/lib.so",
		"SYSFS_PATH=/run/user/1/softroce/rxe0/sysfs",
		"SOFTROCE_SOCK=/run/user/1/softroce/rxe0/sock",
		"HOME=/root",
		"OTHER=relative/path",
	}, "LD_PRELOAD", "SYSFS_PATH", "SOFTROCE_SOCK", "OTHER")
	wantEnv := []string{
		"LD_PRELOAD=/run/host/0/lib.so",
		"SYSFS_PATH=/run/host/1/sysfs",
		"SOFTROCE_SOCK=/run/host/1/sock",
		"HOME=/root",
		"OTHER=relative/path",
	}
	wantBinds := []Bind{{"/cache/softroce", "/run/host/0"}, {"/run/user/1/softroce/rxe0", "/run/host/1"}}
	if !slices.Equal(env, wantEnv) || !slices.Equal(binds, wantBinds) {
		t.Errorf("HostPaths = %v, %v; want %v, %v", env, binds, wantEnv, wantBinds)
	}
}

func TestCommandRefusesBindsOutsideRun(t *testing.T) {
	tr := &Tree{Dir: t.TempDir()}
	for _, p := range []string{"/etc", "/run/../etc", "/runx/a", "relative", "/run/.softroce/busybox"} {
		if _, err := tr.Command(context.Background(), []Bind{{Host: "/tmp", Path: p}}, nil, "/bin/true"); err == nil || !strings.Contains(err.Error(), "bind target") {
			t.Errorf("Command with a bind at %s: %v, want a bind target error", p, err)
		}
	}
	if _, err := tr.Command(context.Background(), nil, []string{"NOEQUALS"}, "/bin/true"); err == nil {
		t.Error("Command accepted an environment entry without '='")
	}
	if _, err := tr.Command(context.Background(), nil, nil, "true"); err == nil {
		t.Error("Command accepted a relative program path")
	}
}

// TestDownloadOnePackage fetches one package of Debian 13 without its
// dependencies, names the file after the suite's version, and takes it
// from the directory the second time; a follow prefix no dependency has
// is an error.
func TestDownloadOnePackage(t *testing.T) {
	tr := trixie(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	p, err := Download(ctx, TrixieRDMA(), "perftest", "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "perftest_" + tr.Versions["perftest"] + "_amd64.deb"; filepath.Base(p) != want {
		t.Errorf("downloaded %s, want %s", filepath.Base(p), want)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory, want the one package", len(ents))
	}
	again, err := Download(ctx, TrixieRDMA(), "perftest", "", dir)
	if st2, _ := os.Stat(again); err != nil || again != p || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second download: %s %v, want the same file untouched", again, err)
	}
	if _, err := Download(ctx, TrixieRDMA(), "perftest", "no-such-prefix-", dir); err == nil {
		t.Error("a follow prefix no dependency has was accepted")
	}
}

// TestForkyTreeHoldsDebian14Packages checks the tree is Debian 14's
// userspace (rdma-core 65, glibc 2.43, python3.14 with pyverbs and
// rdma-core's test suite), without rdma-core's daemons and what they
// pull in (Config.Omit) or the sysusers tools (scriptOnly).
func TestForkyTreeHoldsDebian14Packages(t *testing.T) {
	tr := ForTest(t, ForkyRDMA())
	for _, c := range []struct{ pkg, prefix string }{
		{"libibverbs1", "65."},
		{"ibverbs-providers", "65."},
		{"ibverbs-utils", "65."},
		{"python3-pyverbs", "65."},
		{"libc6", "2.43"},
		{"python3.14", "3.14"},
	} {
		if v := tr.Versions[c.pkg]; !strings.HasPrefix(v, c.prefix) {
			t.Errorf("%s is %q in the tree, want %s*", c.pkg, v, c.prefix)
		}
	}
	for _, p := range []string{"rdma-core", "udev", "systemd", "systemd-standalone-sysusers"} {
		if v, ok := tr.Versions[p]; ok {
			t.Errorf("%s %s is in the tree", p, v)
		}
	}
	for _, p := range []string{"/usr/share/doc/rdma-core/tests/run_tests.py", "/usr/bin/rdma", "/usr/bin/ib_write_bw"} {
		if _, err := os.Stat(filepath.Join(tr.Dir, p)); err != nil {
			t.Error(err)
		}
	}
}

// TestUserArgvRunsWithoutPrivilege runs forky's python3 through UserArgv
// as nobody (setpriv, when the test is root): with LD_PRELOAD naming a
// probe library by its host path (mapped into the tree), it must load the
// probe, see glibc 2.43, run as nobody with no effective capability, write
// the tree's /tmp without changing the cached tree, and make a file in a
// bound directory that on the host belongs to nobody, not root.
func TestUserArgvRunsWithoutPrivilege(t *testing.T) {
	tr := ForTest(t, ForkyRDMA())
	RequireUserArgv(t)
	cc, err := exec.LookPath("gcc")
	testenv.Require(t, err == nil, "gcc is not installed")
	host := t.TempDir()
	out := filepath.Join(host, "out")
	if err := os.Chmod(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{host, out} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(host, "probe.c")
	const code = `#include <stdio.h>
__attribute__((constructor)) static void probe(void) { fprintf(stderr, "preloaded\n"); }
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(host, "libprobe.so")
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, b)
	}
	const script = `import os, platform
open("/tmp/x", "w").write("x")
open("/run/out/made", "w").write("x")
capeff = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
print(platform.libc_ver()[1], os.path.exists("/tmp/x"), os.geteuid(), os.getegid(), capeff)`
	argv, err := tr.UserArgv([]Bind{{Host: out, Path: "/run/out"}}, []string{"PATH=/usr/bin"}, []string{"LD_PRELOAD"},
		"/usr/bin/python3", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_PRELOAD=" + so}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if got, want := stdout.String(), "2.43 True 65534 65534 0000000000000000\n"; got != want {
		t.Errorf("stdout %q, want %q: glibc 2.43, the file in /tmp, nobody without capabilities", got, want)
	}
	if !strings.Contains(stderr.String(), "preloaded\n") {
		t.Errorf("stderr %q, want the probe's line", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(tr.Dir, "tmp", "x")); err == nil {
		t.Error("the program wrote the cached tree's /tmp")
	}
	st, err := os.Stat(filepath.Join(out, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid != 65534 {
		t.Errorf("the file the program made belongs to uid %d on the host, want nobody's 65534", uid)
	}
}

func TestUserArgvRefusesBadInput(t *testing.T) {
	tr := &Tree{Dir: t.TempDir()}
	for _, p := range []string{"/etc", "/run/../etc", "/run/.softroce/x", "/run/env", "/run/env/LD_PRELOAD"} {
		if _, err := tr.UserArgv([]Bind{{Host: "/tmp", Path: p}}, nil, nil, "/bin/true"); err == nil || !strings.Contains(err.Error(), "bind target") {
			t.Errorf("UserArgv with a bind at %s: %v, want a bind target error", p, err)
		}
	}
	for _, v := range []string{"", "A B", "1X", "X=Y", "$(id)"} {
		if _, err := tr.UserArgv(nil, nil, []string{v}, "/bin/true"); err == nil {
			t.Errorf("UserArgv accepted the variable name %q", v)
		}
	}
	for _, kv := range []string{"NOEQUALS", "=X", "A B=1"} {
		if _, err := tr.UserArgv(nil, []string{kv}, nil, "/bin/true"); err == nil {
			t.Errorf("UserArgv accepted the environment entry %q", kv)
		}
	}
	for _, argv := range [][]string{nil, {"true"}, {"/bin/a=b"}} {
		if _, err := tr.UserArgv(nil, nil, nil, argv...); err == nil {
			t.Errorf("UserArgv accepted the program %q", argv)
		}
	}
	argv, err := tr.UserArgv([]Bind{{Host: "/h", Path: "/run/x"}}, []string{"A=1"}, []string{"LD_PRELOAD", "SYSFS_PATH"}, "/usr/bin/p", "arg")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{tr.Dir, "LD_PRELOAD SYSFS_PATH", "1", "/h", "/run/x", "A=1", "/usr/bin/p", "arg"}
	if len(argv) < len(want) || !slices.Equal(argv[len(argv)-len(want):], want) || argv[1] != "--user" {
		t.Errorf("UserArgv = %q, want unshare --user ... ending %q", argv, want)
	}
}
