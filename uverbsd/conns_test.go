package uverbsd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbsd"
)

// TestManyConnectionsHoldFewThreads opens the device far more often than
// MaxPollingConns connections wait in poll(2): each open is served (OPEN
// and a WRITE answered, the last ones too), the daemon creates about
// MaxPollingConns threads for them, not one per open, and Close ends
// them all. A client that opens the device thousands of times must not
// exhaust the daemon's threads: the Go runtime ends a process past its
// limit of 10,000.
func TestManyConnectionsHoldFewThreads(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: filepath.Join(t.TempDir(), "rxe0"), NoRDMACM: true,
		MaxConnsPerClient: 1 << 20, Open: func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File { return nopFile{} }})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	threads := pprof.Lookup("threadcreate")
	before := threads.Count()
	const opens = 2*uverbsd.MaxPollingConns + 200
	conns := make([]*net.UnixConn, 0, opens)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range opens {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: srv.SocketPath(), Net: "unixpacket"})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		conns = append(conns, c)
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode)), nil); h.Ret != 0 {
			t.Fatalf("OPEN %d: %d", i, h.Ret)
		}
	}
	// Every connection waits for its next frame now; the first and the
	// last still answer.
	for _, c := range []*net.UnixConn{conns[0], conns[opens-1]} {
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpWrite}, make([]byte, 16)), nil); h.Ret != 16 {
			t.Errorf("WRITE answered %d, want 16", h.Ret)
		}
	}
	if grown := threads.Count() - before; grown > uverbsd.MaxPollingConns+150 {
		t.Errorf("%d opens made the daemon create %d threads, want about %d (MaxPollingConns)", opens, grown, uverbsd.MaxPollingConns)
	}
	closeServer(t, srv, served)
}

// procStatus reads this process's threads (/proc/self/status Threads) and
// resident bytes (/proc/self/statm) after a garbage collection that
// returns free memory to the system (debug.FreeOSMemory).
func procStatus(t *testing.T) (threads int, rss uint64) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	b, err = os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	var size, res uint64
	fmt.Sscan(string(b), &size, &res)
	return threads, res * uint64(os.Getpagesize())
}

// TestClosedConnectionsGiveBackMemoryAndThreads: 3,000 connections opened
// (each OPEN answered) and closed leave the daemon within twice the
// threads and the resident memory it started with: an idle connection
// holds no frame buffer (framePool) and a connection's poll(2) thread ends
// with it.
func TestClosedConnectionsGiveBackMemoryAndThreads(t *testing.T) {
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	// Each connection costs the test a descriptor and the daemon up to
	// four (the Go runtime raised the soft limit to the hard one).
	testenv.Require(t, nofile.Cur >= 16000, fmt.Sprintf("RLIMIT_NOFILE is %d, 3,000 connections need 16,000", nofile.Cur))
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: filepath.Join(t.TempDir(), "rxe0"), NoRDMACM: true,
		MaxFiles: 1 << 20, MaxConnsPerClient: 1 << 20, Open: func(dev *emu.Device, mem uverbsd.Memory) uverbsd.File { return nopFile{} }})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	threads0, rss0 := procStatus(t)
	const opens = 3000
	conns := make([]*net.UnixConn, 0, opens)
	for i := range opens {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: srv.SocketPath(), Net: "unixpacket"})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		conns = append(conns, c)
		if h := exchange(t, c, preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte(uverbsd.UverbsNode)), nil); h.Ret != 0 {
			t.Fatalf("OPEN %d: %d", i, h.Ret)
		}
	}
	threads1, rss1 := procStatus(t)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline := time.Now().Add(20 * time.Second)
	for srv.Clients() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := srv.Clients(); c > 0 {
		t.Fatalf("%d clients left 20 s after they closed", c)
	}
	var threads2 int
	var rss2 uint64
	for range 50 { // the poll(2) threads end as their goroutines do
		if threads2, rss2 = procStatus(t); threads2 <= 2*threads0 && rss2 <= 2*rss0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("threads %d, %d with %d connections open, %d after; RSS %d KiB, %d KiB, %d KiB",
		threads0, threads1, opens, threads2, rss0>>10, rss1>>10, rss2>>10)
	if threads2 > 2*threads0 {
		t.Errorf("%d threads after the connections closed, more than twice the %d at the start", threads2, threads0)
	}
	if rss2 > 2*rss0 {
		t.Errorf("RSS %d KiB after the connections closed, more than twice the %d KiB at the start", rss2>>10, rss0>>10)
	}
	closeServer(t, srv, served)
}
