package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopbackNet is a network namespace whose only interface is its loopback,
// made for one test by NewLoopbackNet. A program run in it that falls back
// from RDMA to the kernel's TCP/IP (librdmacm's rsockets, a library's TCP
// control connection) reaches nothing beyond the namespace, whatever
// address it was given: the in-memory link's 10.x addresses are softroce's
// own, and on the host they may belong to a real network.
type LoopbackNet struct {
	ns *NetNS // as root: a named namespace
	// holder is, without root, the process that keeps the user and
	// network namespaces alive; commands join its namespaces.
	holder *exec.Cmd
}

// NewLoopbackNet makes a network namespace with only its loopback, up, and
// removes it when t ends. As root it is a named namespace (NewNetNS);
// without root, a user namespace that maps only the caller's own uid and
// gid holds it, so the commands run in it keep their identity and have no
// capabilities. Where the host allows no user namespaces the test skips
// with the reason (or fails under CI, which runs as root).
func NewLoopbackNet(t testing.TB) *LoopbackNet {
	t.Helper()
	return NewLoopbackNetWith(t, "")
}

// NewLoopbackNetWith is NewLoopbackNet whose namespace is set up further
// by the shell commands setup, run in it with CAP_NET_ADMIN there (for
// example an interface that carries an address, as `ip tuntap add dev
// sr0 mode tap && ip addr add 10.78.0.1/24 dev sr0 && ip link set sr0
// up` makes).
func NewLoopbackNetWith(t testing.TB, setup string) *LoopbackNet {
	t.Helper()
	if os.Geteuid() == 0 {
		n := &LoopbackNet{ns: NewNetNS(t)}
		if setup != "" {
			if out, err := n.Command("sh", "-c", setup).CombinedOutput(); err != nil {
				t.Fatalf("loopback-only namespace: %s: %v\n%s", setup, err, out)
			}
		}
		return n
	}
	for _, tool := range []string{"nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			Require(t, false, tool+" is not installed (util-linux, iproute2): needed to run programs in a loopback-only network namespace")
		}
	}
	uid, gid := os.Getuid(), os.Getgid()
	// The holder gets CAP_NET_ADMIN in its own user namespace as an
	// ambient capability, so the ip it runs can bring the loopback up;
	// what joins later gets no capability (nsenter execs the program as
	// the same non-root uid).
	script := "ip link set lo up && echo up && exec sleep 86400"
	if setup != "" {
		script = "ip link set lo up && { " + setup + "; } >&2 && echo up && exec sleep 86400"
	}
	h := exec.Command("sh", "-c", script)
	h.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		AmbientCaps: []uintptr{unix.CAP_NET_ADMIN},
		Pdeathsig:   syscall.SIGKILL,
	}
	h.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := h.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	h.Stderr = &stderr
	if err := h.Start(); err != nil {
		Require(t, false, "this host allows no unprivileged user namespace, so a loopback-only network namespace cannot be made without root ("+err.Error()+"); run the tests as root to include this one")
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "up" {
		h.Process.Kill()
		h.Wait()
		t.Fatalf("loopback-only namespace: the loopback did not come up: %s", stderr.String())
	}
	t.Cleanup(func() {
		h.Process.Kill()
		h.Wait()
	})
	return &LoopbackNet{holder: h}
}

// Prefix returns the command line that runs a program in the namespace:
// "PREFIX... PROGRAM ARGS...".
func (n *LoopbackNet) Prefix() []string {
	if n.ns != nil {
		return []string{"ip", "netns", "exec", n.ns.Name}
	}
	return []string{"nsenter", "--target", strconv.Itoa(n.holder.Process.Pid), "--user", "--net", "--preserve-credentials", "--"}
}

// Command returns an exec.Cmd running name with args in the namespace.
func (n *LoopbackNet) Command(name string, args ...string) *exec.Cmd {
	p := n.Prefix()
	return exec.Command(p[0], append(append(p[1:], name), args...)...)
}
