package bench

import "fmt"

// udpCase is one UDP link measurement: an RC WRITE case, with or without
// UDP GSO on the sending links (udp.Config.GSO).
type udpCase struct {
	writeCase
	gso bool
}

// udpCases are the UDP link's RC WRITE measurements: one message size per
// path MTU, each without GSO (the link's default) and with it.
var udpCases = []udpCase{
	{writeCase{mtu: writeCases[0].mtu, msg: 64 << 10, depth: 16}, false},
	{writeCase{mtu: writeCases[2].mtu, msg: 64 << 10, depth: 16}, false},
	{writeCase{mtu: writeCases[0].mtu, msg: 64 << 10, depth: 16}, true},
	{writeCase{mtu: writeCases[2].mtu, msg: 64 << 10, depth: 16}, true},
}

// udpRowName names the row of c; lo marks the rows measured on the
// loopback (without root) rather than on a veth between two namespaces.
func udpRowName(c udpCase, lo bool) string {
	s := fmt.Sprintf("RC WRITE mtu=%d msg=%s", c.mtu.Bytes(), sizeName(c.msg))
	if c.gso {
		s += " GSO"
	}
	if lo {
		s += " lo"
	}
	return s
}

// udpBaseline names the baseline of c: the raw blast sends one datagram
// per sendto for the link without GSO, and GSO sends of 64 datagrams to a
// socket with UDP_GRO for the link with it.
func udpBaseline(c udpCase) string {
	if c.gso {
		return "raw UDP GSO blast"
	}
	return "raw UDP socket blast"
}

// udpRows returns the UDP rows, marked skipped for why.
func udpRows(why string) []Row {
	var rows []Row
	for _, c := range udpCases {
		rows = append(rows, Row{Group: "udp", Name: udpRowName(c, false), Unit: "Gb/s",
			Baseline: udpBaseline(c), BaseUnit: "Gb/s", Target: udpTarget(c), Skipped: why})
	}
	return rows
}

// udpTarget is the target of c's row: the link without GSO is held to
// 0.8 of the raw blast; with GSO the row is informative.
func udpTarget(c udpCase) string {
	if c.gso {
		return ""
	}
	return "ratio >= 0.8"
}
