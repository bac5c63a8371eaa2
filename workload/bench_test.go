package workload

import (
	"fmt"
	"testing"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/oob"
)

// BenchmarkLoopbackWrite measures RC WRITE throughput between the two
// devices of a Loopback (the write_bw loop: TX depth 128, one signaled WR
// in 100), in bytes per second of payload, with allocations per message.
// Each b.N is one message; the data of the last run is verified.
func BenchmarkLoopbackWrite(b *testing.B) {
	for _, size := range []uint64{64 << 10, 1 << 20} {
		for _, mtu := range []ib.MTU{ib.MTU1024, ib.MTU4096} {
			b.Run(fmt.Sprintf("%dKiB/mtu%d", size>>10, mtu.Bytes()), func(b *testing.B) {
				lb, err := NewLoopback(LoopbackConfig{})
				if err != nil {
					b.Fatal(err)
				}
				defer lb.Close()
				iters := uint64(max(b.N, 5))
				cfg := PerfConfig{Test: oob.PerftestWriteBW, MaxSize: size, Iters: iters, MTU: mtu,
					GIDIndex: LoopbackGIDIndex, NoPeak: true}
				cl, sv, err := lb.Perf(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				defer sv.Close()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				r, err := cl.Run(size)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if err := VerifyPerf(cl, sv); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.BW.BWAvg*(1<<20)*8/1e9, "Gb/s")
			})
		}
	}
}
