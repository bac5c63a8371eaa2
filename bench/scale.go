package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
)

// scaleQPs is how many RC QPs the scale measurement creates.
const scaleQPs = 10000

// scaleCap is each QP's capacity: perftest's default send depth, a modest
// receive queue, one SGE each way.
var scaleCap = qpstate.Cap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}

// runScale creates scaleQPs RC QPs on one device, connects each
// RESET→INIT→RTR→RTS, and destroys them, reporting the time of each phase
// and the heap each idle connected QP holds. These rows have no baseline
// measured in the run: they are judged against the targets (< 1 s to
// create and connect 10,000, <= 16 KiB per QP), and the ratio is value
// over target.
func runScale(ctx context.Context, o *Options) ([]Row, error) {
	ea, eb := link.NewPipe(&link.PipeConfig{MTU: pipeMTU})
	defer eb.Close()
	p, err := newPeer(1, ea, pipeMTU)
	if err != nil {
		return nil, err
	}
	defer p.close()
	qps := make([]*emu.QP, 0, scaleQPs)
	start := time.Now()
	init := emu.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: qpstate.TypeRC, SQSigType: emu.SignalReqWR,
		PortNum: 1}
	for range scaleQPs {
		in := init
		in.Cap = scaleCap
		q, err := p.pd.CreateQP(&in)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("create QP %d: %w", len(qps), err), destroyAll(qps))
		}
		qps = append(qps, q)
	}
	created := time.Since(start)
	peerMAC := [6]byte{2, 0, 0, 0, 0, 2}
	peerIP := p.ip.Next()
	for i, q := range qps {
		if err := connectQP(q, ib.MTU1024, peerIP, peerMAC, uint32(0x100+i)); err != nil {
			return nil, errors.Join(fmt.Errorf("connect QP %d: %w", i, err), destroyAll(qps))
		}
	}
	connected := time.Since(start)
	// The heap the QPs hold is what their destruction gives back: the live
	// heap with every QP connected, less the live heap once they are
	// destroyed and unreferenced. (A difference against the heap before
	// creation would also count whatever earlier measurements left for
	// the collector, and can come out negative.)
	heapWith := liveHeap()
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, destroyAll(qps))
	}
	t := time.Now()
	if err := destroyAll(qps); err != nil {
		return nil, err
	}
	destroyed := time.Since(t)
	clear(qps)
	perQP := float64(int64(heapWith)-int64(liveHeap())) / scaleQPs / 1024
	o.logf("%d QPs: create %v, create+connect %v, destroy %v, %.2f KiB/QP", scaleQPs, created, connected, destroyed, perQP)

	ms1 := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rows := []Row{
		{Group: "scale", Name: fmt.Sprintf("create+connect %d RC QPs", scaleQPs), Value: ms1(connected), Unit: "ms",
			Baseline: "target", BaseValue: 1000, BaseUnit: "ms", Ratio: ms1(connected) / 1000,
			Target: "< 1000 ms", Pass: connected < time.Second},
		{Group: "scale", Name: fmt.Sprintf("  of which create %d RC QPs", scaleQPs), Value: ms1(created), Unit: "ms",
			Baseline: "create+connect", BaseValue: ms1(connected), BaseUnit: "ms", Ratio: ratio(ms1(created), ms1(connected))},
		{Group: "scale", Name: fmt.Sprintf("destroy %d RC QPs", scaleQPs), Value: ms1(destroyed), Unit: "ms",
			Baseline: "create+connect", BaseValue: ms1(connected), BaseUnit: "ms", Ratio: ratio(ms1(destroyed), ms1(connected))},
		{Group: "scale", Name: fmt.Sprintf("heap per idle RC QP (%d/%d WRs)", scaleCap.MaxSendWR, scaleCap.MaxRecvWR),
			Value: perQP, Unit: "KiB", Baseline: "target", BaseValue: 16, BaseUnit: "KiB", Ratio: perQP / 16,
			Target: "<= 16 KiB", Pass: perQP <= 16},
	}
	return rows, nil
}

// liveHeap returns the heap in use after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// destroyAll destroys qps in reverse order of creation.
func destroyAll(qps []*emu.QP) error {
	var errs []error
	for i := len(qps) - 1; i >= 0; i-- {
		if err := qps[i].Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
