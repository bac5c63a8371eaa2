package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/uverbsd"
)

// distroTool checks that tool (from Debian package pkg), the libibverbs
// it links and the rxe provider are the distribution's own files (dpkg owns
// them), so the test runs the unmodified userspace a user has.
func distroTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	testenv.Require(t, err == nil, tool+" is not installed (Debian package "+pkg+")")
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
	if got := owner(path); got != pkg {
		t.Fatalf("%s belongs to %q, not %s", path, got, pkg)
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

// userCommand returns the command "PROGRAM ARGS..." run as a user would
// run it: as root it drops to nobody with setpriv (no capabilities, no
// groups), with that user's own runtime and cache directories in home;
// otherwise as the current user. A PROGRAM of "softroce" is the test's
// build of softroce. Give one home to the commands that must share a
// daemon: they share the home's loopback-only network namespace too (see
// userHome), so a program that falls back to the kernel's TCP/IP reaches
// nothing outside it.
func userCommand(t *testing.T, home string, env []string, prog string, args ...string) *exec.Cmd {
	t.Helper()
	return userCommandIn(t, nil, home, env, prog, args...)
}

// userCommandIn is userCommand in the network namespace ns, or in the
// home's loopback-only one when ns is nil.
func userCommandIn(t *testing.T, ns *testenv.NetNS, home string, env []string, prog string, args ...string) *exec.Cmd {
	t.Helper()
	if prog == "softroce" {
		prog = filepath.Join(home, "softroce")
		if _, err := os.Stat(prog); err != nil {
			b, err := os.ReadFile(softrocePath(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(prog, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + home,
		"XDG_RUNTIME_DIR=" + filepath.Join(home, "run"), "XDG_CACHE_HOME=" + filepath.Join(home, "cache")}, env...)
	line := append([]string{prog}, args...)
	if os.Geteuid() == 0 {
		_, err := exec.LookPath("setpriv")
		testenv.Require(t, err == nil, "setpriv is not installed (util-linux)")
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		line = append([]string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}, line...)
	}
	switch {
	case ns != nil:
		line = append([]string{"ip", "netns", "exec", ns.Name}, line...)
	default:
		return inHomeNet(t, home, &exec.Cmd{Args: line, Env: env})
	}
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Env, cmd.WaitDelay = env, programWaitDelay
	return cmd
}

// programWaitDelay bounds how long Wait waits for a program's output pipes
// once the program ended (exec.Cmd.WaitDelay): a process it left behind
// holding them (a daemon `softroce run` started) must not keep a test
// that killed a hung program waiting past its own timeout.
const programWaitDelay = 10 * time.Second

// homeNets maps a home made by userHome to its loopback-only network
// namespace.
var homeNets sync.Map

// inHomeNet returns cmd run in the loopback-only network namespace of
// home, for commands not made by userCommand (a chroot's, say).
func inHomeNet(t *testing.T, home string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	n, ok := homeNets.Load(home)
	if !ok {
		t.Fatalf("home %s was not made by userHome", home)
	}
	line := append(n.(*testenv.LoopbackNet).Prefix(), cmd.Args...)
	c := exec.Command(line[0], line[1:]...)
	c.Env, c.Dir, c.WaitDelay = cmd.Env, cmd.Dir, programWaitDelay
	return c
}

// userHome makes a home for userCommand: readable by everyone, its run
// and cache directories the user's own, and a network namespace with only
// a loopback for the commands run in it: the in-memory link's addresses
// are softroce's own, and a program that gives up on RDMA and tries them
// with the kernel's TCP/IP must not reach whatever owns them on the host's
// network.
func userHome(t *testing.T) string {
	t.Helper()
	return userHomeWith(t, "")
}

// userHomeWith is userHome whose network namespace is set up further by
// the shell commands setup (testenv.NewLoopbackNetWith).
func userHomeWith(t *testing.T, setup string) string {
	t.Helper()
	home, err := os.MkdirTemp("", "softroce-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	homeNets.Store(home, testenv.NewLoopbackNetWith(t, setup))
	t.Cleanup(func() { homeNets.Delete(home) })
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	for _, d := range []string{"run", "cache"} {
		p := filepath.Join(home, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// asUser runs "softroce ARGS..." with userCommand in a home of its own and
// returns stdout, stderr and the exit status.
func asUser(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := userCommand(t, userHome(t), nil, "softroce", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
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
	tool := distroTool(t, "ibv_devices", "ibverbs-utils")
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

// serveAsUser starts "softroce serve -d NAME ARGS..." with userCommand in
// home and returns the environment it printed. The daemon is stopped with
// SIGTERM at the end of the test, which must end it cleanly.
func serveAsUser(t *testing.T, home, name string, args ...string) []string {
	t.Helper()
	return serveAsUserIn(t, nil, home, name, args...)
}

// serveAsUserIn is serveAsUser in the network namespace ns (nil: the
// test's own).
func serveAsUserIn(t *testing.T, ns *testenv.NetNS, home, name string, args ...string) []string {
	t.Helper()
	return startServe(t, userCommandIn(t, ns, home, nil, "softroce", append([]string{"serve", "-d", name}, args...)...))
}

// startServe starts serve, a "softroce serve" command, and returns the
// environment it printed; the test's end stops it as serveAsUser's.
func startServe(t *testing.T, serve *exec.Cmd) []string {
	t.Helper()
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var serveErr bytes.Buffer
	if serve.Stderr != nil {
		serve.Stderr = io.MultiWriter(&serveErr, serve.Stderr)
	} else {
		serve.Stderr = &serveErr
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stdout)
	var env []string
	for len(env) < len(uverbsd.Env("", "")) { // its export lines
		line, err := br.ReadString('\n')
		if err != nil {
			serve.Process.Kill()
			serve.Wait()
			t.Fatalf("serve output ended after %q: %v\nstderr: %s", env, err, serveErr.String())
		}
		if kv, ok := strings.CutPrefix(strings.TrimSpace(line), "export "); ok {
			env = append(env, kv)
		}
	}
	t.Cleanup(func() {
		serve.Process.Signal(syscall.SIGTERM)
		if err := serve.Wait(); err != nil {
			t.Errorf("serve after SIGTERM: %v\nstderr: %s", err, serveErr.String())
		}
	})
	return env
}

// envValue returns the value of key in env.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestServePrintsTheEnvironmentForPrograms: "softroce serve", run by an
// unprivileged user, prints export lines; a program started with them (as
// a CI step would after eval) sees the device; SIGTERM ends the daemon
// cleanly and takes its socket away.
func TestServePrintsTheEnvironmentForPrograms(t *testing.T) {
	tool := distroTool(t, "ibv_devices", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	var sock string
	t.Run("serve", func(t *testing.T) {
		env := serveAsUser(t, home, "rxe4")
		sock = envValue(env, "SOFTROCE_SOCK")
		if sock == "" {
			t.Fatalf("no SOFTROCE_SOCK in %q", env)
		}
		if st, err := os.Stat(filepath.Dir(sock)); err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("socket directory: %v %v, want mode 0700", st.Mode(), err)
		}
		out, err := userCommand(t, home, env, tool).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "rxe4") {
			t.Fatalf("ibv_devices with serve's environment: %v\n%s", err, out)
		}
	})
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket after serve ended: %v", err)
	}
}
