package emu

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Rate is enum ib_rate, a static rate.
type Rate int32

// Static rates with the kernel's values (value 24 is unassigned).
const (
	RatePortCurrent Rate = 0  // IB_RATE_PORT_CURRENT
	Rate2_5Gbps     Rate = 2  // IB_RATE_2_5_GBPS
	Rate5Gbps       Rate = 5  // IB_RATE_5_GBPS
	Rate10Gbps      Rate = 3  // IB_RATE_10_GBPS
	Rate20Gbps      Rate = 6  // IB_RATE_20_GBPS
	Rate30Gbps      Rate = 4  // IB_RATE_30_GBPS
	Rate40Gbps      Rate = 7  // IB_RATE_40_GBPS
	Rate60Gbps      Rate = 8  // IB_RATE_60_GBPS
	Rate80Gbps      Rate = 9  // IB_RATE_80_GBPS
	Rate120Gbps     Rate = 10 // IB_RATE_120_GBPS
	Rate14Gbps      Rate = 11 // IB_RATE_14_GBPS
	Rate56Gbps      Rate = 12 // IB_RATE_56_GBPS
	Rate112Gbps     Rate = 13 // IB_RATE_112_GBPS
	Rate168Gbps     Rate = 14 // IB_RATE_168_GBPS
	Rate25Gbps      Rate = 15 // IB_RATE_25_GBPS
	Rate100Gbps     Rate = 16 // IB_RATE_100_GBPS
	Rate200Gbps     Rate = 17 // IB_RATE_200_GBPS
	Rate300Gbps     Rate = 18 // IB_RATE_300_GBPS
	Rate28Gbps      Rate = 19 // IB_RATE_28_GBPS
	Rate50Gbps      Rate = 20 // IB_RATE_50_GBPS
	Rate400Gbps     Rate = 21 // IB_RATE_400_GBPS
	Rate600Gbps     Rate = 22 // IB_RATE_600_GBPS
	Rate800Gbps     Rate = 23 // IB_RATE_800_GBPS
	Rate1600Gbps    Rate = 25 // IB_RATE_1600_GBPS (rdma-next late 2025)
)

// rateTable maps each rate to its multiple of 2.5 Gb/s and its Mb/s
// (as ib_rate_to_mult and ib_rate_to_mbps in verbs.c, line-coding overhead
// included).
var rateTable = map[Rate]struct{ mult, mbps int }{
	Rate2_5Gbps: {1, 2500}, Rate5Gbps: {2, 5000}, Rate10Gbps: {4, 10000}, Rate20Gbps: {8, 20000},
	Rate30Gbps: {12, 30000}, Rate40Gbps: {16, 40000}, Rate60Gbps: {24, 60000}, Rate80Gbps: {32, 80000},
	Rate120Gbps: {48, 120000}, Rate14Gbps: {6, 14062}, Rate56Gbps: {22, 56250},
	Rate112Gbps: {45, 112500}, Rate168Gbps: {67, 168750}, Rate25Gbps: {10, 25781},
	Rate100Gbps: {40, 103125}, Rate200Gbps: {80, 206250}, Rate300Gbps: {120, 309375},
	Rate28Gbps: {11, 28125}, Rate50Gbps: {20, 53125}, Rate400Gbps: {160, 425000},
	Rate600Gbps: {240, 637500}, Rate800Gbps: {320, 850000}, Rate1600Gbps: {640, 1700000},
}

// RateToMult returns r as a multiple of 2.5 Gb/s, -1 for an unknown rate
// or PORT_CURRENT. Mirrors ib_rate_to_mult.
func RateToMult(r Rate) int {
	if e, ok := rateTable[r]; ok {
		return e.mult
	}
	return -1
}

// MultToRate returns the rate that is mult × 2.5 Gb/s, RatePortCurrent for
// a multiple no rate has. Mirrors mult_to_ib_rate.
func MultToRate(mult int) Rate {
	for r, e := range rateTable {
		if e.mult == mult {
			return r
		}
	}
	return RatePortCurrent
}

// RateToMbps returns r in Mb/s, -1 for an unknown rate or PORT_CURRENT.
// Mirrors ib_rate_to_mbps.
func RateToMbps(r Rate) int {
	if e, ok := rateTable[r]; ok {
		return e.mbps
	}
	return -1
}

// Speed is enum ib_port_speed, the per-lane speed of a port.
type Speed uint16

// Port speeds.
const (
	SpeedSDR   Speed = 1   // IB_SPEED_SDR
	SpeedDDR   Speed = 2   // IB_SPEED_DDR
	SpeedQDR   Speed = 4   // IB_SPEED_QDR
	SpeedFDR10 Speed = 8   // IB_SPEED_FDR10
	SpeedFDR   Speed = 16  // IB_SPEED_FDR
	SpeedEDR   Speed = 32  // IB_SPEED_EDR
	SpeedHDR   Speed = 64  // IB_SPEED_HDR
	SpeedNDR   Speed = 128 // IB_SPEED_NDR
	SpeedXDR   Speed = 256 // IB_SPEED_XDR
)

// Width is enum ib_port_width.
type Width uint8

// Port widths (the encoded values, not the lane counts).
const (
	Width1X  Width = 1  // IB_WIDTH_1X
	Width2X  Width = 16 // IB_WIDTH_2X
	Width4X  Width = 2  // IB_WIDTH_4X
	Width8X  Width = 4  // IB_WIDTH_8X
	Width12X Width = 8  // IB_WIDTH_12X
)

// Lanes returns the integer width (1, 2, 4, 8, 12), -1 for an unknown value
// (ib_width_enum_to_int).
func (w Width) Lanes() int {
	switch w {
	case Width1X:
		return 1
	case Width2X:
		return 2
	case Width4X:
		return 4
	case Width8X:
		return 8
	case Width12X:
		return 12
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
func PortAttrToSpeedInfo(a *PortAttr) (SpeedInfo, error) {
	perLane, name := 25, "SDR"
	switch a.ActiveSpeed {
	case SpeedDDR:
		perLane, name = 50, "DDR"
	case SpeedQDR:
		perLane, name = 100, "QDR"
	case SpeedFDR10:
		perLane, name = 100, "FDR10"
	case SpeedFDR:
		perLane, name = 140, "FDR"
	case SpeedEDR:
		perLane, name = 250, "EDR"
	case SpeedHDR:
		perLane, name = 500, "HDR"
	case SpeedNDR:
		perLane, name = 1000, "NDR"
	case SpeedXDR:
		perLane, name = 2000, "XDR"
	}
	rate := perLane * a.ActiveWidth.Lanes()
	if rate < 0 {
		return SpeedInfo{}, errorf(unix.EINVAL, "port speed info: width %d", a.ActiveWidth)
	}
	return SpeedInfo{Str: fmt.Sprintf("%d.%d Gb/sec (%dX %s)", rate/10, rate%10, a.ActiveWidth.Lanes(), name), Rate: rate}, nil
}

// EthSpeedToIB converts a netdev speed in Mb/s (no lane information) into
// the width and speed rxe reports, as ib_get_eth_speed does; 0
// or a negative speed counts as 1000 Mb/s.
func EthSpeedToIB(mbps int) (Width, Speed) {
	if mbps <= 0 {
		mbps = 1000
	}
	switch {
	case mbps <= 1000:
		return Width1X, SpeedSDR
	case mbps <= 10000:
		return Width1X, SpeedFDR10
	case mbps <= 20000:
		return Width4X, SpeedDDR
	case mbps <= 25000:
		return Width1X, SpeedEDR
	case mbps <= 40000:
		return Width4X, SpeedFDR10
	case mbps <= 50000:
		return Width2X, SpeedEDR
	case mbps <= 100000:
		return Width4X, SpeedEDR
	case mbps <= 200000:
		return Width4X, SpeedHDR
	}
	return Width4X, SpeedNDR
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
