package workload

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

var bwTests = []oob.PerftestTest{oob.PerftestWriteBW, oob.PerftestReadBW, oob.PerftestSendBW, oob.PerftestAtomicBW}

// TestPerfBidirectional: -b in iterations mode. Both sides run the test's
// loop at once (send_bw: sending and receiving), both measure their own
// sends, and the data is right both ways.
func TestPerfBidirectional(t *testing.T) {
	seed := testenv.Seed(t)
	for _, test := range bwTests {
		for _, nqp := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/q%d", test, nqp), func(t *testing.T) {
				lb, err := NewLoopback(LoopbackConfig{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				defer lb.Close()
				size := uint64(3000)
				if test.Verb() == oob.VerbAtomic {
					size = 8
				}
				cfg := PerfConfig{Test: test, Iters: 300, NumQP: nqp, MTU: ib.MTU1024, TxDepth: 16, CQMod: 4,
					RxDepth: 32, MaxSize: size, GIDIndex: LoopbackGIDIndex, Seed: seed, Timeout: 5 * time.Second,
					Bidirectional: true}
				rc, rs := runBoth(t, lb, cfg, size)
				for _, r := range []PerfResult{rc, rs} {
					if !r.Measured || r.BW.Iters != 300*uint64(nqp) || r.BW.Size != size || r.BW.BWAvg <= 0 || r.BW.BWPeak <= 0 {
						t.Errorf("report %+v", r)
					}
				}
			})
		}
	}
}

// runBoth connects a pair, runs size on both sides at once, checks the
// memory and returns what the client and the server measured.
func runBoth(t *testing.T, lb *Loopback, cfg PerfConfig, size uint64) (rc, rs PerfResult) {
	t.Helper()
	cl, sv, err := lb.Perf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	defer sv.Close()
	done := make(chan error, 1)
	go func() {
		var err error
		rs, err = sv.Run(size)
		done <- err
	}()
	rc, errc := cl.Run(size)
	if errs := <-done; errc != nil || errs != nil {
		t.Fatalf("client: %v; server: %v", errc, errs)
	}
	if err := VerifyPerf(cl, sv); err != nil {
		t.Fatal(err)
	}
	return rc, rs
}

// TestPerfDuration: -D on a manual clock, so the sample window is exact.
// Every test (and the BW tests both ways) runs until the alarm's end, on
// both sides that perftest runs; the rows count only the window's
// completions (BW: CQMod per send completion) and are computed over
// exactly Duration-2*Margin; the BW peak is 0; the data moved is right.
// Under the race detector write_lat is left out: it polls memory the
// device writes (see flag_race.go).
func TestPerfDuration(t *testing.T) {
	var tests []oob.PerftestTest
	for _, test := range allTests {
		if test != oob.PerftestWriteLat || !raceEnabled {
			tests = append(tests, test)
		}
	}
	testPerfDuration(t, tests)
}

func testPerfDuration(t *testing.T, tests []oob.PerftestTest) {
	seed := testenv.Seed(t)
	const duration, margin = 9 * time.Second, 2 * time.Second
	window := duration - 2*margin
	for _, test := range tests {
		for _, bidi := range []bool{false, true} {
			if bidi && !test.IsBW() {
				continue
			}
			t.Run(fmt.Sprintf("%s/b=%v", test, bidi), func(t *testing.T) {
				lb, err := NewLoopback(LoopbackConfig{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				defer lb.Close()
				size := uint64(1500)
				if test.Verb() == oob.VerbAtomic {
					size = 8
				}
				clk := clock.NewManual(time.Unix(1e9, 0))
				cfg := PerfConfig{Test: test, Iters: 5, NumQP: 2, MTU: ib.MTU1024, TxDepth: 16, CQMod: 4,
					RxDepth: 64, MaxSize: size, GIDIndex: LoopbackGIDIndex, Seed: seed, Timeout: 5 * time.Second,
					Duration: duration, Margin: margin, Clock: clk, Bidirectional: bidi}
				cl, sv, err := lb.Perf(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				defer sv.Close()
				// The sides that run a loop; the send_bw server and
				// send_lat's sides arm their alarm at their first receive.
				var sides []*Perf
				for _, p := range []*Perf{cl, sv} {
					if p.sends() || p.receives() {
						sides = append(sides, p)
					}
				}
				type result struct {
					r   PerfResult
					err error
				}
				res := make([]chan result, len(sides))
				for i, p := range sides {
					res[i] = make(chan result, 1)
					go func() {
						r, err := p.Run(size)
						res[i] <- result{r, err}
					}()
				}
				waitPending(t, clk, len(sides))
				time.Sleep(5 * time.Millisecond) // uncounted traffic
				clk.Advance(margin)              // SAMPLE
				// Each side counts completions in the window before it
				// closes (a fixed sleep counted nothing on a loaded machine).
				for _, p := range sides {
					waitSampled(t, p)
				}
				time.Sleep(5 * time.Millisecond)
				clk.Advance(window) // STOP_SAMPLE
				time.Sleep(5 * time.Millisecond)
				clk.Advance(margin) // END
				for i, p := range sides {
					var got result
					select {
					case got = <-res[i]:
					case <-time.After(10 * time.Second):
						t.Fatalf("side %d (client %v) still running 10 s after the alarm's end", i, p.cfg.Client)
					}
					if got.err != nil {
						t.Fatalf("client %v: %v", p.cfg.Client, got.err)
					}
					checkDurationRow(t, p, got.r, size, window)
				}
				if clk.Pending() != 0 {
					t.Errorf("%d timers left after the runs", clk.Pending())
				}
				if err := VerifyPerf(cl, sv); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// waitPending waits until n alarms are armed on clk.
func waitPending(t *testing.T, clk *clock.Manual, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d alarms armed, want %d", clk.Pending(), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitSampled waits until p's run has counted a completion in its sample
// window.
func waitSampled(t *testing.T, p *Perf) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s := p.sampler.Load(); s == nil || s.hits.Load() == 0; s = p.sampler.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("client %v counted no completion in the sample window in 10 s", p.cfg.Client)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// checkDurationRow checks a duration run's row against perftest's
// formulas over the exact window.
func checkDurationRow(t *testing.T, p *Perf, r PerfResult, size uint64, window time.Duration) {
	t.Helper()
	idle := p.cfg.Test.IsBW() && !p.sends() && !p.receives() || !p.cfg.Test.IsBW() && !p.sends() && !p.receives()
	if idle {
		return
	}
	if !r.Measured {
		t.Fatalf("client %v measured nothing", p.cfg.Client)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Abs(want) }
	if p.cfg.Test.IsBW() {
		b := r.BW
		if b.Iters == 0 || b.Size != size || b.BWPeak != 0 {
			t.Errorf("client %v: row %+v: want samples, size %d, no peak", p.cfg.Client, b, size)
		}
		if p.sends() && !p.receives() && b.Iters%uint64(p.cfg.CQMod) != 0 {
			t.Errorf("client %v: %d samples, not a multiple of CQ moderation %d", p.cfg.Client, b.Iters, p.cfg.CQMod)
		}
		if want := float64(size) * float64(b.Iters) / (1 << 20) / window.Seconds(); !near(b.BWAvg, want) {
			t.Errorf("client %v: BW average %v, want %v (%d samples over %v)", p.cfg.Client, b.BWAvg, want, b.Iters, window)
		}
		if want := float64(b.Iters) / window.Seconds() / 1e6; !near(b.MsgRateAvg, want) {
			t.Errorf("client %v: message rate %v, want %v", p.cfg.Client, b.MsgRateAvg, want)
		}
		return
	}
	l := r.LatDuration
	rtt := 2.0
	if v := p.cfg.Test.Verb(); v == oob.VerbRead || v == oob.VerbAtomic {
		rtt = 1
	}
	if l.Iters == 0 || l.Size != size {
		t.Fatalf("client %v: row %+v", p.cfg.Client, l)
	}
	if want := float64(window.Microseconds()) / rtt / float64(l.Iters); !near(l.TAvg, want) {
		t.Errorf("client %v: t_avg %v, want %v", p.cfg.Client, l.TAvg, want)
	}
	if want := float64(l.Iters) / window.Seconds(); !near(l.TPS, want) {
		t.Errorf("client %v: tps %v, want %v", p.cfg.Client, l.TPS, want)
	}
}

// TestSampler: perftest's catch_alarm phases at their exact times, with
// and without a margin, and a cancelled alarm that never fires.
func TestSampler(t *testing.T) {
	for _, tc := range []struct {
		duration, margin time.Duration
	}{{10 * time.Second, 2 * time.Second}, {3 * time.Second, 0}, {5 * time.Second, 1 * time.Second}} {
		t.Run(fmt.Sprintf("%v/%v", tc.duration, tc.margin), func(t *testing.T) {
			clk := clock.NewManual(time.Unix(0, 0))
			s := newSampler(clk, tc.duration, tc.margin)
			if s.sampling() || s.ended() {
				t.Fatal("unarmed sampler is sampling or ended")
			}
			s.arm()
			s.arm() // a second arm does nothing
			state := func() sampleState { return sampleState(s.state.Load()) }
			want := stateStart
			if tc.margin == 0 {
				want = stateSample
			}
			if state() != want {
				t.Fatalf("after arm: state %d, want %d", state(), want)
			}
			clk.Advance(tc.margin)
			if state() != stateSample || !s.sampling() {
				t.Fatalf("at the margin: state %d, want SAMPLE", state())
			}
			clk.Advance(tc.duration - 2*tc.margin - 1)
			if !s.sampling() {
				t.Fatal("window closed early")
			}
			clk.Advance(1)
			if tc.margin > 0 {
				if state() != stateStopSample || s.ended() || closed(s.done()) {
					t.Fatalf("at duration-margin: state %d, want STOP_SAMPLE", state())
				}
				clk.Advance(tc.margin)
			}
			if !s.ended() || !closed(s.done()) {
				t.Fatalf("at the duration: state %d, want END", state())
			}
			if s.window() != tc.duration-2*tc.margin {
				t.Errorf("window %v, want %v", s.window(), tc.duration-2*tc.margin)
			}
		})
	}
	t.Run("cancel", func(t *testing.T) {
		clk := clock.NewManual(time.Unix(0, 0))
		s := newSampler(clk, 10*time.Second, 2*time.Second)
		s.arm()
		s.cancel()
		clk.Advance(time.Minute)
		if s.sampling() || s.ended() {
			t.Error("cancelled alarm fired")
		}
	})
	t.Run("nil", func(t *testing.T) {
		var s *sampler
		s.arm()
		s.cancel()
		if s.sampling() || s.ended() || s.done() != nil {
			t.Error("nil sampler is not iterations mode")
		}
	})
}

// TestPerfConfigModes: the checks and depths of the modes (perftest's
// force_dependecies).
func TestPerfConfigModes(t *testing.T) {
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, tc := range []struct {
		name    string
		cfg     PerfConfig
		wantErr bool
		tx, rx  int
	}{
		{"depths capped at iters", PerfConfig{Test: oob.PerftestSendBW, Iters: 50}, false, 50, 50},
		{"duration keeps depths", PerfConfig{Test: oob.PerftestSendBW, Iters: 50, Duration: 5 * time.Second, Margin: time.Second}, false, 128, 512},
		{"duration not above 2*margin", PerfConfig{Test: oob.PerftestWriteBW, Duration: 4 * time.Second, Margin: 2 * time.Second}, true, 0, 0},
		{"negative margin", PerfConfig{Test: oob.PerftestWriteBW, Duration: 4 * time.Second, Margin: -1}, true, 0, 0},
		{"bidirectional latency", PerfConfig{Test: oob.PerftestWriteLat, Bidirectional: true}, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.fill(lb.A.Dev)
			if tc.wantErr {
				if !errors.Is(err, unix.EINVAL) {
					t.Fatalf("got %v, want EINVAL", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.TxDepth != tc.tx || cfg.RxDepth != tc.rx {
				t.Errorf("tx %d rx %d, want %d %d", cfg.TxDepth, cfg.RxDepth, tc.tx, tc.rx)
			}
		})
	}
}

// TestPerfWarmUp: --perform_warm_up sends TxDepth extra WRs per QP before
// the run (one packet each here), which the report does not count, and the
// data (atomic counters included) stays right.
func TestPerfWarmUp(t *testing.T) {
	seed := testenv.Seed(t)
	for _, test := range []oob.PerftestTest{oob.PerftestWriteBW, oob.PerftestReadBW, oob.PerftestAtomicBW} {
		t.Run(test.String(), func(t *testing.T) {
			size := uint64(512)
			if test.Verb() == oob.VerbAtomic {
				size = 8
			}
			sent := map[bool]uint64{}
			for _, warm := range []bool{false, true} {
				lb, err := NewLoopback(LoopbackConfig{Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				defer lb.Close()
				cfg := PerfConfig{Test: test, Iters: 100, NumQP: 2, TxDepth: 16, CQMod: 4, MaxSize: size,
					GIDIndex: LoopbackGIDIndex, Seed: seed, Timeout: 5 * time.Second, PerformWarmUp: warm,
					// A retransmission would change the packet count: an ACK
					// timeout of about 69 s leaves none on a loaded machine.
					QPTimeout: 24}
				rc := runPerfPair(t, lb, cfg, size)[0]
				if rc.BW.Iters != 2*100 {
					t.Errorf("warm-up %v: report counts %d iterations, want 200 (100 on each of 2 QPs)", warm, rc.BW.Iters)
				}
				st, err := lb.A.Dev.AllocHWPortStats(1)
				if err != nil {
					t.Fatal(err)
				}
				lb.A.Dev.GetHWStats(st, 1)
				sent[warm], _ = st.Counter("sent_pkts")
			}
			if got, want := sent[true]-sent[false], uint64(2*16); got != want {
				t.Errorf("warm-up sent %d more packets, want %d (TxDepth per QP)", got, want)
			}
		})
	}
}

// TestPerfTransports: -c UC (write and send tests) and -c UD (send
// tests, 40 bytes of GRH before each message received), and --use-srq
// (send tests: one SRQ per receiving side) in iterations mode,
// unidirectional, bidirectional and with several QPs: the data arrives
// and each measuring side counts every message. UC refuses READs and
// atomics, UD everything but SEND.
func TestPerfTransports(t *testing.T) {
	seed := testenv.Seed(t)
	for _, tc := range []struct {
		test oob.PerftestTest
		typ  qpstate.Type
		nqp  int
		bidi bool
		srq  bool
	}{
		{oob.PerftestWriteBW, qpstate.TypeUC, 1, false, false},
		{oob.PerftestWriteBW, qpstate.TypeUC, 2, true, false},
		{oob.PerftestSendBW, qpstate.TypeUC, 2, false, false},
		{oob.PerftestSendBW, qpstate.TypeUC, 1, true, false},
		{oob.PerftestWriteLat, qpstate.TypeUC, 1, false, false},
		{oob.PerftestSendLat, qpstate.TypeUC, 1, false, false},
		{oob.PerftestSendBW, qpstate.TypeUD, 2, false, false},
		{oob.PerftestSendBW, qpstate.TypeUD, 2, true, false},
		{oob.PerftestSendLat, qpstate.TypeUD, 1, false, false},
		{oob.PerftestSendBW, qpstate.TypeRC, 2, false, true},
		{oob.PerftestSendBW, qpstate.TypeRC, 3, true, true},
		{oob.PerftestSendBW, qpstate.TypeUD, 1, false, true},
		{oob.PerftestSendLat, qpstate.TypeRC, 1, false, true},
	} {
		if tc.test.Verb() == oob.VerbWrite && raceEnabled {
			// No completion orders a UC WRITE's landing with the
			// memory check (as write_lat's poll): see flag_race.go.
			continue
		}
		t.Run(fmt.Sprintf("%s/%s/q%d/b=%v/srq=%v", tc.test, tc.typ, tc.nqp, tc.bidi, tc.srq), func(t *testing.T) {
			lb, err := NewLoopback(LoopbackConfig{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Close()
			size := uint64(3000)
			switch {
			case tc.typ == qpstate.TypeUD:
				size = 1024 // a UD message fits one packet
			case !tc.test.IsBW():
				size = 64
			}
			cfg := PerfConfig{Test: tc.test, QPType: tc.typ, Iters: 200, NumQP: tc.nqp, MTU: ib.MTU1024,
				TxDepth: 16, CQMod: 4, MaxSize: size, GIDIndex: LoopbackGIDIndex, Seed: seed, Timeout: 5 * time.Second,
				Bidirectional: tc.bidi, UseSRQ: tc.srq}
			switch {
			case tc.typ == qpstate.TypeRC:
				cfg.RxDepth = 32 // RNR NAKs pace the sender; UC and UD drop instead
			case tc.srq:
				cfg.RxDepth = 200 * tc.nqp // a receive for every message of every QP
			}
			rc, rs := runBoth(t, lb, cfg, size)
			want := 200 * uint64(tc.nqp)
			if tc.test.IsBW() {
				if !rc.Measured || rc.BW.Iters != want || rc.BW.BWAvg <= 0 {
					t.Errorf("client row %+v", rc.BW)
				}
				if (tc.bidi || tc.test.Verb() == oob.VerbSend) && (!rs.Measured || rs.BW.Iters != want) {
					t.Errorf("server row %+v", rs.BW)
				}
			} else if rc.Lat.Iters != 200 || rs.Lat.Iters != 200 {
				t.Errorf("rows %+v %+v", rc.Lat, rs.Lat)
			}
		})
	}
	for _, tc := range []struct {
		test oob.PerftestTest
		typ  qpstate.Type
	}{{oob.PerftestReadBW, qpstate.TypeUC}, {oob.PerftestAtomicLat, qpstate.TypeUC}, {oob.PerftestWriteBW, qpstate.TypeUD},
		{oob.PerftestSendLat, qpstate.TypeXRCIni}} {
		lb, err := NewLoopback(LoopbackConfig{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = lb.Perf(PerfConfig{Test: tc.test, QPType: tc.typ, GIDIndex: LoopbackGIDIndex})
		lb.Close()
		if !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s over %s: %v, want EINVAL", tc.test, tc.typ, err)
		}
	}
}

// TestPerfRxDepthUnreliable: perftest's rule for UC and UD in iterations
// mode: an -r left at 512 becomes min(iters, 16000).
func TestPerfRxDepthUnreliable(t *testing.T) {
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, tc := range []struct {
		typ   qpstate.Type
		iters uint64
		rx    int
		want  int
	}{
		{qpstate.TypeRC, 1000, 0, 512},
		{qpstate.TypeUC, 1000, 0, 1000},
		{qpstate.TypeUC, 100, 0, 100},
		{qpstate.TypeUC, 20000, 0, 16000},
		{qpstate.TypeUC, 1000, 300, 300},
		{qpstate.TypeUC, 1000, 513, 513},
		{qpstate.TypeUD, 1000, 0, 1000},
		{qpstate.TypeUD, 300, 0, 300},
	} {
		c := PerfConfig{Test: oob.PerftestSendBW, QPType: tc.typ, Iters: tc.iters, RxDepth: tc.rx, MTU: ib.MTU1024, OutReads: 1}
		if err := c.fill(lb.A.Dev); err != nil {
			t.Fatal(err)
		}
		if c.RxDepth != tc.want {
			t.Errorf("%s -n %d -r %d: rx depth %d, want %d", tc.typ, tc.iters, tc.rx, c.RxDepth, tc.want)
		}
	}
}

// TestPerfSRQSides: --use-srq gives an SRQ only to a side that receives
// (perftest's srq_exists: the send_bw server, both sides of -b and of
// send_lat), and refuses fewer receives than QPs.
func TestPerfSRQSides(t *testing.T) {
	for _, tc := range []struct {
		test           oob.PerftestTest
		bidi           bool
		client, server bool
	}{
		{oob.PerftestSendBW, false, false, true},
		{oob.PerftestSendBW, true, true, true},
		{oob.PerftestSendLat, false, true, true},
	} {
		lb, err := NewLoopback(LoopbackConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cl, sv, err := lb.Perf(PerfConfig{Test: tc.test, UseSRQ: true, Bidirectional: tc.bidi, GIDIndex: LoopbackGIDIndex})
		if err != nil {
			t.Fatal(err)
		}
		if (cl.srq != nil) != tc.client || (sv.srq != nil) != tc.server {
			t.Errorf("%s -b=%v: client SRQ %v, server SRQ %v", tc.test, tc.bidi, cl.srq != nil, sv.srq != nil)
		}
		cl.Close()
		sv.Close()
		lb.Close()
	}
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, cfg := range []PerfConfig{
		{Test: oob.PerftestSendBW, UseSRQ: true, NumQP: 4, RxDepth: 3, GIDIndex: LoopbackGIDIndex},
		{Test: oob.PerftestWriteBW, UseSRQ: true, GIDIndex: LoopbackGIDIndex},
	} {
		if _, _, err := lb.Perf(cfg); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", cfg, err)
		}
	}
}

// TestPerfPostList: -l chains PostList WRs in each post (CQMod PostList
// unless given, then one completion per CQMod WRs), in iterations mode,
// with several QPs, both ways, and with the warm-up: every message is
// counted and the data is right.
func TestPerfPostList(t *testing.T) {
	seed := testenv.Seed(t)
	for _, tc := range []struct {
		test       oob.PerftestTest
		pl, cqMod  int
		nqp        int
		bidi, warm bool
	}{
		{oob.PerftestWriteBW, 4, 0, 2, false, false},
		{oob.PerftestWriteBW, 8, 4, 1, true, true},
		{oob.PerftestReadBW, 4, 0, 1, false, true},
		{oob.PerftestSendBW, 4, 2, 2, false, false},
		{oob.PerftestSendBW, 4, 0, 1, true, false},
		{oob.PerftestAtomicBW, 5, 0, 2, false, true},
	} {
		t.Run(fmt.Sprintf("%s/l%d/Q%d/q%d/b=%v/warm=%v", tc.test, tc.pl, tc.cqMod, tc.nqp, tc.bidi, tc.warm), func(t *testing.T) {
			lb, err := NewLoopback(LoopbackConfig{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Close()
			size := uint64(300)
			if tc.test.Verb() == oob.VerbAtomic {
				size = 8
			}
			cfg := PerfConfig{Test: tc.test, Iters: 200, NumQP: tc.nqp, MTU: ib.MTU1024, TxDepth: 16, CQMod: tc.cqMod,
				PostList: tc.pl, RxDepth: 64, MaxSize: size, GIDIndex: LoopbackGIDIndex, Seed: seed, Timeout: 5 * time.Second,
				Bidirectional: tc.bidi, PerformWarmUp: tc.warm}
			rc, rs := runBoth(t, lb, cfg, size)
			want := 200 * uint64(tc.nqp)
			if !rc.Measured || rc.BW.Iters != want || rc.BW.BWAvg <= 0 {
				t.Errorf("client row %+v", rc.BW)
			}
			if (tc.bidi || tc.test.Verb() == oob.VerbSend) && (!rs.Measured || rs.BW.Iters != want) {
				t.Errorf("server row %+v", rs.BW)
			}
		})
	}
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, cfg := range []PerfConfig{
		{Test: oob.PerftestWriteBW, PostList: 3, Iters: 100},
		{Test: oob.PerftestWriteBW, PostList: 6, CQMod: 4, Iters: 600},
		{Test: oob.PerftestWriteBW, PostList: 32, TxDepth: 16, Iters: 640},
		{Test: oob.PerftestWriteLat, PostList: 2, Iters: 100},
	} {
		cfg.GIDIndex = LoopbackGIDIndex
		if _, _, err := lb.Perf(cfg); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", cfg, err)
		}
	}
}

// TestPerfEvents: -e makes every wait sleep on the CQ's completion
// handler at once (no polling first); the runs still complete and count
// every message.
func TestPerfEvents(t *testing.T) {
	seed := testenv.Seed(t)
	for _, tc := range []struct {
		test oob.PerftestTest
		bidi bool
	}{
		{oob.PerftestSendBW, false}, {oob.PerftestSendBW, true}, {oob.PerftestReadBW, false},
		{oob.PerftestAtomicBW, true}, {oob.PerftestSendLat, false}, {oob.PerftestReadLat, false},
	} {
		t.Run(fmt.Sprintf("%s/b=%v", tc.test, tc.bidi), func(t *testing.T) {
			lb, err := NewLoopback(LoopbackConfig{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Close()
			size := uint64(2000)
			if tc.test.Verb() == oob.VerbAtomic {
				size = 8
			}
			cfg := PerfConfig{Test: tc.test, Iters: 100, NumQP: 1, MTU: ib.MTU1024, TxDepth: 16, CQMod: 4, RxDepth: 32,
				MaxSize: size, GIDIndex: LoopbackGIDIndex, Seed: seed, Timeout: 5 * time.Second, Bidirectional: tc.bidi, Events: true}
			cl, sv, err := lb.Perf(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Perf{cl, sv} {
				if p.scq.spins != 0 || p.rcq.spins != 0 {
					t.Errorf("client %v polls %d/%d times before sleeping", p.cfg.Client, p.scq.spins, p.rcq.spins)
				}
			}
			cl.Close()
			sv.Close()
			rc, _ := runBoth(t, lb, cfg, size)
			got := rc.BW.Iters
			if !tc.test.IsBW() {
				got = rc.Lat.Iters
			}
			if !rc.Measured || got != 100 {
				t.Errorf("client row %+v %+v", rc.BW, rc.Lat)
			}
		})
	}
}
