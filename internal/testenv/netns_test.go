//go:build linux

package testenv

import (
	"net"
	"os/exec"
	"strings"
	"testing"
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
