package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

// NetNS is a named network namespace made for one test by NewNetNS.
type NetNS struct {
	// Name is the namespace's name, as `ip netns` knows it.
	Name   string
	handle netns.NsHandle
}

var nsCounter atomic.Uint32

// NewNetNS creates a fresh named network namespace with its loopback up
// (`ip netns add NAME`, then `ip link set lo up` in it) and removes it
// when t ends, with everything left in it. It calls RequireRoot first, so
// without root the test skips (or fails under CI).
func NewNetNS(t testing.TB) *NetNS {
	t.Helper()
	RequireRoot(t)
	name := fmt.Sprintf("softroce-%d-%d", os.Getpid(), nsCounter.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		exec.Command("ip", "netns", "del", name).Run()
		t.Fatalf("opening network namespace %s: %v", name, err)
	}
	ns := &NetNS{Name: name, handle: h}
	t.Cleanup(func() {
		h.Close()
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	ns.Run(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Do runs f on an OS thread switched into the namespace and switches back
// afterwards. Sockets, TAP devices and netlink handles opened in f belong
// to the namespace and keep working after Do returns; goroutines f starts
// run in the caller's namespace. If the thread cannot be switched back it
// is left locked, so the runtime discards it.
func (ns *NetNS) Do(f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: current namespace: %w", ns.Name, err)
	}
	defer orig.Close()
	if err := netns.Set(ns.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: entering: %w", ns.Name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("netns %s: leaving: %w", ns.Name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Command returns an exec.Cmd running name with args in the namespace
// (`ip netns exec NAME ...`).
func (ns *NetNS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Run runs a command in the namespace and fails t if it fails, logging
// its output. It returns the combined output.
func (ns *NetNS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := ns.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in netns %s: %s %q: %v\n%s", ns.Name, name, args, err, out)
	}
	return string(out)
}
