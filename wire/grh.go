package wire

import "encoding/binary"

// GRH is a view of a Global Route Header (IBTA vol. 1 §8.3), which follows
// the LRH on InfiniBand and the Ethernet header (ethertype 0x8915) in
// RoCEv1. Its layout is that of an IPv6 header; RoCEv2 replaces it with a
// real IPv4 or IPv6 header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| IPVer |    TClass     |            Flow Label                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         PayLen                |    NxtHdr     |    HopLmt     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     SGID (128 bits)                           |
//	|                     DGID (128 bits)                           |
type GRH []byte

// GRHFields holds the fields of a GRH.
type GRHFields struct {
	IPVer     uint8    // 4 bits, 6
	TClass    uint8    // traffic class
	FlowLabel uint32   // 20 bits
	PayLen    uint16   // bytes after the GRH up to and including the ICRC
	NxtHdr    uint8    // 0x1B: IBA transport (BTH follows)
	HopLmt    uint8    // hop limit
	SGID      [16]byte // source GID
	DGID      [16]byte // destination GID
}

// GRHNextHeaderBTH is the GRH NxtHdr value announcing an IBA transport
// header (IBTA §8.3.1).
const GRHNextHeaderBTH = 0x1b

// IPVer returns the 4-bit IP version field.
func (b GRH) IPVer() uint8 { return b[0] >> 4 }

// TClass returns the traffic class.
func (b GRH) TClass() uint8 { return uint8(binary.BigEndian.Uint16(b[0:]) >> 4) }

// SetTClass sets the traffic class.
func (b GRH) SetTClass(v uint8) {
	binary.BigEndian.PutUint16(b[0:], binary.BigEndian.Uint16(b[0:])&0xf00f|uint16(v)<<4)
}

// FlowLabel returns the 20-bit flow label.
func (b GRH) FlowLabel() uint32 { return binary.BigEndian.Uint32(b[0:]) & 0xfffff }

// SetFlowLabel sets the flow label; only the low 20 bits are used.
func (b GRH) SetFlowLabel(v uint32) {
	binary.BigEndian.PutUint32(b[0:], binary.BigEndian.Uint32(b[0:])&^0xfffff|v&0xfffff)
}

// PayLen returns the payload length.
func (b GRH) PayLen() uint16 { return binary.BigEndian.Uint16(b[4:]) }

// NxtHdr returns the next header field.
func (b GRH) NxtHdr() uint8 { return b[6] }

// HopLmt returns the hop limit.
func (b GRH) HopLmt() uint8 { return b[7] }

// SGID returns the source GID.
func (b GRH) SGID() [16]byte { return [16]byte(b[8:24]) }

// DGID returns the destination GID.
func (b GRH) DGID() [16]byte { return [16]byte(b[24:40]) }

// Encode writes f into b.
func (b GRH) Encode(f *GRHFields) {
	binary.BigEndian.PutUint32(b[0:], uint32(f.IPVer&0xf)<<28|uint32(f.TClass)<<20|f.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(b[4:], f.PayLen)
	b[6] = f.NxtHdr
	b[7] = f.HopLmt
	copy(b[8:24], f.SGID[:])
	copy(b[24:40], f.DGID[:])
}

// Fields returns the fields of b.
func (b GRH) Fields() GRHFields {
	return GRHFields{
		IPVer: b.IPVer(), TClass: b.TClass(), FlowLabel: b.FlowLabel(), PayLen: b.PayLen(),
		NxtHdr: b.NxtHdr(), HopLmt: b.HopLmt(), SGID: b.SGID(), DGID: b.DGID(),
	}
}
