package wire

// UDP source port selection for RoCEv2. The destination port is always
// 4791; the source port spreads flows over ECMP paths and NIC queues and
// is always in the dynamic range 0xC000-0xFFFF
// (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN/MAX).

// Flow label and port constants of include/rdma/ib_verbs.h.
const (
	FlowLabelMask     = 0xfffff // IB_GRH_FLOWLABEL_MASK
	UDPSportMin       = 0xc000  // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
	UDPSportMax       = 0xffff  // IB_ROCE_UDP_ENCAP_VALID_PORT_MAX
	goldenRatio32     = 0x61c88647
	rxeSportHashBits  = 14
	rxeSportHashShift = 32 - rxeSportHashBits
)

// FlowLabelToUDPSport folds a 20-bit flow label into a UDP source port:
// the low 14 bits XOR the high 6 bits, in the 0xC000 range. Mirrors
// rdma_flow_label_to_udp_sport (include/rdma/ib_verbs.h).
func FlowLabelToUDPSport(fl uint32) uint16 {
	low := fl & 0x03fff
	high := fl & 0xfc000
	low ^= high >> 14
	return uint16(low | UDPSportMin)
}

// CalcFlowLabel derives a flow label from the local and remote QPNs: their
// 64-bit product folded by XOR of the bits above 20 and 40, masked to 20
// bits. It is symmetric in lqpn and rqpn, so both ends of a connection
// derive the same label. Mirrors rdma_calc_flow_label.
func CalcFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & FlowLabelMask)
}

// GetUDPSport returns the UDP source port of a connected QP: from the GRH
// flow label fl, or when fl is 0 from CalcFlowLabel(lqpn, rqpn). Mirrors
// rdma_get_udp_sport, which rxe_modify_qp applies when the attributes
// carry an AV with a GRH.
func GetUDPSport(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = CalcFlowLabel(lqpn, rqpn)
	}
	return FlowLabelToUDPSport(fl)
}

// RXEInitialUDPSport returns the UDP source port rxe gives a QP when it is
// created, before any modify: 0xC000 + (hash_32(qpn, 14) & 0x3FFF). UD
// QPs keep it; GSI uses QPN 1. Mirrors rxe_qp_init_req.
func RXEInitialUDPSport(qpn uint32) uint16 {
	h := (qpn * goldenRatio32) >> rxeSportHashShift
	return uint16(UDPSportMin + h&0x3fff)
}
