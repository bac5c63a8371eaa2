package bench

import "fmt"

// udpCases are the UDP link's RC WRITE measurements: one message size per
// path MTU.
var udpCases = []writeCase{
	{mtu: writeCases[0].mtu, msg: 64 << 10, depth: 16},
	{mtu: writeCases[2].mtu, msg: 64 << 10, depth: 16},
}

// udpRowName names the row of c.
func udpRowName(c writeCase) string {
	return fmt.Sprintf("RC WRITE mtu=%d msg=%s", c.mtu.Bytes(), sizeName(c.msg))
}

// udpRows returns the UDP rows, marked skipped for why.
func udpRows(why string) []Row {
	var rows []Row
	for _, c := range udpCases {
		rows = append(rows, Row{Group: "udp", Name: udpRowName(c), Unit: "Gb/s",
			Baseline: "raw UDP socket blast", BaseUnit: "Gb/s", Target: "ratio >= 0.8", Skipped: why})
	}
	return rows
}
