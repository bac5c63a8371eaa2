package uverbsd_test

import (
	"context"
	"net"
	"path/filepath"
	"runtime/pprof"
	"testing"

	"github.com/softroce/softroce/emu"
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
