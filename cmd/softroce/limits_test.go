package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHugeQPCountRefusedQuickly: -q 100000 is refused by the device's
// limits (max_cqe) with the reason on stderr and exit 1, quickly, before a
// byte of the 13 GB its buffers would take is allocated.
func TestHugeQPCountRefusedQuickly(t *testing.T) {
	for _, args := range [][]string{
		{"loopback", "--test", "write_bw", "-q", "100000"},
		{"perf", "write_bw", "-q", "100000", "--ip", "10.9.9.1/24"},
	} {
		var out, errb bytes.Buffer
		start := time.Now()
		var code int
		n := allocated(func() { code = run(args, &out, &errb) })
		if code != 1 || !strings.Contains(errb.String(), "max_cqe") {
			t.Errorf("%q: exit %d, stderr %q; want 1 and the max_cqe reason", args, code, errb.String())
		}
		if d := time.Since(start); d > 10*time.Second || n > 64<<20 {
			t.Errorf("%q: refused after %v and %d bytes allocated", args, d, n)
		}
	}
}

// allocated returns the bytes f allocated on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
