package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
)

// pipeMTU is the netdev MTU of the in-process devices: room for a 4096-byte
// RoCE payload with its headers, so the active MTU is 4096.
const pipeMTU = 4200

// writeCase is one RC WRITE configuration.
type writeCase struct {
	mtu   ib.MTU
	msg   int
	depth int // messages outstanding
}

var writeCases = []writeCase{
	{ib.MTU1024, 64 << 10, 16},
	{ib.MTU1024, 1 << 20, 4},
	{ib.MTU4096, 64 << 10, 16},
	{ib.MTU4096, 1 << 20, 4},
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// counter reports frames moved so far on a wire (both directions).
type counter func() uint64

// writeVsBaseline measures RC WRITE over p against baseline, alternating
// rounds, and returns the best Gb/s of each and the allocations per frame
// over all WRITE rounds.
func writeVsBaseline(o *Options, p *pair, c writeCase, ab, ba counter, baseline func() float64) (w, b, allocs float64, err error) {
	frames := func() uint64 { return ab() + ba() }
	if err := warmUp(o, p, c, ab, ba); err != nil {
		return 0, 0, 0, err
	}
	var mallocs, pkts uint64
	var ms runtime.MemStats
	for range o.rounds() {
		runtime.ReadMemStats(&ms)
		m0, f0 := ms.Mallocs, frames()
		n, el, err := p.writeLoop(c.msg, c.depth, o.round())
		if err != nil {
			return 0, 0, 0, err
		}
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - m0
		pkts += frames() - f0
		w = max(w, gbps(n, el))
		b = max(b, baseline())
	}
	return w, b, ratio(float64(mallocs), float64(pkts)), nil
}

// warmFrames is how many frames a warm-up moves at least in each
// direction: past a link.Pipe's lazily filled queue slots (1024 a
// direction; the ACK direction carries one frame a message or so), so that
// buffer pools and queues have reached their steady state.
const warmFrames = 1100

// warmUp writes for a quarter of a round, and on until each direction has
// moved warmFrames frames (at most a few seconds).
func warmUp(o *Options, p *pair, c writeCase, ab, ba counter) error {
	a0, b0, start := ab(), ba(), time.Now()
	for {
		if _, _, err := p.writeLoop(c.msg, c.depth, o.round()/4); err != nil {
			return err
		}
		if ab()-a0 >= warmFrames && ba()-b0 >= warmFrames || time.Since(start) > 3*time.Second {
			return nil
		}
	}
}

// copyGbps measures copying msg bytes between two buffers for d.
func copyGbps(msg int, d time.Duration) float64 {
	src, dst := make([]byte, msg), make([]byte, msg)
	for i := range src {
		src[i] = byte(i)
	}
	per := timeOp(d, func(n int) {
		for range n {
			copy(dst, src)
		}
	})
	return gbps(int64(msg), per)
}

// runInproc measures RC WRITE between two devices on a link.Pipe against
// a plain copy of the same bytes.
func runInproc(ctx context.Context, o *Options) ([]Row, error) {
	var rows []Row
	var worst float64
	var worstName string
	for _, c := range writeCases {
		ea, eb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU, QueueLen: 1024})
		p, err := newPair(o, ea, eb, pipeMTU, c.mtu)
		if err != nil {
			return rows, err
		}
		p.a.spin, p.b.spin = inprocSpin, inprocSpin
		ab := func() uint64 { return ea.Stats().TxFrames }
		ba := func() uint64 { return eb.Stats().TxFrames }
		w, b, allocs, err := writeVsBaseline(o, p, c, ab, ba, func() float64 { return copyGbps(c.msg, o.round()) })
		if cerr := p.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return rows, fmt.Errorf("RC WRITE mtu=%v msg=%s: %w", c.mtu.Bytes(), sizeName(c.msg), err)
		}
		name := fmt.Sprintf("RC WRITE mtu=%d msg=%s", c.mtu.Bytes(), sizeName(c.msg))
		r := Row{Group: "inproc", Name: name, Value: w, Unit: "Gb/s",
			Baseline: "copy", BaseValue: b, BaseUnit: "Gb/s", Ratio: ratio(w, b)}
		if c.mtu == ib.MTU4096 {
			r = r.atLeast(0.25)
			r.Target += ", >= 8 Gb/s"
			r.Detail = "8 Gb/s: MISS"
			if w >= 8 {
				r.Detail = "8 Gb/s: PASS"
			}
			r.Pass = r.Pass && w >= 8
		}
		rows = append(rows, r)
		if allocs >= worst {
			worst, worstName = allocs, name
		}
		o.logf("%s: %.2f Gb/s, copy %.2f Gb/s, %.3f allocs/frame", name, w, b, allocs)
		if err := ctx.Err(); err != nil {
			return rows, err
		}
	}
	rows = append(rows, allocRow("inproc", worstName, worst))
	return rows, nil
}

// allocRow reports the most allocations per frame seen over a group's
// steady-state runs; the target is zero, so the ratio column is the excess
// over it.
func allocRow(group, worst string, v float64) Row {
	return Row{Group: group, Name: "allocs per frame (worst: " + worst + ")", Value: v, Unit: "allocs/frame",
		Baseline: "target", BaseValue: 0, BaseUnit: "allocs/frame", Ratio: v, RatioNote: "(excess)",
		Target: "0 allocs/frame", Pass: v < 0.005}
}
