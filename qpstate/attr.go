package qpstate

import (
	"math/bits"
	"strconv"

	"github.com/softroce/softroce/ib"
)

// Attr is the Go counterpart of struct ib_qp_attr (include/rdma/ib_verbs.h):
// the values a modify applies, each carried only when its AttrMask bit is
// set, and what a query returns.
type Attr struct {
	QPState          State          // IB_QP_STATE: requested next state
	CurQPState       State          // IB_QP_CUR_STATE: caller's assertion of the current state
	PathMTU          ib.MTU         // IB_QP_PATH_MTU
	PathMigState     MigState       // IB_QP_PATH_MIG_STATE
	QKey             uint32         // IB_QP_QKEY; bit 31 (QKeyPrivileged) needs privilege from userspace
	RQPSN            uint32         // IB_QP_RQ_PSN: first expected incoming PSN (24 bits)
	SQPSN            uint32         // IB_QP_SQ_PSN: first outgoing PSN (24 bits)
	DestQPNum        uint32         // IB_QP_DEST_QPN: remote QPN (24 bits)
	QPAccessFlags    ib.AccessFlags // IB_QP_ACCESS_FLAGS: remote access enabled on the QP
	Cap              Cap            // IB_QP_CAP
	AHAttr           ib.AHAttr      // IB_QP_AV: primary path
	AltAHAttr        ib.AHAttr      // IB_QP_ALT_PATH: alternate path
	PKeyIndex        uint16         // IB_QP_PKEY_INDEX
	AltPKeyIndex     uint16         // IB_QP_ALT_PATH
	EnSQDAsyncNotify uint8          // IB_QP_EN_SQD_ASYNC_NOTIFY: ask for SQ_DRAINED on entering SQD
	SQDraining       uint8          // query only: 1 while an SQD drain is in progress
	MaxRdAtomic      uint8          // IB_QP_MAX_QP_RD_ATOMIC: initiator depth
	MaxDestRdAtomic  uint8          // IB_QP_MAX_DEST_RD_ATOMIC: responder resources
	MinRNRTimer      uint8          // IB_QP_MIN_RNR_TIMER: 5-bit code sent in RNR NAKs
	PortNum          uint32         // IB_QP_PORT: physical port, 1-based
	Timeout          uint8          // IB_QP_TIMEOUT: local ACK timeout code 0..31 (0 = infinite)
	RetryCnt         uint8          // IB_QP_RETRY_CNT: transport retries (3 bits in IBTA)
	RNRRetry         uint8          // IB_QP_RNR_RETRY: RNR retries (7 = infinite)
	AltPortNum       uint32         // IB_QP_ALT_PATH
	AltTimeout       uint8          // IB_QP_ALT_PATH
	RateLimit        uint32         // IB_QP_RATE_LIMIT: packet pacing (RAW_PACKET)
}

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
