//go:build linux

package peer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// artifactDir returns where a test keeps its captures and console logs:
// $SOFTROCE_ARTIFACTS/<test name> if set (kept after the run), else a
// temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SOFTROCE_ARTIFACTS")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// labPrefix starts the names of the namespaces tests create; the test
// binary's pid follows it.
const labPrefix = "srpeer-"

// newTestLab creates a lab for t, deleted when t ends. It first deletes
// the namespaces earlier test binaries left behind (killed before their
// cleanup ran): those whose pid is no longer running.
func newTestLab(t *testing.T) *Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	removeStaleLabs(t, ctx)
	lab, err := NewLab(ctx, LabConfig{Name: fmt.Sprintf("%s%d-%s", labPrefix, os.Getpid(), shortName(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return lab
}

func removeStaleLabs(t *testing.T, ctx context.Context) {
	ents, _ := os.ReadDir("/var/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), labPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		if err := ipCmd(ctx, "netns", "del", e.Name()); err != nil {
			t.Logf("remove stale lab: %v", err)
		} else {
			t.Logf("removed the stale lab %s", e.Name())
		}
	}
}

func shortName(t *testing.T) string {
	n := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	if len(n) > 12 {
		n = n[:12]
	}
	return n
}

// startTestVM starts VM i of lab with its console logged to the artifact
// directory, killed when t ends.
func startTestVM(t *testing.T, ctx context.Context, lab *Lab, img *Image, dir string, i int, cmd string) *VM {
	t.Helper()
	ip4, ip6 := lab.PeerAddr(i)
	return startTestVMWith(t, ctx, lab, dir, VMConfig{Image: img, Name: fmt.Sprintf("vm%d", i), Cmd: cmd, IP: ip4, IP6: ip6,
		Timeout: 16 * time.Minute})
}

// startTestVMWith starts the VM of cfg (Console left nil) with its
// console logged to dir/NAME.console.log, killed when t ends.
func startTestVMWith(t *testing.T, ctx context.Context, lab *Lab, dir string, cfg VMConfig) *VM {
	t.Helper()
	con, err := os.Create(filepath.Join(dir, cfg.Name+".console.log"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Console = con
	vm, err := lab.StartVM(ctx, cfg)
	if err != nil {
		con.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm.Kill()
		<-vm.Done()
		con.Close()
		if t.Failed() {
			// The artifacts may live in a temporary directory that goes
			// with the test: say how the VM ended where CI shows it.
			logConsoleTail(t, con.Name(), 40)
		}
	})
	return vm
}

// logConsoleTail logs the last n lines of the console log at path.
func logConsoleTail(t *testing.T, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("console log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	t.Logf("the last %d lines of %s:\n%s", len(lines), path, strings.Join(lines, "\n"))
}

func TestVMOneShot(t *testing.T) { testVMOneShot(t, Bookworm) }

// TestVMOneShotTrixie boots Debian 13's kernel 6.12 with its rdma-core 56
// tools as TestVMOneShot boots Debian 12's.
func TestVMOneShotTrixie(t *testing.T) { testVMOneShot(t, Trixie) }

// TestVMOneShotForky boots trixie-backports' kernel 7.3 with Debian 14's
// rdma-core 65 tools as TestVMOneShot boots Debian 12's.
func TestVMOneShotForky(t *testing.T) { testVMOneShot(t, Forky) }

func testVMOneShot(t *testing.T, rel Release) {
	testenv.RequireRoot(t)
	img := buildTestImageFor(t, rel)
	lab := newTestLab(t)
	dir := artifactDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	vm := startTestVM(t, ctx, lab, img, dir, 1, `
ibv_devinfo -d rxe0 -v | grep -E 'state|active_mtu|GID\[' 
rdma link show
echo "uname $(uname -r)"
exit 7
`)
	// A second VM whose init must fail: eth0 refuses an MTU above the
	// virtio-net maximum, so init reports it and exits 255.
	ip4, _ := lab.PeerAddr(2)
	bad, err := lab.StartVM(ctx, VMConfig{Image: img, Name: "vm2", Cmd: "exit 0", IP: ip4, MTU: 70000, Timeout: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bad.Kill(); <-bad.Done() })

	st, err := vm.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := bad.Wait(); err != nil || st != 255 || !strings.Contains(bad.Console(), markerFailed+": mtu 70000") {
		t.Errorf("VM with a bad MTU: status %d, error %v, want 255 and %s%s", st, err, markerFailed, bad.tail())
	}
	t.Logf("boot %v, whole run %v; console in %s", vm.BootTime().Round(time.Millisecond), time.Since(start).Round(time.Millisecond), dir)
	if st != 7 {
		t.Errorf("exit status %d, want 7%s", st, vm.tail())
	}
	con := vm.Console()
	for _, want := range []string{
		"SOFTROCE-GID 1 0000:0000:0000:0000:0000:ffff:0a4d:000b",
		"SOFTROCE-GID 2 fd77:0000:0000:0000:0000:0000:0000:0011",
		"PORT_ACTIVE",
		"active_mtu:		4096",
		"link rxe0/1 state ACTIVE",
		"uname " + img.Release,
	} {
		if !strings.Contains(con, want) {
			t.Errorf("console lacks %q%s", want, vm.tail())
		}
	}
}
