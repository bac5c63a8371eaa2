// Package ib is the vocabulary of the verbs: the kernel's enums and
// structs that more than one layer speaks (include/rdma/ib_verbs.h):
// access flags, path MTU codes, address handle attributes, GID types, and
// the 24-bit arithmetic of packet sequence and QP numbers. Every value
// equals the kernel's and prints the kernel's name. It imports nothing of
// softroce: qpstate, wire and emu all build on it.
package ib

import (
	"fmt"
	"strconv"
	"strings"
)

// AHAttr is struct rdma_ah_attr for a RoCE or IB address: the destination
// of a connected QP's path.
type AHAttr struct {
	Type       AHAttrType  // RDMA_AH_ATTR_TYPE_*; derived from the port by uverbs
	SL         uint8       // service level
	StaticRate uint8       // enum ib_rate (0 = port current)
	PortNum    uint32      // 1-based port
	AHFlags    AHFlags     // IB_AH_GRH when GRH is valid
	GRH        GlobalRoute // global route: DGID, SGID index, hop limit, traffic class (grh)
	DMAC       [6]byte     // roce.dmac: resolved destination MAC
}

// GlobalRoute is struct ib_global_route: the GRH (for RoCEv2, the IP header)
// of a path.
type GlobalRoute struct {
	DGID         [16]byte // destination GID; for RoCEv2 the destination IP (dgid)
	FlowLabel    uint32   // 20 bits
	SGIDIndex    uint8    // index into the port's GID table
	HopLimit     uint8    // IPv6 hop limit / IPv4 TTL (hop_limit)
	TrafficClass uint8    // IPv6 traffic class / IPv4 TOS: DSCP and ECN (traffic_class)
}

// AHAttrType is enum rdma_ah_attr_type.
type AHAttrType uint8

// Address handle types.
const (
	AHAttrTypeUndefined AHAttrType = 0 // RDMA_AH_ATTR_TYPE_UNDEFINED
	AHAttrTypeIB        AHAttrType = 1 // RDMA_AH_ATTR_TYPE_IB
	AHAttrTypeRoCE      AHAttrType = 2 // RDMA_AH_ATTR_TYPE_ROCE
	AHAttrTypeOPA       AHAttrType = 3 // RDMA_AH_ATTR_TYPE_OPA
)

var ahTypeNames = [...]string{"UNDEFINED", "IB", "ROCE", "OPA"}

// IsValid reports whether t is a defined AH type.
func (t AHAttrType) IsValid() bool { return int(t) < len(ahTypeNames) }

// String returns the kernel name, e.g. "RDMA_AH_ATTR_TYPE_ROCE".
func (t AHAttrType) String() string {
	if t.IsValid() {
		return "RDMA_AH_ATTR_TYPE_" + ahTypeNames[t]
	}
	return "RDMA_AH_ATTR_TYPE(" + strconv.Itoa(int(t)) + ")"
}

// AHFlags is enum ib_ah_flags.
type AHFlags uint8

// AHGRH (IB_AH_GRH) marks the GRH fields of an AHAttr as valid.
const AHGRH AHFlags = 1

// IsValid reports whether f holds only defined flags.
func (f AHFlags) IsValid() bool { return f&^AHGRH == 0 }

// String returns "IB_AH_GRH", "0", or unknown bits in hex.
func (f AHFlags) String() string {
	switch {
	case f == 0:
		return "0"
	case f == AHGRH:
		return "IB_AH_GRH"
	case f&AHGRH != 0:
		return fmt.Sprintf("IB_AH_GRH|%#x", uint8(f&^AHGRH))
	}
	return fmt.Sprintf("%#x", uint8(f))
}

// MTU is enum ib_mtu, a path MTU code. It is signed because the kernel enum
// is an int and rxe does not reject 0 or negative codes (rxe_qp_chk_attr
// compares it only against the port's max_mtu).
type MTU int32

// Path MTU codes (enum ib_mtu and the OPA extensions).
const (
	MTU256      MTU = 1 // IB_MTU_256
	MTU512      MTU = 2 // IB_MTU_512
	MTU1024     MTU = 3 // IB_MTU_1024
	MTU2048     MTU = 4 // IB_MTU_2048
	MTU4096     MTU = 5 // IB_MTU_4096
	OPAMTU8192  MTU = 6 // OPA_MTU_8192 (OPA ports only)
	OPAMTU10240 MTU = 7 // OPA_MTU_10240 (OPA ports only)
)

// IsValid reports whether m is an IB MTU code (256..4096 bytes).
func (m MTU) IsValid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes converts m to bytes like ib_mtu_enum_to_int: 256 << (m-1) for the IB
// codes, -1 for anything else (the OPA codes included).
func (m MTU) Bytes() int {
	if !m.IsValid() {
		return -1
	}
	return 256 << (m - 1)
}

// MTUFromBytes converts a byte count to the largest IB MTU code not above it,
// like ib_mtu_int_to_enum: below 512 (0 and negatives too) gives MTU256,
// 4096 and above MTU4096.
func MTUFromBytes(n int) MTU {
	switch {
	case n >= 4096:
		return MTU4096
	case n >= 2048:
		return MTU2048
	case n >= 1024:
		return MTU1024
	case n >= 512:
		return MTU512
	}
	return MTU256
}

// String returns the kernel name ("IB_MTU_1024", "OPA_MTU_8192") or the
// decimal code.
func (m MTU) String() string {
	switch {
	case m.IsValid():
		return "IB_MTU_" + strconv.Itoa(m.Bytes())
	case m == OPAMTU8192:
		return "OPA_MTU_8192"
	case m == OPAMTU10240:
		return "OPA_MTU_10240"
	}
	return strconv.Itoa(int(m))
}

// AccessFlags is enum ib_access_flags: what an MR, MW or QP lets local and
// remote peers do (ib_verbs.h).
type AccessFlags uint32

// Access flag bits.
const (
	AccessLocalWrite      AccessFlags = 1 << 0  // IB_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     AccessFlags = 1 << 1  // IB_ACCESS_REMOTE_WRITE
	AccessRemoteRead      AccessFlags = 1 << 2  // IB_ACCESS_REMOTE_READ
	AccessRemoteAtomic    AccessFlags = 1 << 3  // IB_ACCESS_REMOTE_ATOMIC
	AccessMWBind          AccessFlags = 1 << 4  // IB_ACCESS_MW_BIND
	AccessZeroBased       AccessFlags = 1 << 5  // IB_ZERO_BASED
	AccessOnDemand        AccessFlags = 1 << 6  // IB_ACCESS_ON_DEMAND
	AccessHugeTLB         AccessFlags = 1 << 7  // IB_ACCESS_HUGETLB
	AccessFlushGlobal     AccessFlags = 1 << 8  // IB_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent AccessFlags = 1 << 9  // IB_ACCESS_FLUSH_PERSISTENT
	AccessRelaxedOrdering AccessFlags = 1 << 20 // IB_ACCESS_RELAXED_ORDERING, first optional bit

	// AccessOptional is IB_ACCESS_OPTIONAL, bits 20..29: drivers ignore
	// optional bits they do not know.
	AccessOptional AccessFlags = 0x3FF00000
	// AccessSupported is IB_ACCESS_SUPPORTED: bits 0..9 and the optional
	// range; ib_check_mr_access refuses anything else.
	AccessSupported AccessFlags = 0x3FF | AccessOptional
	// AccessRemote is rxe's RXE_ACCESS_REMOTE: REMOTE_READ|WRITE|ATOMIC.
	AccessRemote = AccessRemoteRead | AccessRemoteWrite | AccessRemoteAtomic
	// AccessRxeQP is rxe's set of flags accepted by IB_QP_ACCESS_FLAGS
	// (RXE_ACCESS_SUPPORTED_QP, the same as its MR set); anything else is
	// EINVAL on modify.
	AccessRxeQP = AccessRemote | AccessLocalWrite | AccessMWBind | AccessOnDemand |
		AccessFlushGlobal | AccessFlushPersistent | AccessOptional
)

var accessNames = map[AccessFlags]string{
	AccessLocalWrite: "IB_ACCESS_LOCAL_WRITE", AccessRemoteWrite: "IB_ACCESS_REMOTE_WRITE",
	AccessRemoteRead: "IB_ACCESS_REMOTE_READ", AccessRemoteAtomic: "IB_ACCESS_REMOTE_ATOMIC",
	AccessMWBind: "IB_ACCESS_MW_BIND", AccessZeroBased: "IB_ZERO_BASED",
	AccessOnDemand: "IB_ACCESS_ON_DEMAND", AccessHugeTLB: "IB_ACCESS_HUGETLB",
	AccessFlushGlobal: "IB_ACCESS_FLUSH_GLOBAL", AccessFlushPersistent: "IB_ACCESS_FLUSH_PERSISTENT",
	AccessRelaxedOrdering: "IB_ACCESS_RELAXED_ORDERING",
}

// IsValid reports whether f lies within IB_ACCESS_SUPPORTED.
func (f AccessFlags) IsValid() bool { return f&^AccessSupported == 0 }

// Writable reports whether memory registered with f may be written
// (ib_access_writable): LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC or
// MW_BIND, the last because a bound window may grant write.
func (f AccessFlags) Writable() bool {
	return f&(AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic|AccessMWBind) != 0
}

// String returns the kernel names of the bits of f joined by "|", bits
// without a name as one trailing hex number, "0" for none.
func (f AccessFlags) String() string {
	if f == 0 {
		return "0"
	}
	var b strings.Builder
	var unknown AccessFlags
	for rest := f; rest != 0; rest &= rest - 1 {
		bit := rest & -rest
		n, ok := accessNames[bit]
		if !ok {
			unknown |= bit
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
		fmt.Fprintf(&b, "%#x", uint32(unknown))
	}
	return b.String()
}

// GIDType is enum ib_gid_type (6.x values): what kind of address a GID
// table slot holds.
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0 // IB_GID_TYPE_IB
	GIDTypeRoCE   GIDType = 1 // IB_GID_TYPE_ROCE: RoCE v1
	GIDTypeRoCEv2 GIDType = 2 // IB_GID_TYPE_ROCE_UDP_ENCAP: RoCE v2
)

var gidTypeNames = [...]string{"IB", "ROCE", "ROCE_UDP_ENCAP"}

// IsValid reports whether t is a defined GID type.
func (t GIDType) IsValid() bool { return int(t) < len(gidTypeNames) }

// String returns the kernel name, e.g. "IB_GID_TYPE_ROCE_UDP_ENCAP".
func (t GIDType) String() string {
	if t.IsValid() {
		return "IB_GID_TYPE_" + gidTypeNames[t]
	}
	return "IB_GID_TYPE(" + strconv.Itoa(int(t)) + ")"
}
