package emu

import (
	"strconv"
)

// WCStatus is enum ib_wc_status, the status of a work completion.
type WCStatus int32

// Work completion statuses with the kernel's values.
const (
	WCSuccess          WCStatus = 0  // IB_WC_SUCCESS
	WCLocLenErr        WCStatus = 1  // IB_WC_LOC_LEN_ERR
	WCLocQPOpErr       WCStatus = 2  // IB_WC_LOC_QP_OP_ERR
	WCLocEECOpErr      WCStatus = 3  // IB_WC_LOC_EEC_OP_ERR
	WCLocProtErr       WCStatus = 4  // IB_WC_LOC_PROT_ERR
	WCWRFlushErr       WCStatus = 5  // IB_WC_WR_FLUSH_ERR
	WCMWBindErr        WCStatus = 6  // IB_WC_MW_BIND_ERR
	WCBadRespErr       WCStatus = 7  // IB_WC_BAD_RESP_ERR
	WCLocAccessErr     WCStatus = 8  // IB_WC_LOC_ACCESS_ERR
	WCRemInvReqErr     WCStatus = 9  // IB_WC_REM_INV_REQ_ERR
	WCRemAccessErr     WCStatus = 10 // IB_WC_REM_ACCESS_ERR
	WCRemOpErr         WCStatus = 11 // IB_WC_REM_OP_ERR
	WCRetryExcErr      WCStatus = 12 // IB_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr   WCStatus = 13 // IB_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr    WCStatus = 14 // IB_WC_LOC_RDD_VIOL_ERR
	WCRemInvRdReqErr   WCStatus = 15 // IB_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr      WCStatus = 16 // IB_WC_REM_ABORT_ERR
	WCInvEECNErr       WCStatus = 17 // IB_WC_INV_EECN_ERR
	WCInvEECStateErr   WCStatus = 18 // IB_WC_INV_EEC_STATE_ERR
	WCFatalErr         WCStatus = 19 // IB_WC_FATAL_ERR
	WCRespTimeoutErr   WCStatus = 20 // IB_WC_RESP_TIMEOUT_ERR
	WCGeneralErr       WCStatus = 21 // IB_WC_GENERAL_ERR
	numWCStatus                 = 22
	unrecognizedStatus          = "unrecognized status"
)

var wcStatusNames = [numWCStatus]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR",
	"LOC_PROT_ERR", "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
	"REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
	"REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
	"RESP_TIMEOUT_ERR", "GENERAL_ERR"}

var wcStatusMsgs = [numWCStatus]string{"success", "local length error", "local QP operation error",
	"local EE context operation error", "local protection error", "WR flushed",
	"memory bind operation error", "bad response error", "local access error",
	"remote invalid request error", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
	"remote invalid RD request", "operation aborted", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error"}

// IsValid reports whether s is a defined status.
func (s WCStatus) IsValid() bool { return s >= 0 && s < numWCStatus }

// String returns the kernel name, e.g. "IB_WC_WR_FLUSH_ERR".
func (s WCStatus) String() string {
	if s.IsValid() {
		return "IB_WC_" + wcStatusNames[s]
	}
	return "IB_WC_STATUS(" + strconv.Itoa(int(s)) + ")"
}

// Msg returns ib_wc_status_msg's text ("WR flushed"), "unrecognized status"
// for an unknown value.
func (s WCStatus) Msg() string {
	if s.IsValid() {
		return wcStatusMsgs[s]
	}
	return unrecognizedStatus
}

// WCOpcode is enum ib_wc_opcode (6.x values).
type WCOpcode int32

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0   // IB_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IB_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IB_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IB_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IB_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IB_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IB_WC_LOCAL_INV
	WCLSO             WCOpcode = 7   // IB_WC_LSO
	WCFlush           WCOpcode = 8   // IB_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IB_WC_ATOMIC_WRITE
	WCRegMR           WCOpcode = 10  // IB_WC_REG_MR
	WCMaskedCompSwap  WCOpcode = 11  // IB_WC_MASKED_COMP_SWAP
	WCMaskedFetchAdd  WCOpcode = 12  // IB_WC_MASKED_FETCH_ADD
	WCRecv            WCOpcode = 128 // IB_WC_RECV (receive opcodes have bit 7 set)
	WCRecvRDMAWithImm WCOpcode = 129 // IB_WC_RECV_RDMA_WITH_IMM
)

var wcOpNames = map[WCOpcode]string{WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ",
	WCCompSwap: "COMP_SWAP", WCFetchAdd: "FETCH_ADD", WCBindMW: "BIND_MW", WCLocalInv: "LOCAL_INV",
	WCLSO: "LSO", WCFlush: "FLUSH", WCAtomicWrite: "ATOMIC_WRITE", WCRegMR: "REG_MR",
	WCMaskedCompSwap: "MASKED_COMP_SWAP", WCMaskedFetchAdd: "MASKED_FETCH_ADD", WCRecv: "RECV",
	WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM"}

// IsValid reports whether o is a defined opcode.
func (o WCOpcode) IsValid() bool { _, ok := wcOpNames[o]; return ok }

// String returns the kernel name, e.g. "IB_WC_RECV".
func (o WCOpcode) String() string {
	if n, ok := wcOpNames[o]; ok {
		return "IB_WC_" + n
	}
	return "IB_WC_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// WCFlags is enum ib_wc_flags.
type WCFlags uint32

// Work completion flags.
const (
	WCGRH                WCFlags = 1 << 0 // IB_WC_GRH
	WCWithImm            WCFlags = 1 << 1 // IB_WC_WITH_IMM
	WCWithInvalidate     WCFlags = 1 << 2 // IB_WC_WITH_INVALIDATE
	WCIPCsumOK           WCFlags = 1 << 3 // IB_WC_IP_CSUM_OK
	WCWithSMAC           WCFlags = 1 << 4 // IB_WC_WITH_SMAC
	WCWithVLAN           WCFlags = 1 << 5 // IB_WC_WITH_VLAN
	WCWithNetworkHdrType WCFlags = 1 << 6 // IB_WC_WITH_NETWORK_HDR_TYPE
)

// WROpcode is enum ib_wr_opcode.
type WROpcode int32

// Work request opcodes.
const (
	WRRDMAWrite             WROpcode = 0    // IB_WR_RDMA_WRITE
	WRRDMAWriteWithImm      WROpcode = 1    // IB_WR_RDMA_WRITE_WITH_IMM
	WRSend                  WROpcode = 2    // IB_WR_SEND
	WRSendWithImm           WROpcode = 3    // IB_WR_SEND_WITH_IMM
	WRRDMARead              WROpcode = 4    // IB_WR_RDMA_READ
	WRAtomicCmpAndSwp       WROpcode = 5    // IB_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAndAdd     WROpcode = 6    // IB_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv              WROpcode = 7    // IB_WR_LOCAL_INV
	WRBindMW                WROpcode = 8    // IB_WR_BIND_MW
	WRSendWithInv           WROpcode = 9    // IB_WR_SEND_WITH_INV
	WRLSO                   WROpcode = 10   // IB_WR_LSO
	WRRDMAReadWithInv       WROpcode = 11   // IB_WR_RDMA_READ_WITH_INV
	WRMaskedAtomicCmpAndSwp WROpcode = 12   // IB_WR_MASKED_ATOMIC_CMP_AND_SWP
	WRMaskedAtomicFetchAdd  WROpcode = 13   // IB_WR_MASKED_ATOMIC_FETCH_AND_ADD
	WRFlush                 WROpcode = 14   // IB_WR_FLUSH
	WRAtomicWrite           WROpcode = 15   // IB_WR_ATOMIC_WRITE
	WRRegMR                 WROpcode = 0x20 // IB_WR_REG_MR (kernel only)
	WRRegMRIntegrity        WROpcode = 0x21 // IB_WR_REG_MR_INTEGRITY (kernel only)
)

var wrOpNames = map[WROpcode]string{WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM",
	WRSend: "SEND", WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ",
	WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP", WRAtomicFetchAndAdd: "ATOMIC_FETCH_AND_ADD",
	WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW", WRSendWithInv: "SEND_WITH_INV", WRLSO: "LSO",
	WRRDMAReadWithInv: "RDMA_READ_WITH_INV", WRMaskedAtomicCmpAndSwp: "MASKED_ATOMIC_CMP_AND_SWP",
	WRMaskedAtomicFetchAdd: "MASKED_ATOMIC_FETCH_AND_ADD", WRFlush: "FLUSH",
	WRAtomicWrite: "ATOMIC_WRITE", WRRegMR: "REG_MR", WRRegMRIntegrity: "REG_MR_INTEGRITY"}

// IsValid reports whether o is a defined opcode.
func (o WROpcode) IsValid() bool { _, ok := wrOpNames[o]; return ok }

// String returns the kernel name, e.g. "IB_WR_SEND".
func (o WROpcode) String() string {
	if n, ok := wrOpNames[o]; ok {
		return "IB_WR_" + n
	}
	return "IB_WR_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags is enum ib_send_flags.
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // IB_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IB_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IB_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IB_SEND_INLINE
	SendIPCsum    SendFlags = 1 << 4 // IB_SEND_IP_CSUM
)

// EventType is enum ib_event_type, an asynchronous event.
type EventType int32

// Asynchronous events.
const (
	EventCQErr             EventType = 0  // IB_EVENT_CQ_ERR
	EventQPFatal           EventType = 1  // IB_EVENT_QP_FATAL
	EventQPReqErr          EventType = 2  // IB_EVENT_QP_REQ_ERR
	EventQPAccessErr       EventType = 3  // IB_EVENT_QP_ACCESS_ERR
	EventCommEst           EventType = 4  // IB_EVENT_COMM_EST
	EventSQDrained         EventType = 5  // IB_EVENT_SQ_DRAINED
	EventPathMig           EventType = 6  // IB_EVENT_PATH_MIG
	EventPathMigErr        EventType = 7  // IB_EVENT_PATH_MIG_ERR
	EventDeviceFatal       EventType = 8  // IB_EVENT_DEVICE_FATAL
	EventPortActive        EventType = 9  // IB_EVENT_PORT_ACTIVE
	EventPortErr           EventType = 10 // IB_EVENT_PORT_ERR
	EventLIDChange         EventType = 11 // IB_EVENT_LID_CHANGE
	EventPKeyChange        EventType = 12 // IB_EVENT_PKEY_CHANGE
	EventSMChange          EventType = 13 // IB_EVENT_SM_CHANGE
	EventSRQErr            EventType = 14 // IB_EVENT_SRQ_ERR
	EventSRQLimitReached   EventType = 15 // IB_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached  EventType = 16 // IB_EVENT_QP_LAST_WQE_REACHED
	EventClientReregister  EventType = 17 // IB_EVENT_CLIENT_REREGISTER
	EventGIDChange         EventType = 18 // IB_EVENT_GID_CHANGE
	EventWQFatal           EventType = 19 // IB_EVENT_WQ_FATAL
	EventDeviceSpeedChange EventType = 20 // IB_EVENT_DEVICE_SPEED_CHANGE (rdma-next 2025)
	numEventTypes                    = 21
)

var eventNames = [numEventTypes]string{"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST",
	"SQ_DRAINED", "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE",
	"PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED",
	"CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL", "DEVICE_SPEED_CHANGE"}

// eventMsgs are ib_event_msg's strings; WQ_FATAL and DEVICE_SPEED_CHANGE have
// none in 6.12 and print "unrecognized event".
var eventMsgs = [numEventTypes]string{"CQ error", "QP fatal error", "QP request error",
	"QP access error", "communication established", "send queue drained",
	"path migration successful", "path migration error", "device fatal error", "port active",
	"port error", "LID change", "P_key change", "SM change", "SRQ error", "SRQ limit reached",
	"last WQE reached", "client reregister", "GID changed", "", ""}

// IsValid reports whether e is a defined event.
func (e EventType) IsValid() bool { return e >= 0 && e < numEventTypes }

// String returns the kernel name, e.g. "IB_EVENT_SQ_DRAINED".
func (e EventType) String() string {
	if e.IsValid() {
		return "IB_EVENT_" + eventNames[e]
	}
	return "IB_EVENT(" + strconv.Itoa(int(e)) + ")"
}

// Msg returns ib_event_msg's text ("send queue drained"), "unrecognized
// event" for a value without one.
func (e EventType) Msg() string {
	if e.IsValid() && eventMsgs[e] != "" {
		return eventMsgs[e]
	}
	return "unrecognized event"
}

// MRType is enum ib_mr_type.
type MRType int32

// Memory region types.
const (
	MRTypeMemReg    MRType = 0 // IB_MR_TYPE_MEM_REG: fast-registration MR (ib_alloc_mr)
	MRTypeSGGaps    MRType = 1 // IB_MR_TYPE_SG_GAPS
	MRTypeDM        MRType = 2 // IB_MR_TYPE_DM
	MRTypeUser      MRType = 3 // IB_MR_TYPE_USER
	MRTypeDMA       MRType = 4 // IB_MR_TYPE_DMA
	MRTypeIntegrity MRType = 5 // IB_MR_TYPE_INTEGRITY
)

var mrTypeNames = [...]string{"MEM_REG", "SG_GAPS", "DM", "USER", "DMA", "INTEGRITY"}

// IsValid reports whether t is a defined MR type.
func (t MRType) IsValid() bool { return t >= 0 && int(t) < len(mrTypeNames) }

// String returns the kernel name, e.g. "IB_MR_TYPE_MEM_REG".
func (t MRType) String() string {
	if t.IsValid() {
		return "IB_MR_TYPE_" + mrTypeNames[t]
	}
	return "IB_MR_TYPE(" + strconv.Itoa(int(t)) + ")"
}

// MRCheckSigStatus is IB_MR_CHECK_SIG_STATUS, the one ib_mr_status_check
// bit.
const MRCheckSigStatus uint32 = 1

// SigErrType is enum ib_sig_err_type.
type SigErrType int32

// Signature error types.
const (
	SigBadGuard  SigErrType = 0 // IB_SIG_BAD_GUARD
	SigBadRefTag SigErrType = 1 // IB_SIG_BAD_REFTAG
	SigBadAppTag SigErrType = 2 // IB_SIG_BAD_APPTAG
)

// SigErr is struct ib_sig_err: the detail of a failed signature check.
type SigErr struct {
	ErrType      SigErrType // which check failed: guard, ref tag or app tag (err_type)
	Expected     uint32     // the expected guard or tag value (expected)
	Actual       uint32     // the value found in the data (actual)
	SigErrOffset uint64     // byte offset of the failed block in the data (sig_err_offset)
	Key          uint32     // the key of the signature MR that failed (key)
}

// MRStatus is struct ib_mr_status, what CheckMRStatus fills: the bit mask
// of failed checks and the signature error detail.
type MRStatus struct {
	FailStatus uint32 // IB_MR_CHECK_* bits of the checks that failed (fail_status)
	SigErr     SigErr // detail of a failed MRCheckSigStatus check (sig_err)
}

// CQNotifyFlags is enum ib_cq_notify_flags.
type CQNotifyFlags uint32

// CQ notification flags.
const (
	CQSolicited          CQNotifyFlags = 1 // IB_CQ_SOLICITED
	CQNextComp           CQNotifyFlags = 2 // IB_CQ_NEXT_COMP
	CQSolicitedMask      CQNotifyFlags = 3 // IB_CQ_SOLICITED_MASK
	CQReportMissedEvents CQNotifyFlags = 4 // IB_CQ_REPORT_MISSED_EVENTS
)

// NetworkType is enum rdma_network_type (6.x values).
type NetworkType int32

// Network header types of a RoCE completion.
const (
	NetworkIB     NetworkType = 0 // RDMA_NETWORK_IB
	NetworkRoCEv1 NetworkType = 1 // RDMA_NETWORK_ROCE_V1
	NetworkIPv4   NetworkType = 2 // RDMA_NETWORK_IPV4
	NetworkIPv6   NetworkType = 3 // RDMA_NETWORK_IPV6
)

// String returns the kernel name, e.g. "RDMA_NETWORK_IPV4".
func (n NetworkType) String() string {
	switch n {
	case NetworkIB:
		return "RDMA_NETWORK_IB"
	case NetworkRoCEv1:
		return "RDMA_NETWORK_ROCE_V1"
	case NetworkIPv4:
		return "RDMA_NETWORK_IPV4"
	case NetworkIPv6:
		return "RDMA_NETWORK_IPV6"
	}
	return "RDMA_NETWORK(" + strconv.Itoa(int(n)) + ")"
}

// PortState is enum ib_port_state.
type PortState int32

// Port states.
const (
	PortNOP         PortState = 0 // IB_PORT_NOP
	PortDown        PortState = 1 // IB_PORT_DOWN
	PortInit        PortState = 2 // IB_PORT_INIT
	PortArmed       PortState = 3 // IB_PORT_ARMED
	PortActive      PortState = 4 // IB_PORT_ACTIVE
	PortActiveDefer PortState = 5 // IB_PORT_ACTIVE_DEFER
)

// String returns the kernel name, e.g. "IB_PORT_ACTIVE".
func (s PortState) String() string {
	names := [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if s >= 0 && int(s) < len(names) {
		return "IB_PORT_" + names[s]
	}
	return "IB_PORT_STATE(" + strconv.Itoa(int(s)) + ")"
}

// PhysState is enum ib_port_phys_state.
type PhysState uint8

// Physical port states used by rxe.
const (
	PhysSleep    PhysState = 1 // IB_PORT_PHYS_STATE_SLEEP
	PhysPolling  PhysState = 2 // IB_PORT_PHYS_STATE_POLLING
	PhysDisabled PhysState = 3 // IB_PORT_PHYS_STATE_DISABLED
	PhysTraining PhysState = 4 // IB_PORT_PHYS_STATE_PORT_CONFIGURATION_TRAINING
	PhysLinkUp   PhysState = 5 // IB_PORT_PHYS_STATE_LINK_UP
	PhysLinkErr  PhysState = 6 // IB_PORT_PHYS_STATE_LINK_ERROR_RECOVERY
	PhysPHYTest  PhysState = 7 // IB_PORT_PHYS_STATE_PHY_TEST
)

// LinkLayer is the IB_LINK_LAYER_* value rdma_port_get_link_layer returns.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0 // IB_LINK_LAYER_UNSPECIFIED
	LinkLayerInfiniBand  LinkLayer = 1 // IB_LINK_LAYER_INFINIBAND
	LinkLayerEthernet    LinkLayer = 2 // IB_LINK_LAYER_ETHERNET
)

// SRQType is enum ib_srq_type.
type SRQType int32

// SRQ types.
const (
	SRQBasic SRQType = 0 // IB_SRQT_BASIC
	SRQXRC   SRQType = 1 // IB_SRQT_XRC
	SRQTM    SRQType = 2 // IB_SRQT_TM
)

// SRQAttrMask is enum ib_srq_attr_mask.
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQMaxWR SRQAttrMask = 1 << 0 // IB_SRQ_MAX_WR
	SRQLimit SRQAttrMask = 1 << 1 // IB_SRQ_LIMIT
)

// MWType is enum ib_mw_type.
type MWType int32

// Memory window types.
const (
	MWType1 MWType = 1 // IB_MW_TYPE_1
	MWType2 MWType = 2 // IB_MW_TYPE_2
)

// SigType is enum ib_sig_type, the sq_sig_type of a QP.
type SigType int32

// Send-queue signalling.
const (
	SignalAllWR SigType = 0 // IB_SIGNAL_ALL_WR
	SignalReqWR SigType = 1 // IB_SIGNAL_REQ_WR
)

// Special numbers of the verbs API.
const (
	MulticastQPN     = 0xFFFFFF   // IB_MULTICAST_QPN
	DefaultPKey      = 0xFFFF     // default (full) P_Key
	GSIQKey          = 0x80010000 // IB_QP1_QKEY
	MgmtMADSize      = 256        // IB_MGMT_MAD_SIZE
	PermissiveLID    = 0xFFFF     // IB_LID_PERMISSIVE
	MulticastLIDBase = 0xC000     // IB_MULTICAST_LID_BASE
)

// MRReregFlags is enum ib_mr_rereg_flags: what a re-registration changes.
type MRReregFlags uint32

// Re-registration flags with the kernel's values.
const (
	MRReregTrans  MRReregFlags = 1 // IB_MR_REREG_TRANS: the address range
	MRReregPD     MRReregFlags = 2 // IB_MR_REREG_PD: the protection domain
	MRReregAccess MRReregFlags = 4 // IB_MR_REREG_ACCESS: the access rights

	// MRReregSupported is IB_MR_REREG_SUPPORTED, every defined flag.
	MRReregSupported = MRReregTrans | MRReregPD | MRReregAccess
)

// IsValid reports whether f holds only defined flags.
func (f MRReregFlags) IsValid() bool { return f&^MRReregSupported == 0 }

// String returns the kernel names of the bits of f joined by "|", bits
// without a name as one trailing hex number, "0" for none.
func (f MRReregFlags) String() string {
	if f == 0 {
		return "0"
	}
	var s string
	for _, n := range []struct {
		f    MRReregFlags
		name string
	}{{MRReregTrans, "IB_MR_REREG_TRANS"}, {MRReregPD, "IB_MR_REREG_PD"}, {MRReregAccess, "IB_MR_REREG_ACCESS"}} {
		if f&n.f != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
		}
	}
	if rest := f &^ MRReregSupported; rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}
