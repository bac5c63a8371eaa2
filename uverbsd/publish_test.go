package uverbsd_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/uverbsd"
)

var gidStress = flag.Duration("gidstress", 0, "how long TestGIDRefreshIsAtomicForReaders rewrites the GID table (0: 20s under CI=true, 3s otherwise)")

// gidStressTime is -gidstress, or its default: the full 20 s under CI's
// root run, 3 s elsewhere.
func gidStressTime() time.Duration {
	switch {
	case *gidStress > 0:
		return *gidStress
	case testenv.InCI():
		return 20 * time.Second
	}
	return 3 * time.Second
}

// TestTreeIsPublishedOnlyWhenOpenable: with PublishLater the device is not
// listed (no tree under its name) until Publish, though the socket
// listens; after Publish it is listed and Ready; Close takes the tree
// away before the socket, and leaves no temporary tree behind.
func TestTreeIsPublishedOnlyWhenOpenable(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dir := filepath.Join(t.TempDir(), "rxe0")
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir, PublishLater: true})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	if _, err := os.Stat(srv.SysfsPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tree before Publish: %v, want it absent", err)
	}
	if uverbsd.Ready(dir) {
		t.Fatal("Ready before Publish")
	}
	if pid, held := uverbsd.Held(dir); !held || pid != os.Getpid() {
		t.Fatalf("Held = %d, %v; want this process's pid, true", pid, held)
	}
	if err := srv.Publish(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(); err != nil {
		t.Fatalf("Publish again: %v", err)
	}
	if !uverbsd.Ready(dir) {
		t.Fatal("not Ready after Publish")
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if uverbsd.Ready(dir) {
		t.Fatal("Ready after Close")
	}
	if _, held := uverbsd.Held(dir); held {
		t.Fatal("Held after Close")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "lock" {
			t.Errorf("%s left in the daemon's directory after Close", e.Name())
		}
	}
}

// TestStaleDaemonIsReplaced: what a daemon killed with SIGKILL leaves (its
// published tree, a half-built one, its socket, its lock file with its
// pid) is replaced by the next New on the name, without cleanup. Held is
// false for it (the lock went with the process) and Ready too (nobody
// accepts), so nothing waits on it.
func TestStaleDaemonIsReplaced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rxe0")
	if err := uverbsd.PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sysfs/class/infiniband_verbs/uverbs0/ibdev", ".sysfs.new/class/infiniband_verbs/abi_version"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("stale\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "lock"), []byte("999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, uverbsd.SocketName)}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if _, held := uverbsd.Held(dir); held {
		t.Fatal("a dead daemon's lock reads as held")
	}
	if uverbsd.Ready(dir) {
		t.Fatal("a dead daemon's tree and socket read as ready")
	}
	start := time.Now()
	err = uverbsd.WaitReady(dir, 50*time.Millisecond)
	if !errors.Is(err, uverbsd.ErrNotReady) || time.Since(start) > time.Second {
		t.Fatalf("WaitReady on a dead daemon: %v after %v, want ErrNotReady at once", err, time.Since(start))
	}
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir})
	if err != nil {
		t.Fatalf("New over a dead daemon's files: %v", err)
	}
	go srv.Serve()
	defer srv.Close()
	if !uverbsd.Ready(dir) {
		t.Fatal("the new daemon is not ready")
	}
	b, err := os.ReadFile(filepath.Join(srv.SysfsPath(), "class/infiniband_verbs/uverbs0/ibdev"))
	if err != nil || string(b) != "rxe0\n" {
		t.Fatalf("ibdev = %q, %v: the stale tree was not replaced", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".sysfs.new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the half-built tree is still there: %v", err)
	}
	if pid, held := uverbsd.Held(dir); !held || pid != os.Getpid() {
		t.Fatalf("Held = %d, %v; want this process's pid, true", pid, held)
	}
	if _, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir}); !errors.Is(err, unix.EADDRINUSE) ||
		!bytes.Contains([]byte(err.Error()), []byte("pid "+strconv.Itoa(os.Getpid()))) {
		t.Fatalf("a second daemon: %v, want EADDRINUSE naming the holder's pid", err)
	}
}

// TestGIDRefreshIsAtomicForReaders: while the GID table is rewritten
// (IPv4 and IPv6 addresses added and removed at once, and IPv6 ones
// added through duplicate address detection), four programs run Debian's
// `ibv_devinfo -v` in a loop: none fails a read (every run exits 0 and
// prints nothing on stderr). -gidstress sets the duration.
func TestGIDRefreshIsAtomicForReaders(t *testing.T) {
	tool, err := exec.LookPath("ibv_devinfo")
	testenv.Require(t, err == nil, "ibv_devinfo is not installed (Debian package ibverbs-utils)")
	so, _ := tools(t)
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dir := filepath.Join(t.TempDir(), "rxe0")
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		changes atomic.Int64
		runs    atomic.Int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		h := n.Host()
		for i := 0; !stop.Load(); i++ {
			var ps []netip.Prefix
			for j := range 3 {
				ps = append(ps, netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.1/24", 50+j, i%200)),
					netip.MustParsePrefix(fmt.Sprintf("fd00:%x:%x::1/64", j+1, i%200)))
			}
			for _, p := range ps {
				if err := h.AddAddr(p); err != nil {
					t.Errorf("add %v: %v", p, err)
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
			for _, p := range ps {
				h.RemoveAddr(p.Addr())
			}
			changes.Add(1)
		}
	}()
	// IPv6 addresses whose GIDs appear once their duplicate address
	// detection is over, as the kernel adds them (NETDEV_UP after DAD).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			p := netip.MustParsePrefix(fmt.Sprintf("fd01:%x::1/64", i%200))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.AddAddr(ctx, p)
			cancel()
			if err != nil {
				t.Errorf("add %v with DAD: %v", p, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
			n.Host().RemoveAddr(p.Addr())
			changes.Add(1)
		}
	}()
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				cmd := exec.Command(tool, "-v", "-d", "rxe0")
				cmd.Env = append(os.Environ(), srv.Env(so)...)
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				if err := cmd.Run(); err != nil || errb.Len() > 0 {
					select {
					case errs <- fmt.Sprintf("ibv_devinfo -v: %v\nstderr: %s\nstdout: %s", err, errb.String(), out.String()):
					default:
					}
					stop.Store(true)
					return
				}
				runs.Add(1)
			}
		}()
	}
	time.Sleep(gidStressTime())
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	t.Logf("%d runs of ibv_devinfo -v over %d rewrites of the GID table", runs.Load(), changes.Load())
	if runs.Load() == 0 || changes.Load() == 0 {
		t.Fatal("nothing ran")
	}
}

// TestPortStateFollowsTheLink: the port's state and phys_state files
// follow the link going down and up (IB_EVENT_PORT_ERR,
// IB_EVENT_PORT_ACTIVE), as the kernel's attributes read the port.
func TestPortStateFollowsTheLink(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: filepath.Join(t.TempDir(), "rxe0")})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close()
	state := filepath.Join(srv.SysfsPath(), "class/infiniband/rxe0/ports/1/state")
	waitFor := func(want string) {
		t.Helper()
		var got []byte
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if got, err = os.ReadFile(state); err == nil && string(got) == want {
				return
			}
		}
		t.Fatalf("ports/1/state = %q, %v; want %q", got, err, want)
	}
	waitFor("4: ACTIVE\n")
	n.SetDeviceLink(false)
	waitFor("1: DOWN\n")
	n.SetDeviceLink(true)
	waitFor("4: ACTIVE\n")
}
