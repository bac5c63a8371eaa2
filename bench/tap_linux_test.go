package bench

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
)

// TestTAPSkippedWithoutRoot checks the TAP rows' form without root, also
// when the tests run as root (as in CI): the root check is replaced.
func TestTAPSkippedWithoutRoot(t *testing.T) {
	saved := euid
	euid = func() int { return 1000 }
	defer func() { euid = saved }()
	rows, err := Run(context.Background(), Options{Quick: true, Groups: []string{"tap"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no TAP rows")
	}
	for _, r := range rows {
		if r.Skipped != "needs root" {
			t.Errorf("row %q: skipped %q, want %q", r.Name, r.Skipped, "needs root")
		}
	}
}

// tapPair makes a pair of devices on two TAPs on a bridge in a fresh
// namespace (root only), with path MTU mtu.
func tapPair(b *testing.B, mtu ib.MTU) (*pair, *benchNS) { return tapPairT(b, mtu) }

func tapPairT(b testing.TB, mtu ib.MTU) (*pair, *benchNS) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ns, err := newBenchNS()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := ns.close(); err != nil {
			b.Error(err)
		}
	})
	ta, tb, err := ns.openTAPs("srb0", "srb1")
	if err != nil {
		b.Fatal(err)
	}
	p, err := newPair(&Options{}, ta, tb, tapMTU, mtu)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.close() })
	return p, ns
}

// BenchmarkTAPPingpong is the RC SEND 64 B round trip over two TAPs (the
// latency row of softroce bench), alternating in rounds of 1000 with the
// kernel UDP pingpong on the bridge; it reports both medians and their
// ratio. It needs root.
func BenchmarkTAPPingpong(b *testing.B) {
	p, ns := tapPair(b, ib.MTU1024)
	ua, ub, err := ns.udpPair()
	if err != nil {
		b.Fatal(err)
	}
	defer ua.Close()
	defer ub.Close()
	if _, err := p.pingpong(64, 200); err != nil { // warm up
		b.Fatal(err)
	}
	if _, err := udpPingpong(ua, ub, 64, 200); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var rc, udp []time.Duration
	for left := b.N; left > 0; left -= 1000 {
		n := min(left, 1000)
		r, err := p.pingpong(64, n)
		if err != nil {
			b.Fatal(err)
		}
		u, err := udpPingpong(ua, ub, 64, n)
		if err != nil {
			b.Fatal(err)
		}
		rc, udp = append(rc, r...), append(udp, u...)
	}
	sortDur(rc)
	sortDur(udp)
	r, u := percentile(rc, 0.5), percentile(udp, 0.5)
	b.ReportMetric(float64(r.Nanoseconds())/1000, "p50-us")
	b.ReportMetric(float64(u.Nanoseconds())/1000, "udp-p50-us")
	b.ReportMetric(float64(r)/float64(u), "ratio")
}

// BenchmarkTAPWrite is RC WRITE mtu=4096 msg=64KiB over two TAPs against
// the raw TAP frame rate, alternating: each of b.N rounds opens two TAPs,
// measures the raw rate on them for 200 ms, then RC WRITE for 200 ms. It
// reports both rates' medians over the rounds and their ratio. It needs
// root.
func BenchmarkTAPWrite(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ns, err := newBenchNS()
	if err != nil {
		b.Fatal(err)
	}
	defer ns.close()
	c := writeCase{mtu: ib.MTU4096, msg: 64 << 10, depth: 16}
	var raws, rcs []float64
	for range b.N {
		ta, tb, err := ns.openTAPs("srb0", "srb1")
		if err != nil {
			b.Fatal(err)
		}
		raw, err := rawTAP(ta, tb, c.mtu.Bytes(), 200*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		p, err := newPair(&Options{}, ta, tb, tapMTU, c.mtu)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.writeLoop(c.msg, c.depth, 20*time.Millisecond); err != nil {
			b.Fatal(err)
		}
		n, el, err := p.writeLoop(c.msg, c.depth, 200*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		p.close()
		raws, rcs = append(raws, raw), append(rcs, gbps(n, el))
	}
	sort.Float64s(raws)
	sort.Float64s(rcs)
	r, w := rcs[len(rcs)/2], raws[len(raws)/2]
	b.ReportMetric(r, "rc-Gb/s")
	b.ReportMetric(w, "raw-Gb/s")
	b.ReportMetric(r/w, "ratio")
}

// TestMedianSampleIsTheMiddleRatio: the TAP rows report the sample whose
// RC-to-raw ratio is the median, not the best RC rate over the best raw
// one taken at other moments.
func TestMedianSampleIsTheMiddleRatio(t *testing.T) {
	s := []rateSample{{rc: 4, raw: 4}, {rc: 1, raw: 4}, {rc: 3, raw: 5}}
	if got := medianSample(s); got != (rateSample{rc: 3, raw: 5}) {
		t.Errorf("median of ratios 1, 0.25, 0.6: %+v, want the 0.6 sample", got)
	}
	if got := medianSample(s[:2]); got != (rateSample{rc: 1, raw: 4}) {
		t.Errorf("median of two: %+v, want the lower", got)
	}
	if s[1] != (rateSample{rc: 1, raw: 4}) {
		t.Error("medianSample reordered its argument")
	}
}

// TestRawTAPRunsAgainOnTheSameTAPs: the raw baseline measured twice on one
// pair of TAPs counts frames both times: the stop frames the first run
// left queued do not end the second.
func TestRawTAPRunsAgainOnTheSameTAPs(t *testing.T) {
	testenv.RequireRoot(t)
	ns, err := newBenchNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.close()
	a, b, err := ns.openTAPs("srr0", "srr1")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	for i := range 3 {
		r, err := rawTAP(a, b, 1024, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if r <= 0 {
			t.Fatalf("run %d on the same TAPs: %v Gb/s", i+1, r)
		}
		// The run's stop frame again, as a run whose reader was slow
		// to take it leaves it queued.
		stop, err := rawStopFrame(rawRuns.Load())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.WritePackets([][]byte{stop, stop}); err != nil {
			t.Fatal(err)
		}
	}
}
