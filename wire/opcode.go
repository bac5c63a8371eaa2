package wire

import (
	"math/bits"
	"strconv"
)

// Opcode is the BTH OpCode (IBTA vol. 1 §9.2, Table 38; Annex A17 for CNP).
// Bits 7..5 select the transport (RC 000, UC 001, RD 010, UD 011, CNP 100,
// XRC 101), bits 4..0 the operation. String returns the kernel's name
// without its IB_OPCODE_ prefix (include/rdma/ib_pack.h, rxe_opcode.c).
type Opcode uint8

// Transport is the transport family of an Opcode (its bits 7..5).
type Transport uint8

// Transport families (IB_OPCODE_RC … in ib_pack.h; 0xA0 XRC from IBTA
// §9.2 Table 38).
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
	TransportXRC Transport = 0xa0
	TransportMSP Transport = 0xe0 // manufacturer specific
)

// IsValid reports whether t is one of the transport families above.
func (t Transport) IsValid() bool {
	switch t {
	case TransportRC, TransportUC, TransportRD, TransportUD, TransportCNP, TransportXRC, TransportMSP:
		return true
	}
	return false
}

// String returns "RC", "UC", "RD", "UD", "CNP", "XRC", "MSP" or
// "Transport(0xNN)".
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	case TransportXRC:
		return "XRC"
	case TransportMSP:
		return "MSP"
	}
	return "Transport(0x" + strconv.FormatUint(uint64(t), 16) + ")"
}

// Operation codes within a transport (IB_OPCODE_SEND_FIRST … in ib_pack.h).
const (
	opSendFirst              = 0x00
	opSendMiddle             = 0x01
	opSendLast               = 0x02
	opSendLastWithImmediate  = 0x03
	opSendOnly               = 0x04
	opSendOnlyWithImmediate  = 0x05
	opRDMAWriteFirst         = 0x06
	opRDMAWriteMiddle        = 0x07
	opRDMAWriteLast          = 0x08
	opRDMAWriteLastWithImm   = 0x09
	opRDMAWriteOnly          = 0x0a
	opRDMAWriteOnlyWithImm   = 0x0b
	opRDMAReadRequest        = 0x0c
	opRDMAReadResponseFirst  = 0x0d
	opRDMAReadResponseMiddle = 0x0e
	opRDMAReadResponseLast   = 0x0f
	opRDMAReadResponseOnly   = 0x10
	opAcknowledge            = 0x11
	opAtomicAcknowledge      = 0x12
	opCompareSwap            = 0x13
	opFetchAdd               = 0x14
	opResync                 = 0x15 // RD only
	opSendLastWithInvalidate = 0x16
	opSendOnlyWithInvalidate = 0x17
	opFlush                  = 0x1c
	opAtomicWrite            = 0x1d
	opCNP                    = 0x01 // in the CNP transport: 0x81
	numOps                   = 0x20
	transportMask            = 0xe0
	operationMask            = 0x1f
)

// The opcodes, named as in ib_pack.h (IB_OPCODE_RC_SEND_FIRST →
// RCSendFirst) for the RC, UC, UD and CNP families; RD and XRC opcodes are
// the RC operation plus TransportRD or TransportXRC (e.g.
// Opcode(TransportXRC)|RCSendOnly is XRC_SEND_ONLY).
const (
	RCSendFirst                  Opcode = Opcode(TransportRC) | opSendFirst
	RCSendMiddle                 Opcode = Opcode(TransportRC) | opSendMiddle
	RCSendLast                   Opcode = Opcode(TransportRC) | opSendLast
	RCSendLastWithImmediate      Opcode = Opcode(TransportRC) | opSendLastWithImmediate
	RCSendOnly                   Opcode = Opcode(TransportRC) | opSendOnly
	RCSendOnlyWithImmediate      Opcode = Opcode(TransportRC) | opSendOnlyWithImmediate
	RCRDMAWriteFirst             Opcode = Opcode(TransportRC) | opRDMAWriteFirst
	RCRDMAWriteMiddle            Opcode = Opcode(TransportRC) | opRDMAWriteMiddle
	RCRDMAWriteLast              Opcode = Opcode(TransportRC) | opRDMAWriteLast
	RCRDMAWriteLastWithImmediate Opcode = Opcode(TransportRC) | opRDMAWriteLastWithImm
	RCRDMAWriteOnly              Opcode = Opcode(TransportRC) | opRDMAWriteOnly
	RCRDMAWriteOnlyWithImmediate Opcode = Opcode(TransportRC) | opRDMAWriteOnlyWithImm
	RCRDMAReadRequest            Opcode = Opcode(TransportRC) | opRDMAReadRequest
	RCRDMAReadResponseFirst      Opcode = Opcode(TransportRC) | opRDMAReadResponseFirst
	RCRDMAReadResponseMiddle     Opcode = Opcode(TransportRC) | opRDMAReadResponseMiddle
	RCRDMAReadResponseLast       Opcode = Opcode(TransportRC) | opRDMAReadResponseLast
	RCRDMAReadResponseOnly       Opcode = Opcode(TransportRC) | opRDMAReadResponseOnly
	RCAcknowledge                Opcode = Opcode(TransportRC) | opAcknowledge
	RCAtomicAcknowledge          Opcode = Opcode(TransportRC) | opAtomicAcknowledge
	RCCompareSwap                Opcode = Opcode(TransportRC) | opCompareSwap
	RCFetchAdd                   Opcode = Opcode(TransportRC) | opFetchAdd
	RCSendLastWithInvalidate     Opcode = Opcode(TransportRC) | opSendLastWithInvalidate
	RCSendOnlyWithInvalidate     Opcode = Opcode(TransportRC) | opSendOnlyWithInvalidate
	RCFlush                      Opcode = Opcode(TransportRC) | opFlush
	RCAtomicWrite                Opcode = Opcode(TransportRC) | opAtomicWrite

	UCSendFirst                  Opcode = Opcode(TransportUC) | opSendFirst
	UCSendMiddle                 Opcode = Opcode(TransportUC) | opSendMiddle
	UCSendLast                   Opcode = Opcode(TransportUC) | opSendLast
	UCSendLastWithImmediate      Opcode = Opcode(TransportUC) | opSendLastWithImmediate
	UCSendOnly                   Opcode = Opcode(TransportUC) | opSendOnly
	UCSendOnlyWithImmediate      Opcode = Opcode(TransportUC) | opSendOnlyWithImmediate
	UCRDMAWriteFirst             Opcode = Opcode(TransportUC) | opRDMAWriteFirst
	UCRDMAWriteMiddle            Opcode = Opcode(TransportUC) | opRDMAWriteMiddle
	UCRDMAWriteLast              Opcode = Opcode(TransportUC) | opRDMAWriteLast
	UCRDMAWriteLastWithImmediate Opcode = Opcode(TransportUC) | opRDMAWriteLastWithImm
	UCRDMAWriteOnly              Opcode = Opcode(TransportUC) | opRDMAWriteOnly
	UCRDMAWriteOnlyWithImmediate Opcode = Opcode(TransportUC) | opRDMAWriteOnlyWithImm

	UDSendOnly              Opcode = Opcode(TransportUD) | opSendOnly
	UDSendOnlyWithImmediate Opcode = Opcode(TransportUD) | opSendOnlyWithImmediate

	// CNP is the RoCEv2 congestion notification packet (IBTA Annex
	// A17.9.3): BTH with BECN set, A clear and PSN 0, then 16 reserved
	// bytes. rxe neither sends nor accepts it.
	CNP Opcode = Opcode(TransportCNP) | opCNP
)

// Headers is a set of extended transport headers. The bits are in the order
// the headers appear in a packet (IBTA §9.2 Table 38 column order; e.g.
// FLUSH is BTH FETH RETH, RDMA_WRITE_ONLY_WITH_IMMEDIATE BTH RETH ImmDt,
// ATOMIC_ACKNOWLEDGE BTH AETH AtomicAckETH).
type Headers uint16

// Extended transport headers.
const (
	HdrRDETH Headers = 1 << iota
	HdrDETH
	HdrXRCETH
	HdrFETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrCNPReserved // the 16 reserved bytes of a RoCEv2 CNP (Annex A17.9.3)
	numHeaders     = iota
)

var headerSizes = [numHeaders]uint8{
	RDETHSize, DETHSize, XRCETHSize, FETHSize, RETHSize, AtomicETHSize,
	AETHSize, AtomicAckETHSize, ImmDtSize, IETHSize, CNPReservedSize,
}

var headerNames = [numHeaders]string{
	"RDETH", "DETH", "XRCETH", "FETH", "RETH", "AtomicETH",
	"AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPReserved",
}

// Has reports whether h includes every header of x.
func (h Headers) Has(x Headers) bool { return h&x == x }

// Size returns the total size of the headers in h.
func (h Headers) Size() int {
	n := 0
	for i := 0; i < numHeaders; i++ {
		if h&(1<<i) != 0 {
			n += int(headerSizes[i])
		}
	}
	return n
}

// String lists the headers in packet order, separated by "|", or "none".
func (h Headers) String() string {
	if h == 0 {
		return "none"
	}
	s := ""
	for i := 0; i < numHeaders; i++ {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += headerNames[i]
		}
	}
	if rest := h &^ (1<<numHeaders - 1); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

// OpFlags describe an opcode, mirroring the RXE_*_MASK bits of rxe_opcode.h.
type OpFlags uint16

// Opcode flags.
const (
	FlagRequest     OpFlags = 1 << iota // RXE_REQ_MASK: goes to the responder
	FlagResponse                        // RXE_ACK_MASK: goes to the requester's completer
	FlagPayload                         // RXE_PAYLOAD_MASK: carries data
	FlagFirst                           // RXE_START_MASK: first packet of a message
	FlagLast                            // RXE_END_MASK: last packet of a message
	FlagSend                            // RXE_SEND_MASK
	FlagWrite                           // RXE_WRITE_MASK
	FlagRead                            // RXE_READ_MASK
	FlagAtomic                          // RXE_ATOMIC_MASK
	FlagFlush                           // RXE_FLUSH_MASK
	FlagAtomicWrite                     // RXE_ATOMIC_WRITE_MASK
	FlagRWR                             // RXE_RWR_MASK: consumes a receive WQE
	FlagComp                            // RXE_COMP_MASK: completes a receive WQE
)

var flagNames = [...]string{
	"REQ", "ACK", "PAYLOAD", "START", "END", "SEND", "WRITE", "READ",
	"ATOMIC", "FLUSH", "ATOMIC_WRITE", "RWR", "COMP",
}

// String lists the flags by rxe's mask names without RXE_ and _MASK
// ("REQ|PAYLOAD|SEND|START"), with any unknown bits in hex, or "0".
func (f OpFlags) String() string {
	if f == 0 {
		return "0"
	}
	s := ""
	for i, n := range flagNames {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if rest := f &^ (1<<len(flagNames) - 1); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

type opInfo struct {
	name    string
	headers Headers
	flags   OpFlags
	valid   bool
	hdrLen  uint8             // BTH + extended headers
	offsets [numHeaders]uint8 // offset of each present header from the BTH start
}

var opTable [256]opInfo

// baseOps describes the operations of the RC family; UC, RD and XRC are
// derived from it (IBTA §9.2 Table 38).
var baseOps = [numOps]struct {
	name    string
	headers Headers
	flags   OpFlags
}{
	opSendFirst:              {"SEND_FIRST", 0, FlagRequest | FlagPayload | FlagSend | FlagFirst | FlagRWR},
	opSendMiddle:             {"SEND_MIDDLE", 0, FlagRequest | FlagPayload | FlagSend},
	opSendLast:               {"SEND_LAST", 0, FlagRequest | FlagPayload | FlagSend | FlagLast | FlagComp},
	opSendLastWithImmediate:  {"SEND_LAST_WITH_IMMEDIATE", HdrImmDt, FlagRequest | FlagPayload | FlagSend | FlagLast | FlagComp},
	opSendOnly:               {"SEND_ONLY", 0, FlagRequest | FlagPayload | FlagSend | FlagFirst | FlagLast | FlagRWR | FlagComp},
	opSendOnlyWithImmediate:  {"SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, FlagRequest | FlagPayload | FlagSend | FlagFirst | FlagLast | FlagRWR | FlagComp},
	opRDMAWriteFirst:         {"RDMA_WRITE_FIRST", HdrRETH, FlagRequest | FlagPayload | FlagWrite | FlagFirst},
	opRDMAWriteMiddle:        {"RDMA_WRITE_MIDDLE", 0, FlagRequest | FlagPayload | FlagWrite},
	opRDMAWriteLast:          {"RDMA_WRITE_LAST", 0, FlagRequest | FlagPayload | FlagWrite | FlagLast},
	opRDMAWriteLastWithImm:   {"RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, FlagRequest | FlagPayload | FlagWrite | FlagLast | FlagRWR | FlagComp},
	opRDMAWriteOnly:          {"RDMA_WRITE_ONLY", HdrRETH, FlagRequest | FlagPayload | FlagWrite | FlagFirst | FlagLast},
	opRDMAWriteOnlyWithImm:   {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH | HdrImmDt, FlagRequest | FlagPayload | FlagWrite | FlagFirst | FlagLast | FlagRWR | FlagComp},
	opRDMAReadRequest:        {"RDMA_READ_REQUEST", HdrRETH, FlagRequest | FlagRead | FlagFirst | FlagLast},
	opRDMAReadResponseFirst:  {"RDMA_READ_RESPONSE_FIRST", HdrAETH, FlagResponse | FlagPayload | FlagFirst},
	opRDMAReadResponseMiddle: {"RDMA_READ_RESPONSE_MIDDLE", 0, FlagResponse | FlagPayload},
	opRDMAReadResponseLast:   {"RDMA_READ_RESPONSE_LAST", HdrAETH, FlagResponse | FlagPayload | FlagLast},
	opRDMAReadResponseOnly:   {"RDMA_READ_RESPONSE_ONLY", HdrAETH, FlagResponse | FlagPayload | FlagFirst | FlagLast},
	opAcknowledge:            {"ACKNOWLEDGE", HdrAETH, FlagResponse | FlagFirst | FlagLast},
	opAtomicAcknowledge:      {"ATOMIC_ACKNOWLEDGE", HdrAETH | HdrAtomicAckETH, FlagResponse | FlagFirst | FlagLast},
	opCompareSwap:            {"COMPARE_SWAP", HdrAtomicETH, FlagRequest | FlagAtomic | FlagFirst | FlagLast},
	opFetchAdd:               {"FETCH_ADD", HdrAtomicETH, FlagRequest | FlagAtomic | FlagFirst | FlagLast},
	opResync:                 {"RESYNC", 0, FlagRequest | FlagFirst | FlagLast},
	opSendLastWithInvalidate: {"SEND_LAST_WITH_INVALIDATE", HdrIETH, FlagRequest | FlagPayload | FlagSend | FlagLast | FlagComp},
	opSendOnlyWithInvalidate: {"SEND_ONLY_WITH_INVALIDATE", HdrIETH, FlagRequest | FlagPayload | FlagSend | FlagFirst | FlagLast | FlagRWR | FlagComp},
	opFlush:                  {"FLUSH", HdrFETH | HdrRETH, FlagRequest | FlagFlush | FlagFirst | FlagLast},
	opAtomicWrite:            {"ATOMIC_WRITE", HdrRETH, FlagRequest | FlagPayload | FlagAtomicWrite | FlagFirst | FlagLast},
}

func init() {
	def := func(op Opcode, name string, h Headers, f OpFlags) {
		in := &opTable[op]
		in.name, in.headers, in.flags, in.valid = name, h, f, true
		off := BTHSize
		for i := 0; i < numHeaders; i++ {
			if h&(1<<i) != 0 {
				in.offsets[i] = uint8(off)
				off += int(headerSizes[i])
			}
		}
		in.hdrLen = uint8(off)
	}
	for op, b := range baseOps {
		if b.name == "" {
			continue
		}
		// RC: everything but RESYNC (ib_pack.h IB_OPCODE(RC, ...)).
		if op != opResync {
			def(Opcode(TransportRC)|Opcode(op), "RC_"+b.name, b.headers, b.flags)
		}
		// UC: SEND and RDMA WRITE only (0x20-0x2b).
		if op <= opRDMAWriteOnlyWithImm {
			def(Opcode(TransportUC)|Opcode(op), "UC_"+b.name, b.headers, b.flags)
		}
		// RD: 0x40-0x55 plus FLUSH; every packet carries an RDETH,
		// requests a DETH too (IBTA §9.2 Table 38, rxe_opcode.c).
		if op <= opResync || op == opFlush {
			h := b.headers | HdrRDETH
			if b.flags&FlagRequest != 0 {
				h |= HdrDETH
			}
			def(Opcode(TransportRD)|Opcode(op), "RD_"+b.name, h, b.flags)
		}
		// XRC: as RC without FLUSH, ATOMIC_WRITE and RESYNC; requests
		// carry an XRCETH right after the BTH (IBTA §9.2, rxe XRC patches).
		if op < opFlush && op != opResync {
			h := b.headers
			if b.flags&FlagRequest != 0 {
				h |= HdrXRCETH
			}
			def(Opcode(TransportXRC)|Opcode(op), "XRC_"+b.name, h, b.flags)
		}
	}
	ud := baseOps[opSendOnly]
	def(UDSendOnly, "UD_SEND_ONLY", HdrDETH, ud.flags)
	udi := baseOps[opSendOnlyWithImmediate]
	def(UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", HdrDETH|HdrImmDt, udi.flags)
	def(CNP, "CNP", HdrCNPReserved, FlagFirst|FlagLast)
}

// IsValid reports whether op is in the opcode table. Parse refuses any
// other opcode (rxe drops unknown opcodes before any length arithmetic).
func (op Opcode) IsValid() bool { return opTable[op].valid }

// String returns the kernel's name of op without the IB_OPCODE_ prefix
// ("RC_SEND_FIRST", "UD_SEND_ONLY_WITH_IMMEDIATE", "CNP"), or "Opcode(0xNN)"
// for opcodes outside the table.
func (op Opcode) String() string {
	if in := &opTable[op]; in.valid {
		return in.name
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(op), 16) + ")"
}

// Transport returns the transport family (bits 7..5).
func (op Opcode) Transport() Transport { return Transport(op & transportMask) }

// Headers returns the extended transport headers op carries after the BTH.
func (op Opcode) Headers() Headers { return opTable[op].headers }

// Flags returns op's flags (0 for an invalid opcode).
func (op Opcode) Flags() OpFlags { return opTable[op].flags }

// HeaderLen returns the length of the BTH plus the extended headers (rxe's
// opcode length), or 0 for an invalid opcode.
func (op Opcode) HeaderLen() int { return int(opTable[op].hdrLen) }

// HeaderOffset returns the offset of extended header h (a single Hdr*
// constant) from the start of the BTH, and false if op does not carry it.
func (op Opcode) HeaderOffset(h Headers) (int, bool) {
	in := &opTable[op]
	if h == 0 || h&(h-1) != 0 || in.headers&h == 0 {
		return 0, false
	}
	return int(in.offsets[bits.TrailingZeros16(uint16(h))]), true
}

// HasPayload reports whether packets with op carry payload.
func (op Opcode) HasPayload() bool { return op.Flags()&FlagPayload != 0 }

// IsRequest reports whether op is a request (handled by the responder).
func (op Opcode) IsRequest() bool { return op.Flags()&FlagRequest != 0 }

// IsResponse reports whether op is a response (ACK, read response, atomic
// ACK; handled by the requester's completer).
func (op Opcode) IsResponse() bool { return op.Flags()&FlagResponse != 0 }

// IsFirst reports whether op starts a message (FIRST or ONLY).
func (op Opcode) IsFirst() bool { return op.Flags()&FlagFirst != 0 }

// IsLast reports whether op ends a message (LAST or ONLY).
func (op Opcode) IsLast() bool { return op.Flags()&FlagLast != 0 }

// IsMiddle reports whether op is the middle of a message.
func (op Opcode) IsMiddle() bool { return op.IsValid() && op.Flags()&(FlagFirst|FlagLast) == 0 }

// IsOnly reports whether op is a complete message in one packet.
func (op Opcode) IsOnly() bool { return op.Flags()&(FlagFirst|FlagLast) == FlagFirst|FlagLast }
