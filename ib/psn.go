package ib

// RoCEv2UDPPort is the IANA UDP destination port of RoCEv2
// (ROCE_V2_UDP_DPORT).
const RoCEv2UDPPort = 4791

// PSNMask keeps the 24 bits of a packet sequence number (BTH_PSN_MASK);
// the core masks RQPSN and SQPSN with it (_ib_modify_qp).
const PSNMask = 0xFFFFFF

// QPNMask keeps the 24 bits of a QP number (IB_QPN_MASK).
const QPNMask = 0xFFFFFF

// PSN arithmetic (IBTA vol. 1 §9.7.1; rxe's psn_compare in rxe_hdr.h):
// PSNs are 24 bits and wrap; every increment is modulo 2^24.

// PSNAdd returns psn + n modulo 2^24.
func PSNAdd(psn, n uint32) uint32 { return (psn + n) & PSNMask }

// PSNSub returns a - b modulo 2^24: how many PSNs b is before a.
func PSNSub(a, b uint32) uint32 { return (a - b) & PSNMask }

// PSNCompare compares two PSNs in the half-space sense rxe uses: the sign
// of (a - b) shifted left 8 bits and read as a signed 32-bit number. It
// returns > 0 when a is after b ((a-b) mod 2^24 in [1, 2^23-1]), < 0 when a
// is before b (in [2^23, 2^24-1]; a distance of exactly 2^23 counts as
// before), and 0 when they are equal. Mirrors psn_compare.
func PSNCompare(a, b uint32) int {
	d := int32((a - b) << 8)
	switch {
	case d > 0:
		return 1
	case d < 0:
		return -1
	}
	return 0
}
