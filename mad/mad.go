package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MAD common header, IBA vol. 1 §13.4.2 (Figure 145). All fields
// big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   |  ClassVersion |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         TransactionID                         |
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// Sizes in bytes.
const (
	Size       = 256 // a MAD (IB_MGMT_MAD_SIZE)
	HeaderSize = 24  // the common header
	DataSize   = Size - HeaderSize
)

// Header values of the Communication Management class.
const (
	BaseVersion    = 1    // IB_MGMT_BASE_VERSION
	ClassCM        = 0x07 // IB_MGMT_CLASS_CM
	CMClassVersion = 2    // IB_CM_CLASS_VERSION
	MethodSend     = 0x03 // IB_MGMT_METHOD_SEND: every CM message
	methodResponse = 0x80 // the R bit of byte 3
)

const (
	hdrBaseVersion  = 0
	hdrMgmtClass    = 1
	hdrClassVersion = 2
	hdrMethod       = 3
	hdrStatus       = 4
	hdrClassSpec    = 6
	hdrTID          = 8
	hdrAttrID       = 16
	hdrAttrMod      = 20
)

// MAD is a view of a whole management datagram, header and data. Views
// returned by Parse are exactly Size bytes long.
type MAD []byte

// HeaderFields holds every field of the common header, for construction
// with MAD.EncodeHeader.
type HeaderFields struct {
	BaseVersion       uint8
	MgmtClass         uint8
	ClassVersion      uint8
	Response          bool  // R: the method is a response
	Method            uint8 // 7 bits
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttrID
	AttributeModifier uint32
}

// BaseVersion returns the MAD base version (1).
func (m MAD) BaseVersion() uint8 { return m[hdrBaseVersion] }

// MgmtClass returns the management class (ClassCM for CM).
func (m MAD) MgmtClass() uint8 { return m[hdrMgmtClass] }

// ClassVersion returns the class version.
func (m MAD) ClassVersion() uint8 { return m[hdrClassVersion] }

// Method returns the 7-bit method.
func (m MAD) Method() uint8 { return m[hdrMethod] &^ methodResponse }

// Response reports the R bit.
func (m MAD) Response() bool { return m[hdrMethod]&methodResponse != 0 }

// Status returns the status field.
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[hdrStatus:]) }

// ClassSpecific returns the class-specific field.
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[hdrClassSpec:]) }

// TransactionID returns the transaction ID.
func (m MAD) TransactionID() uint64 { return binary.BigEndian.Uint64(m[hdrTID:]) }

// AttributeID returns the attribute ID (the CM message type).
func (m MAD) AttributeID() AttrID { return AttrID(binary.BigEndian.Uint16(m[hdrAttrID:])) }

// AttributeModifier returns the attribute modifier.
func (m MAD) AttributeModifier() uint32 { return binary.BigEndian.Uint32(m[hdrAttrMod:]) }

// Data returns the class data after the common header.
func (m MAD) Data() []byte { return m[HeaderSize:Size] }

// HeaderFields returns the common header's fields.
func (m MAD) HeaderFields() HeaderFields {
	return HeaderFields{BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(),
		Response: m.Response(), Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(),
		TransactionID: m.TransactionID(), AttributeID: m.AttributeID(), AttributeModifier: m.AttributeModifier()}
}

// EncodeHeader writes f into the common header (reserved bytes zeroed).
func (m MAD) EncodeHeader(f *HeaderFields) {
	m[hdrBaseVersion] = f.BaseVersion
	m[hdrMgmtClass] = f.MgmtClass
	m[hdrClassVersion] = f.ClassVersion
	m[hdrMethod] = f.Method &^ methodResponse
	if f.Response {
		m[hdrMethod] |= methodResponse
	}
	binary.BigEndian.PutUint16(m[hdrStatus:], f.Status)
	binary.BigEndian.PutUint16(m[hdrClassSpec:], f.ClassSpecific)
	binary.BigEndian.PutUint64(m[hdrTID:], f.TransactionID)
	binary.BigEndian.PutUint16(m[hdrAttrID:], uint16(f.AttributeID))
	m[18], m[19] = 0, 0
	binary.BigEndian.PutUint32(m[hdrAttrMod:], f.AttributeModifier)
}

// ErrTruncated is wrapped by Parse's error for a buffer shorter than Size.
var ErrTruncated = errors.New("mad: truncated")

// Parse returns the MAD at the start of b. It checks that b holds at least
// Size bytes (a UD receive buffer may be larger) and that the base version
// is 1, and returns a view of exactly Size bytes.
func Parse(b []byte) (MAD, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("mad: %d bytes, want %d: %w", len(b), Size, ErrTruncated)
	}
	m := MAD(b[:Size])
	if v := m.BaseVersion(); v != BaseVersion {
		return nil, fmt.Errorf("mad: base version %d, want %d", v, BaseVersion)
	}
	return m, nil
}

// ParseCM is Parse for a Communication Management MAD: class ClassCM,
// class version 2, method Send, and an attribute this package decodes
// (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP; LAP and APR,
// which the kernel drops on a RoCE port, and ClassPortInfo are refused).
func ParseCM(b []byte) (MAD, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	switch {
	case m.MgmtClass() != ClassCM:
		return nil, fmt.Errorf("mad: class %#02x is not CM", m.MgmtClass())
	case m.ClassVersion() != CMClassVersion:
		return nil, fmt.Errorf("mad: CM class version %d, want %d", m.ClassVersion(), CMClassVersion)
	case m.Method() != MethodSend || m.Response():
		return nil, fmt.Errorf("mad: CM method %#02x, want Send", m[hdrMethod])
	}
	switch a := m.AttributeID(); a {
	case AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrSIDRREP:
	default:
		return nil, fmt.Errorf("mad: CM attribute %v not supported", a)
	}
	return m, nil
}

// NewCM returns a zeroed MAD carrying a CM message of attribute a with
// transaction ID tid: base version 1, class CM version 2, method Send.
func NewCM(a AttrID, tid uint64) MAD {
	m := make(MAD, Size)
	m.EncodeHeader(&HeaderFields{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TransactionID: tid, AttributeID: a})
	return m
}

// AttrID is a MAD attribute ID; for the CM class it names the message.
type AttrID uint16

// CM attribute IDs, IBA vol. 1 Table 106 (CM_*_ATTR_ID in cm_msgs.h).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "ConnectRequest", AttrMRA: "MsgRcptAck",
	AttrREJ: "ConnectReject", AttrREP: "ConnectReply", AttrRTU: "ReadyToUse", AttrDREQ: "DisconnectRequest",
	AttrDREP: "DisconnectReply", AttrSIDRREQ: "ServiceIDResReq", AttrSIDRREP: "ServiceIDResReqResp",
	AttrLAP: "LoadAlternatePath", AttrAPR: "AlternatePathResponse",
}

// String returns the IBA name of a CM attribute ("ConnectRequest"), or
// its number.
func (a AttrID) String() string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// IsValid reports whether a is a CM attribute of Table 106.
func (a AttrID) IsValid() bool { _, ok := attrNames[a]; return ok }
