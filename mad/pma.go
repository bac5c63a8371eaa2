package mad

import (
	"encoding/binary"
	"math"
)

// Performance Management (PMA) class, IBA vol. 1 §16.1, as rxe answers
// it from Linux 7.2 (drivers/infiniband/sw/rxe/rxe_mad.c): ClassPortInfo,
// PortCounters and PortCountersExtended, on port 1, to a Get.
const (
	ClassPerfMgmt = 0x04 // IB_MGMT_CLASS_PERF_MGMT

	AttrPMAClassPortInfo           AttrID = 0x0001 // IB_PMA_CLASS_PORT_INFO
	AttrPortCounters               AttrID = 0x0012 // IB_PMA_PORT_COUNTERS
	AttrPortCountersExtended       AttrID = 0x001d // IB_PMA_PORT_COUNTERS_EXT
	StatusUnsupportedMethod               = 0x0008 // IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD
	PMAClassCapExtWidth                   = 1 << 9 // IB_PMA_CLASS_CAP_EXT_WIDTH
	pmaDataOffset                         = HeaderSize + 40
	pmaPortCountersLinkDowned             = 7  // struct ib_pma_portcounters: link_downed_counter
	pmaExtXmitData                        = 8  // struct ib_pma_portcounters_ext: port_xmit_data
	pmaExtRcvData                         = 16 // port_rcv_data
	pmaExtXmitPackets                     = 24 // port_xmit_packets
	pmaExtRcvPackets                      = 32 // port_rcv_packets
	pmaClassPortInfoCapabilityMask        = 2  // struct ib_class_port_info: capability_mask
)

// PMACounters are the device counters a PMA answer reports: rxe's
// link_downed, sent_bytes, rcvd_bytes, sent_pkts and rcvd_pkts.
type PMACounters struct {
	LinkDowned           uint64
	SentBytes, RcvdBytes uint64
	SentPkts, RcvdPkts   uint64
}

// PMAAnswer is rxe's process_mad for a MAD received on port 1's GSI QP (b
// from its first byte, at least Size bytes; shorter is no answer). It
// returns the reply (a GetResp of the request's header, status and
// attribute data as rxe sets them) and true when rxe replies; false when
// it does not (the MAD goes on to the MAD layer's agents, see
// UnmatchedReply).
//
// A PMA Get of ClassPortInfo reports the capability mask
// PMAClassCapExtWidth (64-bit data counters) and nothing else; of
// PortCounters only LinkDownedCounter (stopping at 255, as IBA §16.1.3.5
// has counters stop at all ones); of PortCountersExtended the 64-bit
// PortXmitData and PortRcvData (bytes over 4, the IBA's unit of 32-bit
// words) and PortXmitPkts and PortRcvPkts. Every other PMA attribute of a
// Get is not answered here, its status set to
// StatusUnsupportedMethodAttr. A PMA MAD of another method is answered
// with a MAD of zeros (rxe replies with its cleared output buffer), which
// matches no request, so that the requester sees no answer; a MAD of
// another class is not answered.
func PMAAnswer(b []byte, port uint8, c PMACounters) (MAD, bool) {
	if len(b) < Size || port != 1 {
		return nil, false
	}
	m := MAD(b[:Size])
	if m.MgmtClass() != ClassPerfMgmt {
		return nil, false
	}
	r := make(MAD, Size)
	if m[hdrMethod] != MethodGet {
		return r, true
	}
	d := r[pmaDataOffset:]
	switch m.AttributeID() {
	case AttrPMAClassPortInfo:
		binary.BigEndian.PutUint16(d[pmaClassPortInfoCapabilityMask:], PMAClassCapExtWidth)
	case AttrPortCounters:
		d[pmaPortCountersLinkDowned] = uint8(min(c.LinkDowned, math.MaxUint8))
	case AttrPortCountersExtended:
		binary.BigEndian.PutUint64(d[pmaExtXmitData:], c.SentBytes>>2)
		binary.BigEndian.PutUint64(d[pmaExtRcvData:], c.RcvdBytes>>2)
		binary.BigEndian.PutUint64(d[pmaExtXmitPackets:], c.SentPkts)
		binary.BigEndian.PutUint64(d[pmaExtRcvPackets:], c.RcvdPkts)
	default:
		return nil, false
	}
	copy(r[:HeaderSize], m[:HeaderSize])
	r[hdrMethod] = MethodGetResp
	binary.BigEndian.PutUint16(r[hdrStatus:], 0)
	return r, true
}
