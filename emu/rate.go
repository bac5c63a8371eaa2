package emu

import ()

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
