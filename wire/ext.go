package wire

import "encoding/binary"

// Extended transport headers, IBTA vol. 1 §9.3. All fields big-endian.
// Each view must be at least its *Size long.

// RDETH is a view of a Reliable Datagram Extended Transport Header (§9.3.1):
//
//	| resv8 | EE-Context (24) |
type RDETH []byte

// RDETHFields holds the fields of an RDETH.
type RDETHFields struct {
	Resv8 uint8  // reserved, sent as 0
	EEC   uint32 // 24 bits: end-to-end context
}

// EEC returns the 24-bit end-to-end context.
func (b RDETH) EEC() uint32 { return get24(b[1:]) }

// SetEEC sets the end-to-end context; only the low 24 bits are used.
func (b RDETH) SetEEC(v uint32) { put24(b[1:], v) }

// Encode writes f into b.
func (b RDETH) Encode(f *RDETHFields) { b[0] = f.Resv8; put24(b[1:], f.EEC) }

// Fields returns the fields of b.
func (b RDETH) Fields() RDETHFields { return RDETHFields{Resv8: b[0], EEC: b.EEC()} }

// DETH is a view of a Datagram Extended Transport Header (§9.3.2):
//
//	| Q_Key (32)                     |
//	| resv8 | Source QP (24)         |
type DETH []byte

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32 // queue key the receiving UD QP checks
	Resv8 uint8  // reserved, sent as 0
	SrcQP uint32 // 24 bits
}

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// SetQKey sets the queue key.
func (b DETH) SetQKey(v uint32) { binary.BigEndian.PutUint32(b[0:], v) }

// SrcQP returns the 24-bit source QPN.
func (b DETH) SrcQP() uint32 { return get24(b[5:]) }

// SetSrcQP sets the source QPN; only the low 24 bits are used.
func (b DETH) SetSrcQP(v uint32) { put24(b[5:], v) }

// Encode writes f into b.
func (b DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(b[0:], f.QKey)
	b[4] = f.Resv8
	put24(b[5:], f.SrcQP)
}

// Fields returns the fields of b.
func (b DETH) Fields() DETHFields { return DETHFields{QKey: b.QKey(), Resv8: b[4], SrcQP: b.SrcQP()} }

// XRCETH is a view of an XRC Extended Transport Header (§9.3.7, present in
// every XRC request):
//
//	| resv8 | XRC SRQ number (24) |
type XRCETH []byte

// XRCETHFields holds the fields of an XRCETH.
type XRCETHFields struct {
	Resv8 uint8  // reserved, sent as 0
	SRQ   uint32 // 24 bits: the XRC shared receive queue number
}

// SRQ returns the 24-bit XRC SRQ number.
func (b XRCETH) SRQ() uint32 { return get24(b[1:]) }

// SetSRQ sets the XRC SRQ number; only the low 24 bits are used.
func (b XRCETH) SetSRQ(v uint32) { put24(b[1:], v) }

// Encode writes f into b.
func (b XRCETH) Encode(f *XRCETHFields) { b[0] = f.Resv8; put24(b[1:], f.SRQ) }

// Fields returns the fields of b.
func (b XRCETH) Fields() XRCETHFields { return XRCETHFields{Resv8: b[0], SRQ: b.SRQ()} }

// RETH is a view of an RDMA Extended Transport Header (§9.3.3):
//
//	| Virtual Address (64)       |
//	| R_Key (32)                 |
//	| DMA Length (32)            |
type RETH []byte

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64 // remote virtual address of the first byte
	RKey   uint32 // remote key of the target MR or MW
	DMALen uint32 // total length of the RDMA message
}

// VA returns the virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// SetVA sets the virtual address.
func (b RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// SetRKey sets the remote key.
func (b RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b[8:], v) }

// DMALen returns the DMA length.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[12:]) }

// SetDMALen sets the DMA length.
func (b RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(b[12:], v) }

// Encode writes f into b.
func (b RETH) Encode(f *RETHFields) { b.SetVA(f.VA); b.SetRKey(f.RKey); b.SetDMALen(f.DMALen) }

// Fields returns the fields of b.
func (b RETH) Fields() RETHFields { return RETHFields{VA: b.VA(), RKey: b.RKey(), DMALen: b.DMALen()} }

// AETH is a view of an ACK Extended Transport Header (§9.3.5):
//
//	| Syndrome (8) | MSN (24) |
type AETH []byte

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome Syndrome // ACK, RNR NAK or NAK with its code or credit count
	MSN      uint32   // 24 bits: message sequence number
}

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// SetSyndrome sets the syndrome byte.
func (b AETH) SetSyndrome(v Syndrome) { b[0] = uint8(v) }

// MSN returns the 24-bit message sequence number.
func (b AETH) MSN() uint32 { return get24(b[1:]) }

// SetMSN sets the MSN; only the low 24 bits are used.
func (b AETH) SetMSN(v uint32) { put24(b[1:], v) }

// Encode writes f into b.
func (b AETH) Encode(f *AETHFields) { b[0] = uint8(f.Syndrome); put24(b[1:], f.MSN) }

// Fields returns the fields of b.
func (b AETH) Fields() AETHFields { return AETHFields{Syndrome: b.Syndrome(), MSN: b.MSN()} }

// AtomicETH is a view of an Atomic Extended Transport Header (§9.3.4),
// 28 bytes, packed:
//
//	| Virtual Address (64)              |
//	| R_Key (32)                        |
//	| Swap (CmpSwap) or Add (FetchAdd) (64) |
//	| Compare (64)                      |
type AtomicETH []byte

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64 // remote virtual address of the 8-byte operand
	RKey    uint32 // remote key of the target MR or MW
	SwapAdd uint64 // swap value (COMPARE_SWAP) or add value (FETCH_ADD)
	Compare uint64 // compare value (COMPARE_SWAP); unused by FETCH_ADD
}

// VA returns the virtual address.
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// SetVA sets the virtual address.
func (b AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// SetRKey sets the remote key.
func (b AtomicETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b[8:], v) }

// SwapAdd returns the swap (COMPARE_SWAP) or add (FETCH_ADD) operand.
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[12:]) }

// SetSwapAdd sets the swap or add operand.
func (b AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(b[12:], v) }

// Compare returns the compare operand.
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[20:]) }

// SetCompare sets the compare operand.
func (b AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(b[20:], v) }

// Encode writes f into b.
func (b AtomicETH) Encode(f *AtomicETHFields) {
	b.SetVA(f.VA)
	b.SetRKey(f.RKey)
	b.SetSwapAdd(f.SwapAdd)
	b.SetCompare(f.Compare)
}

// Fields returns the fields of b.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: b.VA(), RKey: b.RKey(), SwapAdd: b.SwapAdd(), Compare: b.Compare()}
}

// AtomicAckETH is a view of an Atomic ACK Extended Transport Header
// (§9.3.6): the 64-bit original remote value.
type AtomicAckETH []byte

// AtomicAckETHFields holds the field of an AtomicAckETH.
type AtomicAckETHFields struct {
	OrigData uint64 // the remote value before the atomic operation
}

// OrigData returns the original remote data.
func (b AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(b) }

// SetOrigData sets the original remote data.
func (b AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(b, v) }

// Encode writes f into b.
func (b AtomicAckETH) Encode(f *AtomicAckETHFields) { b.SetOrigData(f.OrigData) }

// Fields returns the fields of b.
func (b AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{OrigData: b.OrigData()} }

// ImmDt is a view of an Immediate Data Extended Transport Header (§9.3.8):
// 32 bits the verbs layer passes through as opaque big-endian bytes.
type ImmDt []byte

// ImmDtFields holds the field of an ImmDt.
type ImmDtFields struct {
	Imm uint32 // the immediate data, as the big-endian value on the wire
}

// Imm returns the immediate data (the 4 bytes read big-endian).
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b) }

// SetImm sets the immediate data.
func (b ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(b, v) }

// Encode writes f into b.
func (b ImmDt) Encode(f *ImmDtFields) { b.SetImm(f.Imm) }

// Fields returns the fields of b.
func (b ImmDt) Fields() ImmDtFields { return ImmDtFields{Imm: b.Imm()} }

// IETH is a view of an Invalidate Extended Transport Header (§9.3.9): the
// R_Key to invalidate.
type IETH []byte

// IETHFields holds the field of an IETH.
type IETHFields struct {
	RKey uint32 // the R_Key the responder invalidates
}

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b) }

// SetRKey sets the R_Key to invalidate.
func (b IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b, v) }

// Encode writes f into b.
func (b IETH) Encode(f *IETHFields) { b.SetRKey(f.RKey) }

// Fields returns the fields of b.
func (b IETH) Fields() IETHFields { return IETHFields{RKey: b.RKey()} }

// FETH is a view of a Flush Extended Transport Header (IBTA 1.5 §9.3.11,
// the FLUSH operation of the persistent-memory extensions). One 32-bit
// word:
//
//	| reserved (26) | SEL (2) | PLT (4) |
type FETH []byte

// FETHFields holds the fields of a FETH.
type FETHFields struct {
	Selectivity uint8  // 2 bits: 0 memory range, 1 whole memory region
	Placement   uint8  // 4 bits: 1 global visibility, 2 persistence
	Resv        uint32 // 26 reserved bits (bits 31..6)
}

// Selectivity returns the 2-bit selectivity level.
func (b FETH) Selectivity() uint8 { return b[3] >> 4 & 3 }

// SetSelectivity sets the selectivity level; only the low 2 bits are used.
func (b FETH) SetSelectivity(v uint8) { b[3] = b[3]&^0x30 | (v&3)<<4 }

// Placement returns the 4-bit placement type.
func (b FETH) Placement() uint8 { return b[3] & 0x0f }

// SetPlacement sets the placement type; only the low 4 bits are used.
func (b FETH) SetPlacement(v uint8) { b[3] = b[3]&^0x0f | v&0x0f }

// Resv returns the 26 reserved bits.
func (b FETH) Resv() uint32 { return binary.BigEndian.Uint32(b) >> 6 }

// Encode writes f into b.
func (b FETH) Encode(f *FETHFields) {
	binary.BigEndian.PutUint32(b, (f.Resv&0x3ffffff)<<6|uint32(f.Selectivity&3)<<4|uint32(f.Placement&0x0f))
}

// Fields returns the fields of b.
func (b FETH) Fields() FETHFields {
	return FETHFields{Selectivity: b.Selectivity(), Placement: b.Placement(), Resv: b.Resv()}
}
