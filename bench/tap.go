package bench

import "fmt"

// tapRows returns the TAP and latency rows, marked skipped for why.
func tapRows(why string) []Row {
	var rows []Row
	for _, c := range writeCases {
		rows = append(rows, Row{Group: "tap", Name: fmt.Sprintf("RC WRITE mtu=%d msg=%s", c.mtu.Bytes(), sizeName(c.msg)),
			Unit: "Gb/s", Baseline: "raw TAP frames", BaseUnit: "Gb/s", Target: "ratio >= 0.8", Skipped: why})
	}
	rows = append(rows, Row{Group: "tap", Name: "allocs per frame", Unit: "allocs/frame", Baseline: "target",
		BaseUnit: "allocs/frame", Target: "0 allocs/frame", Skipped: why})
	for _, q := range []string{"p50", "p99"} {
		r := Row{Group: "latency", Name: "RC SEND 64 B pingpong RTT " + q, Unit: "us",
			Baseline: "kernel UDP pingpong " + q, BaseUnit: "us", Skipped: why}
		if q == "p50" {
			r.Target = "ratio <= 1.5"
		}
		rows = append(rows, r)
	}
	return rows
}
