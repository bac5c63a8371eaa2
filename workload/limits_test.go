package workload

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/softroce/softroce/oob"
	"golang.org/x/sys/unix"
)

// allocated returns the bytes f allocated on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSizesOverDeviceLimitsRefusedBeforeAllocation: every size from a user
// (QPs, depths, message size × QPs, iterations) that the device or the
// memory cap cannot hold is refused with an errno and a message naming the
// limit, and the refusal allocates almost nothing: no buffer is filled
// before the CQ or QP would have failed. The first case allocated 131 MB
// before the check existed, the -q 100000 of the command line ~13 GB.
func TestSizesOverDeviceLimitsRefusedBeforeAllocation(t *testing.T) {
	lb, err := NewLoopback(LoopbackConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	const budget = 1 << 20 // bytes a refused configuration may allocate
	perf := []struct {
		name  string
		cfg   PerfConfig
		errno unix.Errno
		want  string
	}{
		{"1000 QPs: send CQ over max_cqe", PerfConfig{Test: oob.PerftestWriteBW, NumQP: 1000}, unix.EINVAL, "max_cqe"},
		{"100000 QPs: send CQ over max_cqe", PerfConfig{Test: oob.PerftestWriteBW, NumQP: 100000}, unix.EINVAL, "max_cqe"},
		{"QPs over max_qp", PerfConfig{Test: oob.PerftestWriteBW, NumQP: 1 << 21, TxDepth: 1, RxDepth: 1}, unix.ENOMEM, "max_qp "},
		{"tx depth over max_qp_wr", PerfConfig{Test: oob.PerftestWriteBW, TxDepth: 1<<20 + 1, Iters: 1 << 21}, unix.EINVAL, "max_qp_wr"},
		{"rx depth over max_qp_wr", PerfConfig{Test: oob.PerftestSendBW, RxDepth: 1<<20 + 1, Iters: 1 << 21}, unix.EINVAL, "max_qp_wr"},
		{"SRQ depth over max_srq_wr", PerfConfig{Test: oob.PerftestSendBW, UseSRQ: true, RxDepth: 1 << 21, Iters: 1 << 22},
			unix.EINVAL, "max_srq_wr"},
		{"recv CQ over max_cqe", PerfConfig{Test: oob.PerftestSendBW, RxDepth: 512, NumQP: 64, TxDepth: 1}, unix.EINVAL, "max_cqe"},
		{"message over max_msg_sz", PerfConfig{Test: oob.PerftestWriteBW, MaxSize: 1<<31 + 1}, unix.EINVAL, "max_msg_sz"},
		{"message size × QPs over the memory cap", PerfConfig{Test: oob.PerftestWriteBW, MaxSize: 8 << 20, NumQP: 200,
			TxDepth: 1, RxDepth: 1}, unix.ENOMEM, "work buf"},
		{"iterations over the memory cap", PerfConfig{Test: oob.PerftestWriteBW, Iters: 1 << 40}, unix.ENOMEM, "timestamps"},
		{"a lower memory cap", PerfConfig{Test: oob.PerftestWriteBW, MaxSize: 1 << 20, MaxMemory: 1 << 20}, unix.ENOMEM, "work buf"},
	}
	for _, tc := range perf {
		var err error
		n := allocated(func() { _, err = NewPerf(lb.A.Dev, tc.cfg) })
		if n > budget {
			t.Fatalf("%s: refused after allocating %d bytes, want at most %d", tc.name, n, budget)
		}
		if !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: NewPerf = %v, want %v naming %q", tc.name, err, tc.errno, tc.want)
		}
		t.Logf("%s: %v (%d bytes allocated)", tc.name, err, n)
	}
	pp := []struct {
		name  string
		cfg   PingpongConfig
		errno unix.Errno
		want  string
	}{
		{"rx depth over max_qp_wr", PingpongConfig{Mode: oob.PingpongRC, RxDepth: 1<<20 + 1}, unix.EINVAL, "max_qp_wr"},
		{"CQ over max_cqe", PingpongConfig{Mode: oob.PingpongRC, RxDepth: 40000}, unix.EINVAL, "max_cqe"},
		{"SRQ over max_srq_wr", PingpongConfig{Mode: oob.PingpongSRQ, RxDepth: 1 << 21}, unix.EINVAL, "max_srq_wr"},
		{"size over the memory cap", PingpongConfig{Mode: oob.PingpongRC, Size: 1 << 31}, unix.ENOMEM, "work buf"},
		{"size over max_msg_sz", PingpongConfig{Mode: oob.PingpongRC, Size: 1<<31 + 1}, unix.EINVAL, "max_msg_sz"},
	}
	for _, tc := range pp {
		tc.cfg.GIDIndex = LoopbackGIDIndex
		var err error
		n := allocated(func() { _, err = NewPingpong(lb.A.Dev, tc.cfg) })
		if n > budget {
			t.Fatalf("pingpong %s: refused after allocating %d bytes, want at most %d", tc.name, n, budget)
		}
		if !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("pingpong %s: NewPingpong = %v, want %v naming %q", tc.name, err, tc.errno, tc.want)
		}
	}
	// Right at the limits the objects are made.
	p, err := NewPerf(lb.A.Dev, PerfConfig{Test: oob.PerftestWriteBW, NumQP: 255, TxDepth: 128, RxDepth: 1,
		GIDIndex: LoopbackGIDIndex})
	if err != nil {
		t.Fatalf("255 QPs × 128 WRs (32640 CQEs): %v", err)
	}
	p.Close()
}
