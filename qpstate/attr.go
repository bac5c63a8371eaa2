package qpstate

import (
	"fmt"
	"math/bits"
	"strconv"
)

// Attr is the Go counterpart of struct ib_qp_attr (include/rdma/ib_verbs.h):
// the values a modify applies, each carried only when its AttrMask bit is
// set, and what a query returns.
type Attr struct {
	QPState          State       // IB_QP_STATE: requested next state
	CurQPState       State       // IB_QP_CUR_STATE: caller's assertion of the current state
	PathMTU          MTU         // IB_QP_PATH_MTU
	PathMigState     MigState    // IB_QP_PATH_MIG_STATE
	QKey             uint32      // IB_QP_QKEY; bit 31 (QKeyPrivileged) needs privilege from userspace
	RQPSN            uint32      // IB_QP_RQ_PSN: first expected incoming PSN (24 bits)
	SQPSN            uint32      // IB_QP_SQ_PSN: first outgoing PSN (24 bits)
	DestQPNum        uint32      // IB_QP_DEST_QPN: remote QPN (24 bits)
	QPAccessFlags    AccessFlags // IB_QP_ACCESS_FLAGS: remote access enabled on the QP
	Cap              Cap         // IB_QP_CAP
	AHAttr           AHAttr      // IB_QP_AV: primary path
	AltAHAttr        AHAttr      // IB_QP_ALT_PATH: alternate path
	PKeyIndex        uint16      // IB_QP_PKEY_INDEX
	AltPKeyIndex     uint16      // IB_QP_ALT_PATH
	EnSQDAsyncNotify uint8       // IB_QP_EN_SQD_ASYNC_NOTIFY: ask for SQ_DRAINED on entering SQD
	SQDraining       uint8       // query only: 1 while an SQD drain is in progress
	MaxRdAtomic      uint8       // IB_QP_MAX_QP_RD_ATOMIC: initiator depth
	MaxDestRdAtomic  uint8       // IB_QP_MAX_DEST_RD_ATOMIC: responder resources
	MinRNRTimer      uint8       // IB_QP_MIN_RNR_TIMER: 5-bit code sent in RNR NAKs
	PortNum          uint32      // IB_QP_PORT: physical port, 1-based
	Timeout          uint8       // IB_QP_TIMEOUT: local ACK timeout code 0..31 (0 = infinite)
	RetryCnt         uint8       // IB_QP_RETRY_CNT: transport retries (3 bits in IBTA)
	RNRRetry         uint8       // IB_QP_RNR_RETRY: RNR retries (7 = infinite)
	AltPortNum       uint32      // IB_QP_ALT_PATH
	AltTimeout       uint8       // IB_QP_ALT_PATH
	RateLimit        uint32      // IB_QP_RATE_LIMIT: packet pacing (RAW_PACKET)
}

// PSNMask keeps the 24 bits of a packet sequence number; the core masks
// RQPSN and SQPSN with it (IB_QP_*_PSN overflow, _ib_modify_qp).
const PSNMask = 0xFFFFFF

// QPNMask keeps the 24 bits of a QP number (IB_QPN_MASK).
const QPNMask = 0xFFFFFF

// QKeyPrivileged is IB_QP_SET_QKEY, the Q_Key bit that an unprivileged
// userspace caller may not set (EPERM).
const QKeyPrivileged uint32 = 0x80000000

// Cap is struct ib_qp_cap: queue capacities requested at create and
// validated (not applied) by a modify with IB_QP_CAP.
type Cap struct {
	MaxSendWR     uint32 // send queue depth in WRs (max_send_wr)
	MaxRecvWR     uint32 // receive queue depth in WRs; ignored with an SRQ (max_recv_wr)
	MaxSendSGE    uint32 // gather entries per send WR (max_send_sge)
	MaxRecvSGE    uint32 // scatter entries per receive WR (max_recv_sge)
	MaxInlineData uint32 // bytes a send WR may carry inline (max_inline_data)
	MaxRDMACtxs   uint32 // rdma_rw contexts in flight, for the core's RW API (max_rdma_ctxs)
}

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

// MigState is enum ib_mig_state, the automatic path migration state.
type MigState uint8

// Path migration states.
const (
	MigMigrated MigState = 0 // IB_MIG_MIGRATED
	MigRearm    MigState = 1 // IB_MIG_REARM
	MigArmed    MigState = 2 // IB_MIG_ARMED
)

var migNames = [...]string{"MIGRATED", "REARM", "ARMED"}

// IsValid reports whether s is a defined migration state.
func (s MigState) IsValid() bool { return int(s) < len(migNames) }

// String returns the kernel name, e.g. "IB_MIG_ARMED".
func (s MigState) String() string {
	if s.IsValid() {
		return "IB_MIG_" + migNames[s]
	}
	return "IB_MIG(" + strconv.Itoa(int(s)) + ")"
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

// String returns the kernel names of the bits of f joined by "|", bits
// without a name as one trailing hex number, "0" for none.
func (f AccessFlags) String() string {
	if f == 0 {
		return "0"
	}
	return formatBits(uint32(f), func(bit int) string { return accessNames[AccessFlags(1)<<bit] })
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

// RoundUpPow2 rounds n up to a power of two, leaving 0 as 0, the way rxe
// stores max_rd_atomic and max_dest_rd_atomic (roundup_pow_of_two in
// rxe_qp_from_attr): 3 -> 4, 4 -> 4, 129 -> 256. A query then reports the
// rounded value. The emulator applies it after Validate. Inputs above 1<<31
// wrap to 0; the attributes it serves are 8-bit.
func RoundUpPow2(n uint32) uint32 {
	if n <= 1 {
		return n
	}
	return 1 << bits.Len32(n-1)
}
