package wire

import "strconv"

// Syndrome is the AETH syndrome byte (IBTA vol. 1 §9.7.5.1, Table 44): bits
// 7..5 give the kind, bits 4..0 a credit count (ACK), an RNR timer code
// (RNR NAK) or a NAK code. Names follow enum aeth_syndrome in rxe_hdr.h.
type Syndrome uint8

// SyndromeKind is the top 3 bits of a Syndrome.
type SyndromeKind uint8

// Syndrome kinds (rxe_hdr.h AETH_ACK, AETH_RNR_NAK, AETH_RSVD, AETH_NAK).
// Kinds 0x80-0xE0 are reserved too.
const (
	SyndromeACK    SyndromeKind = 0x00
	SyndromeRNRNAK SyndromeKind = 0x20
	SyndromeRsvd   SyndromeKind = 0x40
	SyndromeNAK    SyndromeKind = 0x60
)

// Syndrome values the kernel names (rxe_hdr.h enum aeth_syndrome).
const (
	SyndromeACKUnlimited    Syndrome = 0x1f // ACK, credit code 31: no end-to-end flow control (what rxe sends)
	SyndromeNAKPSNSeqError  Syndrome = 0x60 // AETH_NAK_PSN_SEQ_ERROR
	SyndromeNAKInvalidReq   Syndrome = 0x61 // AETH_NAK_INVALID_REQ
	SyndromeNAKRemAccessErr Syndrome = 0x62 // AETH_NAK_REM_ACC_ERR
	SyndromeNAKRemOpErr     Syndrome = 0x63 // AETH_NAK_REM_OP_ERR
	SyndromeNAKInvRDReq     Syndrome = 0x64 // AETH_NAK_INV_RD_REQ
)

// String returns "ACK", "RNR_NAK", "NAK" or "RSVD(0xNN)".
func (k SyndromeKind) String() string {
	switch k {
	case SyndromeACK:
		return "ACK"
	case SyndromeRNRNAK:
		return "RNR_NAK"
	case SyndromeNAK:
		return "NAK"
	}
	return "RSVD(0x" + strconv.FormatUint(uint64(k), 16) + ")"
}

// IsValid reports whether k is ACK, RNR NAK or NAK (not reserved).
func (k SyndromeKind) IsValid() bool {
	return k == SyndromeACK || k == SyndromeRNRNAK || k == SyndromeNAK
}

// ACKSyndrome returns the syndrome of an ACK carrying credit code c (5 bits).
func ACKSyndrome(c uint8) Syndrome { return Syndrome(c & 0x1f) }

// RNRNAKSyndrome returns the syndrome of an RNR NAK carrying RNR timer code
// t (5 bits, the encoding of enum ib_rnr_timeout).
func RNRNAKSyndrome(t uint8) Syndrome { return Syndrome(0x20 | t&0x1f) }

// Kind returns the syndrome's kind (bits 7..5).
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s & 0xe0) }

// Value returns bits 4..0: the credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Kind() == SyndromeACK }

// IsRNRNAK reports whether s is a receiver-not-ready NAK.
func (s Syndrome) IsRNRNAK() bool { return s.Kind() == SyndromeRNRNAK }

// IsNAK reports whether s is a NAK (not an RNR NAK).
func (s Syndrome) IsNAK() bool { return s.Kind() == SyndromeNAK }

// creditTable maps an ACK credit code to the number of credits (IBTA
// §9.7.7.2.5; the table the kernel's rdmavt uses). Code 31 means invalid
// (no flow control).
var creditTable = [32]uint32{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 0,
}

// Credits returns the number of end-to-end credits an ACK syndrome
// advertises, and false when the code is 31 ("invalid": unlimited) or s is
// not an ACK.
func (s Syndrome) Credits() (uint32, bool) {
	if !s.IsACK() || s.Value() == 31 {
		return 0, false
	}
	return creditTable[s.Value()], true
}

var nakNames = [...]string{
	0: "NAK_PSN_SEQ_ERROR",
	1: "NAK_INVALID_REQ",
	2: "NAK_REM_ACC_ERR",
	3: "NAK_REM_OP_ERR",
	4: "NAK_INV_RD_REQ",
}

// String returns the syndrome as rxe names it: "ACK(credits=unlimited)",
// "ACK(credits=8)", "RNR_NAK(timer=14)", "NAK_PSN_SEQ_ERROR" …, or
// "RSVD(0x45)" for reserved values.
func (s Syndrome) String() string {
	switch s.Kind() {
	case SyndromeACK:
		if c, ok := s.Credits(); ok {
			return "ACK(credits=" + strconv.Itoa(int(c)) + ")"
		}
		return "ACK(credits=unlimited)"
	case SyndromeRNRNAK:
		return "RNR_NAK(timer=" + strconv.Itoa(int(s.Value())) + ")"
	case SyndromeNAK:
		if v := s.Value(); int(v) < len(nakNames) {
			return nakNames[v]
		}
	}
	return "RSVD(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}
