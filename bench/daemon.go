package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// The daemon rows run Debian's perftest tools, unmodified, on a softroce
// daemon (package uverbsd behind the preload library), server and client
// on one host as `softroce run` runs them.
//
// Each of the daemon's two doorbells (the default, answered by the daemon,
// and the one-way doorbells of uverbsd.Config.OneWayDoorbells, on a second
// daemon on the same device) is held to its own target: the default's
// ib_send_lat to its floor, a blocking round trip between two processes
// over the same kind of socket under perftest's load (each half round trip
// of a ping-pong costs a doorbell answered by the daemon), and the one-way
// doorbells' ib_write_bw to the in-process RC WRITE of the Go API. The
// other comparisons with the in-process counterparts, and the floor itself
// against the same round trip without the load, are informative. A third
// daemon checks its programs (softroce run --check, package check): its
// ib_write_bw keeps at least 0.8 of the default's throughput, its
// ib_send_lat at most 1.25 of its latency.
const (
	daemonWriteName       = "ib_write_bw -s 65536 through the daemon"
	daemonLatName         = "ib_send_lat -s 64 through the daemon, t_typical"
	daemonOneWayWriteName = "ib_write_bw -s 65536, one-way doorbells"
	daemonOneWayLatName   = "ib_send_lat -s 64, one-way doorbells, t_typical"
	daemonFloorName       = "floor: unix seqpacket round trip p50, 2 busy pollers"
	daemonCheckWriteName  = "ib_write_bw -s 65536 through the daemon, --check"
	daemonCheckLatName    = "ib_send_lat -s 64 through the daemon, --check, t_typical"

	inprocWriteBase = "in-process RC WRITE mtu=4096 msg=64KiB"
	inprocLatBase   = "in-process RC pingpong RTT p50"
	floorBase       = "floor: unix seqpacket round trip p50, 2 busy pollers"
	idleFloorBase   = "the same round trip, no busy poller"
)

// daemonRows returns the daemon group's rows, each skipped with why: the
// default doorbell against its floor (target) and the in-process pair,
// the one-way doorbells against the in-process pair (the WRITE a target),
// the floor, and the checking daemon against the default (targets).
func daemonRows(why string) []Row {
	return []Row{
		{Group: "daemon", Name: daemonLatName, Unit: "us", Baseline: floorBase,
			BaseUnit: "us", Target: "ratio <= 1.5", Skipped: why},
		{Group: "daemon", Name: daemonWriteName, Unit: "Gb/s", Baseline: inprocWriteBase,
			BaseUnit: "Gb/s", Skipped: why},
		{Group: "daemon", Name: daemonLatName, Unit: "us", Baseline: inprocLatBase,
			BaseUnit: "us", Skipped: why},
		{Group: "daemon", Name: daemonOneWayWriteName, Unit: "Gb/s", Baseline: inprocWriteBase,
			BaseUnit: "Gb/s", Target: "ratio >= 0.5", Skipped: why},
		{Group: "daemon", Name: daemonOneWayLatName, Unit: "us", Baseline: inprocLatBase,
			BaseUnit: "us", Skipped: why},
		{Group: "daemon", Name: daemonFloorName, Unit: "us", Baseline: idleFloorBase,
			BaseUnit: "us", Skipped: why},
		{Group: "daemon", Name: daemonCheckWriteName, Unit: "Gb/s", Baseline: daemonWriteName,
			BaseUnit: "Gb/s", Target: "ratio >= 0.8", Skipped: why},
		{Group: "daemon", Name: daemonCheckLatName, Unit: "us", Baseline: daemonLatName,
			BaseUnit: "us", Target: "ratio <= 1.25", Skipped: why},
	}
}

// perftestResult finds the result line of a perftest tool's output (the
// line after the one that starts with "#bytes") and returns its column
// col (0-based) as a number.
func perftestResult(out string, col int) (float64, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "#bytes") {
			continue
		}
		for _, r := range lines[i+1:] {
			f := strings.Fields(r)
			if len(f) == 0 || strings.HasPrefix(f[0], "---") {
				continue
			}
			if col >= len(f) {
				return 0, fmt.Errorf("perftest result %q: no column %d", r, col)
			}
			v, err := strconv.ParseFloat(f[col], 64)
			if err != nil {
				return 0, fmt.Errorf("perftest result %q: column %d: %w", r, col, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("no perftest result in %q", out)
}
