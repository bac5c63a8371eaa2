package workload

import (
	"math"
	"slices"

	"github.com/softroce/softroce/oob"
)

// Times are "cycles" in perftest's sense: here nanoseconds on the
// monotonic clock since the run started, so cycles_to_units is 1000
// cycles per microsecond and 1e9 per second.
const cyclesPerUsec = 1000

// latMeasureTail is LAT_MEASURE_TAIL: the largest samples perftest drops.
const latMeasureTail = 2

// LatencyStats computes a latency row from the post times of iters
// exchanges the way perftest's print_report_lat does: the iters-1 deltas
// between consecutive posts, sorted, the two largest dropped; t_min is the
// smallest, t_max delta[n] (the largest kept one's successor, perftest's
// off-by-one), t_typical the median (get_median, in integer cycles), t_avg
// the mean, t_stdev the square root of the mean of squares of the
// differences truncated to int (perftest's int temp_var and pow_var), and
// the percentiles delta[ceil(n·0.99)] and delta[ceil(n·0.999)]. Each is
// divided by rttFactor (2 for write and send latency, whose samples are
// round trips; 1 for read and atomic). tposted needs at least 4 entries
// (perftest requires -n ≥ 5); fewer give a zero row.
func LatencyStats(size uint64, tposted []int64, rttFactor int) oob.LatReport {
	r := oob.LatReport{Size: size, Iters: uint64(len(tposted))}
	n := len(tposted) - 1
	if n-latMeasureTail < 1 {
		return r
	}
	delta := make([]int64, n)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	slices.Sort(delta)
	n -= latMeasureTail
	q := float64(cyclesPerUsec * rttFactor)
	var median int64
	if (n-1)%2 != 0 {
		median = (delta[n/2] + delta[n/2-1]) / 2
	} else {
		median = delta[n/2]
	}
	var sum float64
	for _, d := range delta[:n] {
		sum += float64(d) / q
	}
	avg := sum / float64(n)
	var ssum float64
	for _, d := range delta[:n] {
		tv := int(avg - float64(d)/q)
		ssum += float64(int(math.Pow(float64(tv), 2)))
	}
	r.TMin = float64(delta[0]) / q
	r.TMax = float64(delta[n]) / q
	r.TTypical = float64(median) / q
	r.TAvg = avg
	r.TStdev = math.Sqrt(ssum / float64(n))
	r.P99 = float64(delta[int(math.Ceil(float64(n)*0.99))]) / q
	r.P999 = float64(delta[int(math.Ceil(float64(n)*0.999))]) / q
	return r
}

// PeakBW computes perftest's BW peak (print_report_bw, perftest 4.5) from
// the post and completion times of a run of tot messages of size bytes:
// the smallest average time per message over every window from a post i
// to a completion j, taking j at the completion stamps (every cqMod-th
// message, and the last), starting from tcompleted[0] - tposted[0].
// Entries of tcompleted that hold no stamp (0) are skipped. The result is
// in MB/sec (2^20) or, with gbits, Gb/sec.
func PeakBW(size uint64, tposted, tcompleted []int64, cqMod int, gbits bool) float64 {
	tot := min(len(tposted), len(tcompleted))
	if tot == 0 {
		return 0
	}
	cqMod = max(cqMod, 1)
	// cycles_t is unsigned: an unstamped tcompleted[0] starts the search
	// from a huge value.
	opt := int64(math.MaxInt64)
	if tcompleted[0] != 0 {
		opt = tcompleted[0] - tposted[0]
	}
	try := func(i, j int) {
		if tcompleted[j] == 0 {
			return
		}
		if t := (tcompleted[j] - tposted[i]) / int64(j-i+1); t < opt {
			opt = t
		}
	}
	for i := range tot {
		for j := (i+cqMod)/cqMod*cqMod - 1; j < tot; j += cqMod {
			try(i, j)
		}
		if tot%cqMod != 0 {
			try(i, tot-1)
		}
	}
	if opt <= 0 {
		return 0
	}
	bytesPerSec := float64(size) * 1e9 / float64(opt)
	if gbits {
		return bytesPerSec * 8 / 1e9
	}
	return bytesPerSec / (1 << 20)
}
