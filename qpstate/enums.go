package qpstate

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// State is a QP state, enum ib_qp_state. Values equal the kernel's; the
// order matters (rxe compares "state < RTS", so SQD, SQE and ERR count as
// at least RTS).
type State int32

// QP states (enum ib_qp_state).
const (
	StateReset State = 0 // IB_QPS_RESET
	StateInit  State = 1 // IB_QPS_INIT
	StateRTR   State = 2 // IB_QPS_RTR: ready to receive
	StateRTS   State = 3 // IB_QPS_RTS: ready to send
	StateSQD   State = 4 // IB_QPS_SQD: send queue drain
	StateSQE   State = 5 // IB_QPS_SQE: send queue error
	StateErr   State = 6 // IB_QPS_ERR
)

// NumStates is the number of QP states (IB_QPS_ERR + 1), the bound of the
// transition table's two state dimensions.
const NumStates = 7

var stateNames = [NumStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// IsValid reports whether s is one of the seven kernel states.
func (s State) IsValid() bool { return s >= 0 && s < NumStates }

// Name returns the short name of s ("RTR"), or its decimal value when s is
// not a kernel state.
func (s State) Name() string {
	if s.IsValid() {
		return stateNames[s]
	}
	return strconv.Itoa(int(s))
}

// String returns the kernel name of s ("IB_QPS_RTR"), or its decimal value
// when s is not a kernel state. ParseState accepts every result.
func (s State) String() string {
	if s.IsValid() {
		return "IB_QPS_" + stateNames[s]
	}
	return strconv.Itoa(int(s))
}

// ParseState parses a state name: the kernel name ("IB_QPS_RTR"), the short
// name ("RTR"), in any case, or a decimal number (which may name an invalid
// state, as a caller could pass to the kernel).
func ParseState(s string) (State, error) {
	if v, ok := parseEnum(s, "IB_QPS_", stateNames[:]); ok {
		return State(v), nil
	}
	return 0, fmt.Errorf("qpstate: unknown QP state %q (want one of RESET, INIT, RTR, RTS, SQD, SQE, ERR)", s)
}

// Type is a QP transport type, enum ib_qp_type.
type Type int32

// QP types (enum ib_qp_type). Value 7 is unused by the kernel.
const (
	TypeSMI          Type = 0  // IB_QPT_SMI: QP0
	TypeGSI          Type = 1  // IB_QPT_GSI: QP1
	TypeRC           Type = 2  // IB_QPT_RC: reliable connected
	TypeUC           Type = 3  // IB_QPT_UC: unreliable connected
	TypeUD           Type = 4  // IB_QPT_UD: unreliable datagram
	TypeRawIPv6      Type = 5  // IB_QPT_RAW_IPV6
	TypeRawEthertype Type = 6  // IB_QPT_RAW_ETHERTYPE
	TypeRawPacket    Type = 8  // IB_QPT_RAW_PACKET
	TypeXRCIni       Type = 9  // IB_QPT_XRC_INI: XRC initiator
	TypeXRCTgt       Type = 10 // IB_QPT_XRC_TGT: XRC target
)

// NumTypes is IB_QPT_MAX, the bound of the transition table's type
// dimension. Type 7 lies inside it: the kernel's table has all-zero masks
// there, so ModifyIsOK treats it like RAW_IPV6 (only STATE on a valid pair).
const NumTypes = 11

var typeNames = [NumTypes]string{
	TypeSMI: "SMI", TypeGSI: "GSI", TypeRC: "RC", TypeUC: "UC", TypeUD: "UD",
	TypeRawIPv6: "RAW_IPV6", TypeRawEthertype: "RAW_ETHERTYPE",
	TypeRawPacket: "RAW_PACKET", TypeXRCIni: "XRC_INI", TypeXRCTgt: "XRC_TGT",
}

// Types returns the named QP types in value order (a fresh slice).
func Types() []Type {
	return []Type{TypeSMI, TypeGSI, TypeRC, TypeUC, TypeUD, TypeRawIPv6,
		TypeRawEthertype, TypeRawPacket, TypeXRCIni, TypeXRCTgt}
}

// IsValid reports whether t is one of the named kernel QP types (7 and
// values from IB_QPT_MAX up are not).
func (t Type) IsValid() bool { return t >= 0 && t < NumTypes && typeNames[t] != "" }

// Name returns the short name of t ("RC"), or its decimal value when t is
// not a named type.
func (t Type) Name() string {
	if t.IsValid() {
		return typeNames[t]
	}
	return strconv.Itoa(int(t))
}

// String returns the kernel name of t ("IB_QPT_RC"), or its decimal value
// when t is not a named type. ParseType accepts every result.
func (t Type) String() string {
	if t.IsValid() {
		return "IB_QPT_" + typeNames[t]
	}
	return strconv.Itoa(int(t))
}

// ParseType parses a QP type: the kernel name ("IB_QPT_RC"), the short name
// ("RC"), in any case, or a number.
func ParseType(s string) (Type, error) {
	if v, ok := parseEnum(s, "IB_QPT_", typeNames[:]); ok {
		return Type(v), nil
	}
	return 0, fmt.Errorf("qpstate: unknown QP type %q (want one of RC, UC, UD, GSI, SMI, RAW_PACKET, XRC_INI, XRC_TGT, RAW_IPV6, RAW_ETHERTYPE)", s)
}

// AttrMask is a set of QP attributes, enum ib_qp_attr_mask: the bits tell
// ib_modify_qp which fields of an Attr to apply.
type AttrMask uint32

// QP attribute mask bits (enum ib_qp_attr_mask).
const (
	AttrState            AttrMask = 1 << 0  // IB_QP_STATE
	AttrCurState         AttrMask = 1 << 1  // IB_QP_CUR_STATE
	AttrEnSQDAsyncNotify AttrMask = 1 << 2  // IB_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      AttrMask = 1 << 3  // IB_QP_ACCESS_FLAGS
	AttrPKeyIndex        AttrMask = 1 << 4  // IB_QP_PKEY_INDEX
	AttrPort             AttrMask = 1 << 5  // IB_QP_PORT
	AttrQKey             AttrMask = 1 << 6  // IB_QP_QKEY
	AttrAV               AttrMask = 1 << 7  // IB_QP_AV
	AttrPathMTU          AttrMask = 1 << 8  // IB_QP_PATH_MTU
	AttrTimeout          AttrMask = 1 << 9  // IB_QP_TIMEOUT
	AttrRetryCnt         AttrMask = 1 << 10 // IB_QP_RETRY_CNT
	AttrRNRRetry         AttrMask = 1 << 11 // IB_QP_RNR_RETRY
	AttrRQPSN            AttrMask = 1 << 12 // IB_QP_RQ_PSN
	AttrMaxQPRdAtomic    AttrMask = 1 << 13 // IB_QP_MAX_QP_RD_ATOMIC
	AttrAltPath          AttrMask = 1 << 14 // IB_QP_ALT_PATH
	AttrMinRNRTimer      AttrMask = 1 << 15 // IB_QP_MIN_RNR_TIMER
	AttrSQPSN            AttrMask = 1 << 16 // IB_QP_SQ_PSN
	AttrMaxDestRdAtomic  AttrMask = 1 << 17 // IB_QP_MAX_DEST_RD_ATOMIC
	AttrPathMigState     AttrMask = 1 << 18 // IB_QP_PATH_MIG_STATE
	AttrCap              AttrMask = 1 << 19 // IB_QP_CAP
	AttrDestQPN          AttrMask = 1 << 20 // IB_QP_DEST_QPN
	AttrReserved1        AttrMask = 1 << 21 // IB_QP_RESERVED1
	AttrReserved2        AttrMask = 1 << 22 // IB_QP_RESERVED2
	AttrReserved3        AttrMask = 1 << 23 // IB_QP_RESERVED3
	AttrReserved4        AttrMask = 1 << 24 // IB_QP_RESERVED4
	AttrRateLimit        AttrMask = 1 << 25 // IB_QP_RATE_LIMIT

	// AttrStandardBits is IB_QP_ATTR_STANDARD_BITS: bits 0..20.
	AttrStandardBits AttrMask = 1<<21 - 1
)

// attrNames holds the kernel names of the mask bits without the "IB_QP_"
// prefix, indexed by bit number.
var attrNames = [26]string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN", "RESERVED1",
	"RESERVED2", "RESERVED3", "RESERVED4", "RATE_LIMIT",
}

// attrAliases are the short mask-bit names used in tables of transitions
// ("MTU" for IB_QP_PATH_MTU, "MQRA" for IB_QP_MAX_QP_RD_ATOMIC), accepted by
// ParseAttrMask besides the kernel names.
var attrAliases = map[string]AttrMask{
	"CUR": AttrCurState, "SQDN": AttrEnSQDAsyncNotify, "ACCESS": AttrAccessFlags,
	"PKEY": AttrPKeyIndex, "MTU": AttrPathMTU, "RETRY": AttrRetryCnt,
	"MQRA": AttrMaxQPRdAtomic, "ALT": AttrAltPath, "MINRNR": AttrMinRNRTimer,
	"MDRA": AttrMaxDestRdAtomic, "MIG": AttrPathMigState, "DQPN": AttrDestQPN,
	"RATE": AttrRateLimit,
}

// knownAttrs is the set of bits that have a kernel name.
const knownAttrs AttrMask = 1<<26 - 1

// String returns the kernel names of the bits in m joined by "|"
// ("IB_QP_AV|IB_QP_PATH_MTU"), unnamed bits as one trailing hex number
// ("IB_QP_STATE|0x4000000"), and "0" for the empty mask. ParseAttrMask
// accepts every result.
func (m AttrMask) String() string { return m.format("IB_QP_") }

// ShortString is String without the "IB_QP_" prefixes ("AV|PATH_MTU").
func (m AttrMask) ShortString() string { return m.format("") }

func (m AttrMask) format(prefix string) string {
	if m == 0 {
		return "0"
	}
	return formatBits(uint32(m), func(bit int) string {
		if bit < len(attrNames) {
			return prefix + attrNames[bit]
		}
		return ""
	})
}

// formatBits joins the names of the set bits of v with "|", lowest first;
// bits that name returns "" for are ORed into one trailing hex number.
func formatBits(v uint32, name func(bit int) string) string {
	var b strings.Builder
	var unknown uint32
	for rest := v; rest != 0; rest &= rest - 1 {
		bit := bits.TrailingZeros32(rest)
		n := name(bit)
		if n == "" {
			unknown |= 1 << bit
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(n)
	}
	if unknown != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", unknown)
	}
	return b.String()
}

// parseEnum looks s up in names (index = value), case-insensitively and
// with or without prefix; otherwise it accepts a number.
func parseEnum(s, prefix string, names []string) (int64, bool) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), prefix)
	for i, n := range names {
		if n != "" && n == name {
			return int64(i), true
		}
	}
	n, err := strconv.ParseInt(name, 0, 32)
	return n, err == nil
}

// Bits returns the single-bit masks set in m, lowest first.
func (m AttrMask) Bits() []AttrMask {
	var out []AttrMask
	for rest := m; rest != 0; rest &= rest - 1 {
		out = append(out, rest&-rest)
	}
	return out
}

// ParseAttrMask parses a mask: names separated by "|", ",", "+" or spaces,
// each a kernel name ("IB_QP_PATH_MTU"), the name without the prefix
// ("PATH_MTU"), or a short alias ("MTU", "MQRA", "CUR"), in any
// case; or numbers (hex "0x12e01" or decimal), which are ORed in. The empty
// string and "0" give 0.
func ParseAttrMask(s string) (AttrMask, error) {
	var m AttrMask
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == '|' || r == ',' || r == '+' || r == ' ' || r == '\t'
	})
	for _, f := range fields {
		name := strings.TrimPrefix(strings.ToUpper(f), "IB_QP_")
		if bit, ok := attrAliases[name]; ok {
			m |= bit
			continue
		}
		found := false
		for i, n := range attrNames {
			if n == name {
				m |= 1 << i
				found = true
				break
			}
		}
		if found {
			continue
		}
		n, err := strconv.ParseUint(f, 0, 32)
		if err != nil {
			return 0, fmt.Errorf("qpstate: unknown QP attribute %q in mask %q", f, s)
		}
		m |= AttrMask(n)
	}
	return m, nil
}
