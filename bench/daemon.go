package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// The daemon rows run Debian's perftest tools, unmodified, on a softroce
// daemon (package uverbsd behind the preload library), server and client
// on one host as `softroce run` runs them, against the Go API's in-process
// counterpart measured in the same run.
//
// The last two rows run the same tools on a second daemon on the same
// device whose clients ring their send doorbells one-way
// (uverbsd.Config.OneWayDoorbells): informative, next to the first two
// (the daemon's default), so that each run shows which doorbell wins on
// its machine.
const (
	daemonWriteName       = "ib_write_bw -s 65536 through the daemon"
	daemonLatName         = "ib_send_lat -s 64 through the daemon, t_typical"
	daemonOneWayWriteName = "ib_write_bw -s 65536, one-way doorbells"
	daemonOneWayLatName   = "ib_send_lat -s 64, one-way doorbells, t_typical"
)

// daemonRows returns the daemon group's rows, each skipped with why.
func daemonRows(why string) []Row {
	return []Row{
		{Group: "daemon", Name: daemonWriteName, Unit: "Gb/s", Baseline: "in-process RC WRITE mtu=4096 msg=64KiB",
			BaseUnit: "Gb/s", Target: "ratio >= 0.5", Skipped: why},
		{Group: "daemon", Name: daemonLatName, Unit: "us", Baseline: "in-process RC pingpong RTT p50",
			BaseUnit: "us", Target: "ratio <= 2", Skipped: why},
		{Group: "daemon", Name: daemonOneWayWriteName, Unit: "Gb/s", Baseline: "in-process RC WRITE mtu=4096 msg=64KiB",
			BaseUnit: "Gb/s", Skipped: why},
		{Group: "daemon", Name: daemonOneWayLatName, Unit: "us", Baseline: "in-process RC pingpong RTT p50",
			BaseUnit: "us", Skipped: why},
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
