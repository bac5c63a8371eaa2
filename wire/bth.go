package wire

import "encoding/binary"

// Base Transport Header, IBTA vol. 1 §9.2 (and Annex A17.4 for the FECN and
// BECN bits of RoCEv2). All fields big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |           Partition Key       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  resv6    |             Destination QP                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   resv7     |          Packet Sequence Number               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Byte 4 (F, B and resv6) is called resv8a in the InfiniBand BTH; the ICRC
// masks all of it.

// Header sizes in bytes.
const (
	BTHSize          = 12 // Base Transport Header
	RDETHSize        = 4  // Reliable Datagram Extended Transport Header
	DETHSize         = 8  // Datagram Extended Transport Header
	XRCETHSize       = 4  // XRC Extended Transport Header
	RETHSize         = 16 // RDMA Extended Transport Header
	AETHSize         = 4  // ACK Extended Transport Header
	AtomicETHSize    = 28 // Atomic Extended Transport Header
	AtomicAckETHSize = 8  // Atomic ACK Extended Transport Header
	ImmDtSize        = 4  // Immediate Data Extended Transport Header
	IETHSize         = 4  // Invalidate Extended Transport Header
	FETHSize         = 4  // Flush Extended Transport Header
	CNPReservedSize  = 16 // the reserved bytes after the BTH of a RoCEv2 CNP
	GRHSize          = 40 // Global Route Header (RoCEv1, InfiniBand)
	ICRCSize         = 4  // Invariant CRC
)

const (
	bthOpcode = 0
	bthFlags  = 1 // SE, M, PadCnt, TVer
	bthPKey   = 2
	bthResv8a = 4 // FECN, BECN, resv6
	bthDestQP = 4 // low 24 bits of the word at 4
	bthAck    = 8 // AckReq, resv7
	bthPSN    = 8 // low 24 bits of the word at 8

	mask24 = 0x00ffffff
)

// BTH is a view of a Base Transport Header. It must be at least BTHSize
// bytes long.
type BTH []byte

// BTHFields holds every field of a BTH, for construction with BTH.Encode.
type BTHFields struct {
	Opcode Opcode // 8 bits: transport type and operation, e.g. RC SEND_ONLY
	SE     bool   // solicited event
	MigReq bool   // M: migration state
	PadCnt uint8  // 2 bits: pad bytes after the payload
	TVer   uint8  // 4 bits: transport header version, 0
	PKey   uint16 // partition key
	FECN   bool   // forward explicit congestion notification (RoCEv2)
	BECN   bool   // backward explicit congestion notification (RoCEv2)
	Resv6  uint8  // 6 reserved bits of byte 4
	DestQP uint32 // 24 bits
	AckReq bool   // A: acknowledge request
	Resv7  uint8  // 7 reserved bits of byte 8
	PSN    uint32 // 24 bits
}

// Opcode returns the OpCode field.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SetOpcode sets the OpCode field.
func (b BTH) SetOpcode(op Opcode) { b[bthOpcode] = uint8(op) }

// SE returns the Solicited Event bit.
func (b BTH) SE() bool { return b[bthFlags]&0x80 != 0 }

// SetSE sets the Solicited Event bit.
func (b BTH) SetSE(v bool) { setBit(&b[bthFlags], 0x80, v) }

// MigReq returns the M (migration request) bit.
func (b BTH) MigReq() bool { return b[bthFlags]&0x40 != 0 }

// SetMigReq sets the M (migration request) bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], 0x40, v) }

// PadCnt returns the 2-bit pad count: the number of zero bytes between the
// payload and the ICRC.
func (b BTH) PadCnt() uint8 { return b[bthFlags] >> 4 & 3 }

// SetPadCnt sets the pad count; only the low 2 bits of v are used.
func (b BTH) SetPadCnt(v uint8) { b[bthFlags] = b[bthFlags]&^0x30 | (v&3)<<4 }

// TVer returns the 4-bit transport header version (0 in IBTA 1.x).
func (b BTH) TVer() uint8 { return b[bthFlags] & 0x0f }

// SetTVer sets the transport header version; only the low 4 bits are used.
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&^0x0f | v&0x0f }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// SetPKey sets the partition key.
func (b BTH) SetPKey(v uint16) { binary.BigEndian.PutUint16(b[bthPKey:], v) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthResv8a]&0x80 != 0 }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthResv8a], 0x80, v) }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthResv8a]&0x40 != 0 }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthResv8a], 0x40, v) }

// Resv6 returns the 6 reserved bits of byte 4.
func (b BTH) Resv6() uint8 { return b[bthResv8a] & 0x3f }

// SetResv6 sets the 6 reserved bits of byte 4; only the low 6 bits are used.
func (b BTH) SetResv6(v uint8) { b[bthResv8a] = b[bthResv8a]&^0x3f | v&0x3f }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthDestQP:]) & mask24 }

// SetDestQP sets the destination QPN; only the low 24 bits are used.
func (b BTH) SetDestQP(v uint32) { put24(b[bthDestQP+1:], v) }

// AckReq returns the A (acknowledge request) bit.
func (b BTH) AckReq() bool { return b[bthAck]&0x80 != 0 }

// SetAckReq sets the A (acknowledge request) bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAck], 0x80, v) }

// Resv7 returns the 7 reserved bits of byte 8.
func (b BTH) Resv7() uint8 { return b[bthAck] & 0x7f }

// SetResv7 sets the 7 reserved bits of byte 8; only the low 7 bits are used.
func (b BTH) SetResv7(v uint8) { b[bthAck] = b[bthAck]&^0x7f | v&0x7f }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() uint32 { return binary.BigEndian.Uint32(b[bthPSN:]) & mask24 }

// SetPSN sets the PSN; only the low 24 bits are used.
func (b BTH) SetPSN(v uint32) { put24(b[bthPSN+1:], v) }

// Encode writes every field of f into b. Sub-byte and 24-bit fields are
// masked to their width.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHSize-1]
	flags := bit(f.SE, 0x80) | bit(f.MigReq, 0x40) | (f.PadCnt&3)<<4 | f.TVer&0x0f
	resv8a := bit(f.FECN, 0x80) | bit(f.BECN, 0x40) | f.Resv6&0x3f
	ack := bit(f.AckReq, 0x80) | f.Resv7&0x7f
	// Three big-endian words: opcode, flags, P_Key; the reserved byte
	// and DestQP; AckReq with its reserved bits and the PSN.
	binary.BigEndian.PutUint32(b[bthOpcode:], uint32(f.Opcode)<<24|uint32(flags)<<16|uint32(f.PKey))
	binary.BigEndian.PutUint32(b[bthDestQP:], uint32(resv8a)<<24|f.DestQP&0xffffff)
	binary.BigEndian.PutUint32(b[bthPSN:], uint32(ack)<<24|f.PSN&0xffffff)
}

// Fields returns every field of b.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: b.PadCnt(), TVer: b.TVer(),
		PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), Resv6: b.Resv6(),
		DestQP: b.DestQP(), AckReq: b.AckReq(), Resv7: b.Resv7(), PSN: b.PSN(),
	}
}

func setBit(p *byte, m byte, v bool) {
	if v {
		*p |= m
	} else {
		*p &^= m
	}
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

// put24 writes the low 24 bits of v big-endian into b[0:3].
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

// get24 reads a big-endian 24-bit value from b[0:3].
func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
