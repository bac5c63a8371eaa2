package workload

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/oob"
	"golang.org/x/sys/unix"
)

// runPingpongPair runs a client on lb.A against a server on lb.B and
// returns both results.
func runPingpongPair(t *testing.T, lb *Loopback, cfg PingpongConfig, fill func([]byte)) (cl, sv *Pingpong, rc, rs PingpongResult, errc, errs error) {
	t.Helper()
	cfg.Fill = fill
	var err error
	if cl, sv, err = lb.Pingpong(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); sv.Close() })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rs, errs = sv.Run() }()
	rc, errc = cl.Run()
	wg.Wait()
	if err := errors.Join(cl.Stop(), sv.Stop()); err != nil {
		t.Fatal(err)
	}
	return
}

func TestPingpong(t *testing.T) {
	seed := testenv.Seed(t)
	for _, tc := range []struct {
		mode  oob.PingpongMode
		size  uint32
		iters uint32
		rx    uint32
		nqp   int
		check bool
	}{
		{oob.PingpongRC, 4096, 200, 500, 0, true},
		{oob.PingpongRC, 10000, 50, 8, 0, false},
		{oob.PingpongUC, 4096, 200, 500, 0, true},
		{oob.PingpongUC, 3000, 50, 4, 0, false},
		{oob.PingpongUD, 1024, 200, 500, 0, true},
		{oob.PingpongUD, 100, 50, 3, 0, false},
		{oob.PingpongSRQ, 4096, 200, 500, 16, true},
		{oob.PingpongSRQ, 5000, 64, 8, 4, false},
	} {
		t.Run(fmt.Sprintf("%s/s%d/n%d/r%d", tc.mode, tc.size, tc.iters, tc.rx), func(t *testing.T) {
			lb, err := NewLoopback(LoopbackConfig{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Close()
			rng := rand.New(rand.NewPCG(seed, 1))
			fill := func(b []byte) {
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
			}
			if tc.check {
				fill = nil // the tools' fill and -c pattern
			}
			cfg := PingpongConfig{Mode: tc.mode, Size: tc.size, Iters: tc.iters, RxDepth: tc.rx, NumQP: tc.nqp,
				GIDIndex: LoopbackGIDIndex, Check: tc.check, Seed: seed, Timeout: 5 * time.Second}
			cl, sv, rc, rs, errc, errs := runPingpongPair(t, lb, cfg, fill)
			if errc != nil || errs != nil {
				t.Fatalf("client: %v; server: %v", errc, errs)
			}
			for _, r := range []PingpongResult{rc, rs} {
				if r.Sent < int(tc.iters) || r.Received < int(tc.iters) {
					t.Errorf("sent %d received %d, want %d each", r.Sent, r.Received, tc.iters)
				}
			}
			if len(rs.InvalidPages) != 0 {
				t.Errorf("server -c check: invalid pages %v", rs.InvalidPages)
			}
			if !bytes.Equal(sv.Data(), cl.Data()) {
				t.Errorf("server buffer differs from the client's")
			}
			if tc.check && cl.Data()[0] != 0 || !tc.check && bytes.Count(cl.Data(), []byte{oob.PingpongFill}) == len(cl.Data()) {
				t.Errorf("client data is not what it should send")
			}
			if rc.Elapsed <= 0 || rc.Lines() == "" {
				t.Errorf("result %+v", rc)
			}
		})
	}
}

// TestPingpongRCFaults: RC under 5% drop, duplicate, reorder and corrupt in
// both directions still completes every exchange with the right data.
func TestPingpongRCFaults(t *testing.T) {
	seed := testenv.Seed(t)
	for _, mode := range []oob.PingpongMode{oob.PingpongRC, oob.PingpongSRQ} {
		t.Run(mode.String(), func(t *testing.T) {
			lb, err := NewLoopback(LoopbackConfig{Seed: seed, Faults: &link.FaultConfig{Seed: seed,
				Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.05}})
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Close()
			rng := rand.New(rand.NewPCG(seed, 2))
			cfg := PingpongConfig{Mode: mode, Size: 5000, Iters: 100, RxDepth: 32, NumQP: 4, GIDIndex: LoopbackGIDIndex,
				Seed: seed, QPTimeout: 8, Timeout: 20 * time.Second}
			cl, sv, _, _, errc, errs := runPingpongPair(t, lb, cfg, func(b []byte) {
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
			})
			if errc != nil || errs != nil {
				t.Fatalf("client: %v; server: %v", errc, errs)
			}
			if !bytes.Equal(sv.Data(), cl.Data()) {
				t.Errorf("server buffer differs from the client's")
			}
			st := lb.A.Flt.Stats()
			if st.Dropped+st.Corrupted == 0 {
				t.Errorf("no fault injected: %+v", st)
			}
		})
	}
}

// TestPingpongUDLoss: a lost UD message stalls the pingpong loop, as with
// the real tool; the run ends with ETIMEDOUT instead of hanging.
func TestPingpongUDLoss(t *testing.T) {
	lb, err := NewLoopback(LoopbackConfig{Faults: &link.FaultConfig{Schedule: link.ByIndex(map[uint64]link.Action{5: link.Drop})}})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	cfg := PingpongConfig{Mode: oob.PingpongUD, Size: 64, Iters: 20, GIDIndex: LoopbackGIDIndex, Timeout: 200 * time.Millisecond}
	_, _, rc, _, errc, errs := runPingpongPair(t, lb, cfg, nil)
	if !errors.Is(errc, unix.ETIMEDOUT) || !errors.Is(errs, unix.ETIMEDOUT) {
		t.Fatalf("client: %v; server: %v; want ETIMEDOUT on both", errc, errs)
	}
	if rc.Received >= 20 {
		t.Errorf("client received %d", rc.Received)
	}
}

func TestNewPingpongErrors(t *testing.T) {
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, tc := range []struct {
		name string
		cfg  PingpongConfig
	}{
		{"bad_mode", PingpongConfig{GIDIndex: LoopbackGIDIndex}},
		{"ud_larger_than_mtu", PingpongConfig{Mode: oob.PingpongUD, Size: 5000, GIDIndex: LoopbackGIDIndex}},
		{"srq_rx_depth_below_qps", PingpongConfig{Mode: oob.PingpongSRQ, NumQP: 8, RxDepth: 4, GIDIndex: LoopbackGIDIndex}},
		{"no_such_gid", PingpongConfig{Mode: oob.PingpongRC, GIDIndex: 100}},
		{"no_such_port", PingpongConfig{Mode: oob.PingpongRC, Port: 9, GIDIndex: LoopbackGIDIndex}},
		{"ud_no_such_port", PingpongConfig{Mode: oob.PingpongUD, Port: 2, GIDIndex: LoopbackGIDIndex}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPingpong(lb.A.Dev, tc.cfg)
			if err == nil || p != nil {
				t.Fatalf("NewPingpong = %v, %v; want an error", p, err)
			}
		})
	}
	// Nothing leaked: a PD can still be freed after the failures... and a
	// good side still builds.
	p, err := NewPingpong(lb.A.Dev, PingpongConfig{Mode: oob.PingpongRC, GIDIndex: LoopbackGIDIndex})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
