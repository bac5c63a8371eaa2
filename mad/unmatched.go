package mad

import "encoding/binary"

// Methods and status of the common header beyond Send (IBA vol. 1
// §13.4.5, Table 141; §13.4.7, Table 142).
const (
	MethodGet     = 0x01 // IB_MGMT_METHOD_GET
	MethodSet     = 0x02 // IB_MGMT_METHOD_SET
	MethodGetResp = 0x81 // IB_MGMT_METHOD_GET_RESP
	// StatusUnsupportedMethodAttr is the status of a response to a
	// method or attribute the receiver does not support
	// (IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB).
	StatusUnsupportedMethodAttr = 0x000c
)

// Subnet management classes, which QP1 never takes.
const (
	classSubnLIDRouted     = 0x01
	classSubnDirectedRoute = 0x81
)

// UnmatchedReply is the kernel's MAD layer on a GSI QP whose only agent
// is the CM (ib_cm registers class CM version 2, method Send): given a MAD
// received on QP1 (b from its first byte, at least Size bytes), it returns
// the reply the kernel sends when no agent takes the MAD, and false when
// the kernel sends nothing (the MAD is invalid and dropped, or the CM
// takes it).
//
// As ib_mad.c's validate_mad, a base version other than 1, a subnet
// management class, and a CM MAD of a method other than Send unless its
// attribute is ClassPortInfo are dropped. A MAD no agent takes is answered
// only when it is a Get or a Set (generate_unmatched_resp): the same MAD
// with method GetResp and status StatusUnsupportedMethodAttr.
func UnmatchedReply(b []byte) (MAD, bool) {
	if len(b) < Size {
		return nil, false
	}
	m := MAD(b[:Size])
	switch {
	case m.BaseVersion() != BaseVersion:
		return nil, false
	case m.MgmtClass() == classSubnLIDRouted || m.MgmtClass() == classSubnDirectedRoute:
		return nil, false
	case m.MgmtClass() == ClassCM && m.AttributeID() != AttrClassPortInfo && m[hdrMethod] != MethodSend:
		return nil, false
	case m.MgmtClass() == ClassCM && m.ClassVersion() == CMClassVersion && m[hdrMethod] == MethodSend:
		return nil, false // the CM's
	case m[hdrMethod] != MethodGet && m[hdrMethod] != MethodSet:
		return nil, false
	}
	r := append(MAD(nil), m...)
	r[hdrMethod] = MethodGetResp
	binary.BigEndian.PutUint16(r[hdrStatus:], StatusUnsupportedMethodAttr)
	return r, true
}
