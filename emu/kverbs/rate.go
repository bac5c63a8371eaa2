package kverbs

import (
	"encoding/binary"
	"fmt"

	"github.com/softroce/softroce/emu"
	"golang.org/x/sys/unix"
)

// rateTable maps each rate to its multiple of 2.5 Gb/s and its Mb/s
// (as ib_rate_to_mult and ib_rate_to_mbps in verbs.c, line-coding overhead
// included).
var rateTable = map[emu.Rate]struct{ mult, mbps int }{
	emu.Rate2_5Gbps: {1, 2500}, emu.Rate5Gbps: {2, 5000}, emu.Rate10Gbps: {4, 10000}, emu.Rate20Gbps: {8, 20000},
	emu.Rate30Gbps: {12, 30000}, emu.Rate40Gbps: {16, 40000}, emu.Rate60Gbps: {24, 60000}, emu.Rate80Gbps: {32, 80000},
	emu.Rate120Gbps: {48, 120000}, emu.Rate14Gbps: {6, 14062}, emu.Rate56Gbps: {22, 56250},
	emu.Rate112Gbps: {45, 112500}, emu.Rate168Gbps: {67, 168750}, emu.Rate25Gbps: {10, 25781},
	emu.Rate100Gbps: {40, 103125}, emu.Rate200Gbps: {80, 206250}, emu.Rate300Gbps: {120, 309375},
	emu.Rate28Gbps: {11, 28125}, emu.Rate50Gbps: {20, 53125}, emu.Rate400Gbps: {160, 425000},
	emu.Rate600Gbps: {240, 637500}, emu.Rate800Gbps: {320, 850000}, emu.Rate1600Gbps: {640, 1700000},
}

// RateToMult returns r as a multiple of 2.5 Gb/s, -1 for an unknown rate
// or PORT_CURRENT. Mirrors ib_rate_to_mult.
func RateToMult(r emu.Rate) int {
	if e, ok := rateTable[r]; ok {
		return e.mult
	}
	return -1
}

// MultToRate returns the rate that is mult × 2.5 Gb/s, emu.RatePortCurrent for
// a multiple no rate has. Mirrors mult_to_ib_rate.
func MultToRate(mult int) emu.Rate {
	for r, e := range rateTable {
		if e.mult == mult {
			return r
		}
	}
	return emu.RatePortCurrent
}

// RateToMbps returns r in Mb/s, -1 for an unknown rate or PORT_CURRENT.
// Mirrors ib_rate_to_mbps.
func RateToMbps(r emu.Rate) int {
	if e, ok := rateTable[r]; ok {
		return e.mbps
	}
	return -1
}

// SpeedInfo is what ib_port_attr_to_speed_info reports: a display string
// and the rate in units of 100 Mb/s.
type SpeedInfo struct {
	Str  string // display string as sysfs rate shows it, e.g. "100.0 Gb/sec (4X EDR)"
	Rate int    // deci-Gb/s
}

// PortAttrToSpeedInfo converts a port's active speed and width into a
// display string and a rate in units of 100 Mb/s: per-lane SDR 25, DDR 50,
// QDR 100, FDR10 100, FDR 140, EDR 250, HDR 500, NDR 1000, XDR 2000 times
// the lane count; an unknown speed counts as SDR, an unknown width fails
// with EINVAL. Mirrors ib_port_attr_to_speed_info (rdma-next, Dec 2025).
func PortAttrToSpeedInfo(a *emu.PortAttr) (SpeedInfo, error) {
	perLane, name := 25, "SDR"
	switch a.ActiveSpeed {
	case emu.SpeedDDR:
		perLane, name = 50, "DDR"
	case emu.SpeedQDR:
		perLane, name = 100, "QDR"
	case emu.SpeedFDR10:
		perLane, name = 100, "FDR10"
	case emu.SpeedFDR:
		perLane, name = 140, "FDR"
	case emu.SpeedEDR:
		perLane, name = 250, "EDR"
	case emu.SpeedHDR:
		perLane, name = 500, "HDR"
	case emu.SpeedNDR:
		perLane, name = 1000, "NDR"
	case emu.SpeedXDR:
		perLane, name = 2000, "XDR"
	}
	rate := perLane * a.ActiveWidth.Lanes()
	if rate < 0 {
		return SpeedInfo{}, &emu.Error{Op: "port speed info", Reason: fmt.Sprintf("width %d", a.ActiveWidth), Errno: unix.EINVAL}
	}
	return SpeedInfo{Str: fmt.Sprintf("%d.%d Gb/sec (%dX %s)", rate/10, rate%10, a.ActiveWidth.Lanes(), name), Rate: rate}, nil
}

// LIDCPU16 returns the low 16 bits of a 32-bit LID (ib_lid_cpu16; the
// kernel warns when upper bits are set).
func LIDCPU16(lid uint32) uint16 { return uint16(lid) }

// LIDBE16 returns the low 16 bits of lid in network byte order, as the two
// bytes a __be16 holds in memory (ib_lid_be16).
func LIDBE16(lid uint32) [2]byte {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], uint16(lid))
	return b
}
