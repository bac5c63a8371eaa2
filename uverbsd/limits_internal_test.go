package uverbsd

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
)

// TestAdmitBoundsEachClientAndTheDaemon: a client past its connections
// gets EMFILE while others are admitted; past the daemon's, every client
// gets ENFILE; a connection's end makes room again.
func TestAdmitBoundsEachClientAndTheDaemon(t *testing.T) {
	s := &Server{lim: limits{maxConns: 3, maxConnsPerClient: 2}, clients: map[int]*client{}}
	a1, err := s.admit(100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.admit(100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admit(100); !errors.Is(err, unix.EMFILE) {
		t.Fatalf("a client's third connection: %v, want EMFILE", err)
	}
	if _, err := s.admit(200); err != nil {
		t.Fatalf("another client: %v", err)
	}
	if _, err := s.admit(300); !errors.Is(err, unix.ENFILE) {
		t.Fatalf("the daemon's fourth connection: %v, want ENFILE", err)
	}
	s.leave(a1)
	if _, err := s.admit(300); err != nil {
		t.Fatalf("after a connection ended: %v", err)
	}
}

// TestResolveLimitsDefaults: MaxFiles defaults to half RLIMIT_NOFILE, a
// client's share to a quarter, the shared bytes to DefaultMaxShared and a
// quarter of it.
func TestResolveLimitsDefaults(t *testing.T) {
	got := resolveLimits(&Config{}, 20000)
	want := limits{maxConns: 10000 / fdsPerConn, maxConnsPerClient: 10000 / fdsPerConn / 4,
		maxShared: DefaultMaxShared, maxSharedPerClient: DefaultMaxShared / 4}
	if got != want {
		t.Fatalf("resolveLimits = %+v, want %+v", got, want)
	}
}

// TestAcceptBackoffDoublesTo1s: 5 ms, doubling, at most 1 s (net/http).
func TestAcceptBackoffDoublesTo1s(t *testing.T) {
	var b acceptBackoff
	var got []time.Duration
	for range 10 {
		got = append(got, b.next())
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoff %v, want %v ms", got, want)
		}
	}
}

// TestRatelimitAsTheKernels: ___ratelimit with burst 10 in 5 s: the first
// 10 events pass, the rest of the interval's are suppressed, and the first
// event of the next interval passes and carries their count.
func TestRatelimitAsTheKernels(t *testing.T) {
	now := time.Unix(1000, 0)
	r := ratelimit{interval: warnInterval, burst: warnBurst, now: func() time.Time { return now }}
	passed := 0
	for range 25 {
		ok, missed := r.allow()
		if missed != 0 {
			t.Fatalf("suppressed %d within the first interval", missed)
		}
		if ok {
			passed++
		}
	}
	if passed != warnBurst {
		t.Fatalf("%d of 25 passed, want %d", passed, warnBurst)
	}
	now = now.Add(warnInterval - time.Millisecond)
	if ok, _ := r.allow(); ok {
		t.Fatal("an event before the interval's end passed")
	}
	now = now.Add(time.Millisecond)
	if ok, missed := r.allow(); !ok || missed != 16 {
		t.Fatalf("the next interval's first event: %v, %d suppressed, want true, 16", ok, missed)
	}
	now = now.Add(time.Hour)
	if ok, missed := r.allow(); !ok || missed != 0 {
		t.Fatalf("after a quiet hour: %v, %d suppressed, want true, 0", ok, missed)
	}
}

// TestChargePinnedFollowsTheClientsMemlock: a client without CAP_IPC_LOCK
// whose RLIMIT_MEMLOCK is 64 KiB pins 16 pages, not one more (ENOMEM);
// the pages given back can be pinned again (ib_umem_get's pinned_vm).
func TestChargePinnedFollowsTheClientsMemlock(t *testing.T) {
	args := []string{"prlimit", "--memlock=65536:65536", "sleep", "30"}
	if os.Geteuid() == 0 {
		args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, args...)
	}
	for _, tool := range []string{"prlimit", "setpriv"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" is not installed (util-linux)")
	}
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); comm(pid) != "sleep"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d is %q, not sleep", pid, comm(pid))
		}
	}
	if ipcLockCapable(pid) {
		t.Fatal("the client has CAP_IPC_LOCK")
	}
	s := &Server{clients: map[int]*client{}}
	cl := &client{pid: pid}
	release, err := s.chargePinned(cl, pid, 16)
	if err != nil {
		t.Fatalf("16 pages within 64 KiB: %v", err)
	}
	if _, err := s.chargePinned(cl, pid, 1); !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("a 17th page: %v, want ENOMEM", err)
	}
	release()
	release() // once only
	if cl.pinned != 0 {
		t.Fatalf("%d pages pinned after the release", cl.pinned)
	}
	if _, err := s.chargePinned(cl, pid, 1); err != nil {
		t.Fatalf("a page after the release: %v", err)
	}
}
