//go:build linux

package testenv

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewNetNS(t *testing.T) {
	ns := NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "srbr0", "type", "bridge")
	// The interface exists inside, not outside.
	if _, err := net.InterfaceByName("srbr0"); err == nil {
		t.Fatal("an interface made in the namespace is visible outside it")
	}
	var inside bool
	if err := ns.Do(func() error {
		_, err := net.InterfaceByName("srbr0")
		inside = err == nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !inside {
		t.Error("Do does not run in the namespace")
	}
	if out := ns.Run(t, "ip", "-o", "link", "show", "lo"); !strings.Contains(out, "UP") {
		t.Errorf("loopback not up: %s", out)
	}
	t.Run("removed after the test", func(t *testing.T) {
		var inner string
		t.Run("make", func(t *testing.T) { inner = NewNetNS(t).Name })
		if out, _ := exec.Command("ip", "netns", "list").CombinedOutput(); strings.Contains(string(out), inner+" ") || strings.Contains(string(out), inner+"\n") {
			t.Errorf("namespace %s still listed after its test ended:\n%s", inner, out)
		}
	})
}

// TestLoopbackNetReachesNothingButItsLoopback: a program run in the
// namespace, as the test's own user, sees only an up loopback, has no route
// to the in-memory link's addresses (so no fallback can leave), no
// capability, and reaches a listener on 127.0.0.1 run in the same
// namespace.
func TestLoopbackNetReachesNothingButItsLoopback(t *testing.T) {
	n := NewLoopbackNet(t)
	out, err := n.Command("ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], ": lo:") || !strings.Contains(lines[0], "UP") {
		t.Fatalf("interfaces in the namespace, want only lo up:\n%s", out)
	}
	if out, err := n.Command("ip", "route", "get", "10.0.0.2").CombinedOutput(); err == nil {
		t.Errorf("a route to 10.0.0.2 in the namespace: %s", out)
	}
	out, err = n.Command("sh", "-c", "id -u; grep CapEff /proc/self/status").CombinedOutput()
	if err != nil {
		t.Fatalf("id: %v\n%s", err, out)
	}
	if f := strings.Fields(string(out)); len(f) != 3 || f[0] != strconv.Itoa(os.Geteuid()) || (os.Geteuid() != 0 && f[2] != "0000000000000000") {
		t.Errorf("identity in the namespace: %q, want uid %d and no capability", out, os.Geteuid())
	}
	// A listener and a client, each a command of its own, meet on the
	// namespace's loopback (and the test's own loopback is another one).
	busybox, err := exec.LookPath("busybox")
	Require(t, err == nil, "busybox is not installed (its nc is the listener and the client)")
	srv := n.Command(busybox, "nc", "-l", "-p", "18999", "-e", "echo", "hello")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	for i := 0; ; i++ {
		out, err := n.Command(busybox, "nc", "127.0.0.1", "18999").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "hello" {
			break
		}
		if i == 100 {
			t.Fatalf("no answer from the namespace's 127.0.0.1:18999: %v %q", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLoopbackNetWithSetup: the setup commands run with CAP_NET_ADMIN in
// the namespace (as root or not): a TAP there carries an address.
func TestLoopbackNetWithSetup(t *testing.T) {
	_, err := os.Stat("/dev/net/tun")
	Require(t, err == nil, "no /dev/net/tun (the tun module)")
	n := NewLoopbackNetWith(t, "ip tuntap add dev t9 mode tap && ip addr add 10.9.9.1/24 dev t9 && ip link set t9 up")
	out, err := n.Command("ip", "-o", "-4", "addr", "show", "dev", "t9").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.9.9.1/24") {
		t.Fatalf("t9 in the namespace: %v, want 10.9.9.1/24:\n%s", err, out)
	}
}
