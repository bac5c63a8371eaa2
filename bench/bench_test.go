package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
)

// benchWrite runs RC WRITEs of c over a fresh in-process pair for b.N
// messages' worth of time and reports the throughput.
func benchWrite(b *testing.B, c writeCase) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU, QueueLen: 1024})
	p, err := newPair(&Options{}, ea, eb, pipeMTU, c.mtu)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	p.a.spin, p.b.spin = inprocSpin, inprocSpin
	if _, _, err := p.writeLoop(c.msg, c.depth, 20*time.Millisecond); err != nil {
		b.Fatal(err)
	}
	w, err := p.newWriter(c.msg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	b.SetBytes(int64(c.msg))
	b.ReportAllocs()
	b.ResetTimer()
	if err := p.writeN(w, c.depth, b.N); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRCWrite is RC WRITE between two devices on a link.Pipe (the
// in-process rows of softroce bench).
func BenchmarkRCWrite(b *testing.B) {
	for _, c := range writeCases {
		b.Run(strings.ReplaceAll(sizeName(c.msg)+"/mtu"+c.mtu.String(), "IB_MTU_", ""), func(b *testing.B) {
			benchWrite(b, c)
		})
	}
}

// BenchmarkPingpong is the RC SEND 64 B round trip on a link.Pipe.
func BenchmarkPingpong(b *testing.B) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU})
	p, err := newPair(&Options{}, ea, eb, pipeMTU, ib.MTU1024)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	p.a.spin, p.b.spin = inprocSpin, inprocSpin
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := p.pingpong(64, b.N); err != nil {
		b.Fatal(err)
	}
}

// TestRunRows runs the quick wire and scale groups and checks the rows'
// shape: names, units, positive values and ratios, targets judged.
func TestRunRows(t *testing.T) {
	rows, err := Run(context.Background(), Options{Quick: true, Groups: []string{"wire", "scale"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 10 {
		t.Fatalf("%d rows, want 6 wire + 4 scale", len(rows))
	}
	for _, r := range rows {
		if r.Name == "" || r.Unit == "" || r.Baseline == "" || r.Value <= 0 || r.BaseValue <= 0 || r.Ratio <= 0 {
			t.Errorf("incomplete row %+v", r)
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	var back []Row
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back) != len(rows) || back[0] != rows[0] {
		t.Fatalf("JSON round trip: %v, %d rows", err, len(back))
	}
}

// TestRowsSayHowTheDevicesAcked: the inproc rows say their devices
// acknowledged as rxe (Row.ACKs), and with Options.CoalesceACKs that they
// deferred and merged their ACKs (hfi1-style), their names ending in
// CoalesceSuffix; the scale rows, which move no frames, say nothing.
func TestRowsSayHowTheDevicesAcked(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		rows, err := Run(context.Background(), Options{Quick: true, CoalesceACKs: coalesce, Groups: []string{"inproc", "scale"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			want, marked := "", strings.HasSuffix(r.Name, CoalesceSuffix)
			if r.Group == "inproc" {
				want = AcksRxe
				if coalesce {
					want = AcksHfi1
				}
			}
			if r.ACKs != want || marked != (want == AcksHfi1) {
				t.Errorf("CoalesceACKs %v: %s row %q: ACKs %q, want %q", coalesce, r.Group, r.Name, r.ACKs, want)
			}
		}
	}
}

func TestUnknownGroup(t *testing.T) {
	if _, err := Run(context.Background(), Options{Groups: []string{"nonesuch"}}); err == nil {
		t.Fatal("an unknown group ran")
	}
}

// TestRCWriteAllocs guards the steady state of an in-process RC WRITE
// stream against allocating per packet: it counts the process's mallocs
// over 64 KiB WRITEs (16 data frames and an ACK each) after a warm-up
// that fills every pool and queue slot. A
// per-packet allocation shows as at least 1 per frame; the bound leaves
// room for the runtime's own occasional allocations.
func TestRCWriteAllocs(t *testing.T) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU, QueueLen: 1024})
	p, err := newPair(&Options{}, ea, eb, pipeMTU, ib.MTU4096)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	p.a.spin, p.b.spin = inprocSpin, inprocSpin
	w, err := p.newWriter(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	// Warm up past the pipe's lazily allocated 1024 slots in both
	// directions (one ACK per message).
	if err := p.writeN(w, 16, 1100); err != nil {
		t.Fatal(err)
	}
	frames := func() uint64 { return ea.Stats().TxFrames + eb.Stats().TxFrames }
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m0, f0 := ms.Mallocs, frames()
	if err := p.writeN(w, 16, 200); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&ms)
	perFrame := float64(ms.Mallocs-m0) / float64(frames()-f0)
	t.Logf("%d mallocs over %d frames", ms.Mallocs-m0, frames()-f0)
	if perFrame > 0.05 {
		t.Errorf("%.3f allocations per frame in steady state, want ~0", perFrame)
	}
}
