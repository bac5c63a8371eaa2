package mad

import "encoding/binary"

// CM messages, IBA vol. 1 §12.6. Offsets below are from the start of the
// MAD (the IBA tables count from the start of the class data, 24 bytes
// later). Every message starts with the sender's Local Communication ID;
// all but REQ then carry the Remote Communication ID.

// Private data sizes of the CM messages (IB_CM_*_PRIVATE_DATA_SIZE).
const (
	REQPrivateDataSize  = 92
	MRAPrivateDataSize  = 222
	REJPrivateDataSize  = 148
	REPPrivateDataSize  = 196
	RTUPrivateDataSize  = 224
	DREQPrivateDataSize = 220
	DREPPrivateDataSize = 224
	REJARISize          = 72
)

const (
	offLocalCommID  = 24
	offRemoteCommID = 28
)

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

func bit(b byte, mask byte) bool { return b&mask != 0 }

func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}

// LocalCommID returns the sender's Local Communication ID (every CM
// message).
func (m MAD) LocalCommID() uint32 { return be32(m[offLocalCommID:]) }

// RemoteCommID returns the Remote Communication ID (all but REQ: the
// receiver's Local Communication ID; 0 in a REJ of an unknown REQ).
func (m MAD) RemoteCommID() uint32 { return be32(m[offRemoteCommID:]) }

// Transport service types of REQ (IBA Table 99).
const (
	TransportRC uint8 = 0
	TransportUC uint8 = 1
	TransportRD uint8 = 2
)

// REQ: ConnectRequest, IBA vol. 1 §12.6.5 (Table 99).
//
//	 24 Local Communication ID
//	 28 reserved
//	 32 ServiceID (8)
//	 40 Local CA GUID (8)
//	 48 reserved
//	 52 Local Q_Key
//	 56 Local QPN (24) | Responder Resources (8)
//	 60 Local EECN (24) | Initiator Depth (8)
//	 64 Remote EECN (24) | Remote CM Response Timeout (5) | Transport Service Type (2) | End-to-End Flow Control (1)
//	 68 Starting PSN (24) | Local CM Response Timeout (5) | Retry Count (3)
//	 72 Partition Key (16)
//	 74 Path MTU (4) | RDC Exists (1) | RNR Retry Count (3)
//	 75 Max CM Retries (4) | SRQ (1) | Extended Transport Type (3)
//	 76 Primary Local Port LID (16), 78 Primary Remote Port LID (16)
//	 80 Primary Local Port GID (16), 96 Primary Remote Port GID (16)
//	112 Primary Flow Label (20) | reserved (6) | Primary Packet Rate (6)
//	116 Primary Traffic Class, 117 Primary Hop Limit
//	118 Primary SL (4) | Primary Subnet Local (1) | reserved (3)
//	119 Primary Local ACK Timeout (5) | reserved (3)
//	120..163 the alternate path, laid out as the primary one
//	164 PrivateData (92)
type REQ MAD

// REQFields holds the fields of a REQ that an RC connection over RoCE
// uses; the alternate path and EE contexts stay zero.
type REQFields struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	InitiatorDepth          uint8
	RemoteCMResponseTimeout uint8 // 5 bits: 4.096 µs * 2^n
	TransportServiceType    uint8 // 2 bits: TransportRC, ...
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PartitionKey            uint16
	PathMTU                 uint8 // 4 bits: IB_MTU_256=1 .. IB_MTU_4096=5
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	PrimaryLocalLID         uint16
	PrimaryRemoteLID        uint16
	PrimaryLocalGID         [16]byte
	PrimaryRemoteGID        [16]byte
	PrimaryFlowLabel        uint32 // 20 bits
	PrimaryPacketRate       uint8  // 6 bits
	PrimaryTrafficClass     uint8
	PrimaryHopLimit         uint8
	PrimarySL               uint8 // 4 bits
	PrimarySubnetLocal      bool
	PrimaryLocalACKTimeout  uint8 // 5 bits
	PrivateData             []byte
}

// LocalCommID returns the Local Communication ID.
func (r REQ) LocalCommID() uint32 { return MAD(r).LocalCommID() }

// ServiceID returns the ServiceID.
func (r REQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[32:]) }

// LocalCAGUID returns the Local CA GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[40:]) }

// LocalQKey returns the Local Q_Key.
func (r REQ) LocalQKey() uint32 { return be32(r[52:]) }

// LocalQPN returns the Local QPN.
func (r REQ) LocalQPN() uint32 { return get24(r[56:]) }

// ResponderResources returns the Responder Resources (the RDMA READs and
// atomics the sender accepts in flight: the receiver's initiator depth).
func (r REQ) ResponderResources() uint8 { return r[59] }

// InitiatorDepth returns the Initiator Depth.
func (r REQ) InitiatorDepth() uint8 { return r[63] }

// RemoteCMResponseTimeout returns the Remote CM Response Timeout.
func (r REQ) RemoteCMResponseTimeout() uint8 { return r[67] >> 3 }

// TransportServiceType returns the Transport Service Type.
func (r REQ) TransportServiceType() uint8 { return r[67] >> 1 & 3 }

// EndToEndFlowControl reports End-to-End Flow Control.
func (r REQ) EndToEndFlowControl() bool { return bit(r[67], 1) }

// StartingPSN returns the Starting PSN (the sender's first send PSN).
func (r REQ) StartingPSN() uint32 { return get24(r[68:]) }

// LocalCMResponseTimeout returns the Local CM Response Timeout.
func (r REQ) LocalCMResponseTimeout() uint8 { return r[71] >> 3 }

// RetryCount returns the Retry Count.
func (r REQ) RetryCount() uint8 { return r[71] & 7 }

// PartitionKey returns the Partition Key.
func (r REQ) PartitionKey() uint16 { return binary.BigEndian.Uint16(r[72:]) }

// PathMTU returns the Path MTU.
func (r REQ) PathMTU() uint8 { return r[74] >> 4 }

// RNRRetryCount returns the RNR Retry Count.
func (r REQ) RNRRetryCount() uint8 { return r[74] & 7 }

// MaxCMRetries returns Max CM Retries.
func (r REQ) MaxCMRetries() uint8 { return r[75] >> 4 }

// SRQ reports the SRQ bit.
func (r REQ) SRQ() bool { return bit(r[75], 0x08) }

// PrimaryLocalGID returns the Primary Local Port GID (the sender's).
func (r REQ) PrimaryLocalGID() (g [16]byte) { copy(g[:], r[80:96]); return }

// PrimaryRemoteGID returns the Primary Remote Port GID (the receiver's).
func (r REQ) PrimaryRemoteGID() (g [16]byte) { copy(g[:], r[96:112]); return }

// PrimaryHopLimit returns the Primary Hop Limit.
func (r REQ) PrimaryHopLimit() uint8 { return r[117] }

// PrimaryLocalACKTimeout returns the Primary Local ACK Timeout.
func (r REQ) PrimaryLocalACKTimeout() uint8 { return r[119] >> 3 }

// PrivateData returns the 92 bytes of private data.
func (r REQ) PrivateData() []byte { return r[164:Size] }

// Fields returns the REQ's fields.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID: r.LocalCommID(), ServiceID: r.ServiceID(), LocalCAGUID: r.LocalCAGUID(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(),
		TransportServiceType: r.TransportServiceType(), EndToEndFlowControl: r.EndToEndFlowControl(),
		StartingPSN: r.StartingPSN(), LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(),
		PartitionKey: r.PartitionKey(), PathMTU: r.PathMTU(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(),
		PrimaryLocalLID: binary.BigEndian.Uint16(r[76:]), PrimaryRemoteLID: binary.BigEndian.Uint16(r[78:]),
		PrimaryLocalGID: r.PrimaryLocalGID(), PrimaryRemoteGID: r.PrimaryRemoteGID(),
		PrimaryFlowLabel: be32(r[112:]) >> 12, PrimaryPacketRate: r[115] & 0x3f,
		PrimaryTrafficClass: r[116], PrimaryHopLimit: r.PrimaryHopLimit(), PrimarySL: r[118] >> 4,
		PrimarySubnetLocal: bit(r[118], 0x08), PrimaryLocalACKTimeout: r.PrimaryLocalACKTimeout(),
		PrivateData: r.PrivateData(),
	}
}

// Encode writes f into the REQ's data (the header is left alone; the
// alternate path and reserved fields are zeroed). Private data longer than
// REQPrivateDataSize is cut; the rest is zero-filled.
func (r REQ) Encode(f *REQFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.LocalCommID)
	binary.BigEndian.PutUint64(r[32:], f.ServiceID)
	binary.BigEndian.PutUint64(r[40:], f.LocalCAGUID)
	binary.BigEndian.PutUint32(r[52:], f.LocalQKey)
	put24(r[56:], f.LocalQPN)
	r[59] = f.ResponderResources
	r[63] = f.InitiatorDepth
	r[67] = f.RemoteCMResponseTimeout<<3 | f.TransportServiceType&3<<1
	setBit(&r[67], 1, f.EndToEndFlowControl)
	put24(r[68:], f.StartingPSN)
	r[71] = f.LocalCMResponseTimeout<<3 | f.RetryCount&7
	binary.BigEndian.PutUint16(r[72:], f.PartitionKey)
	r[74] = f.PathMTU<<4 | f.RNRRetryCount&7
	r[75] = f.MaxCMRetries << 4
	setBit(&r[75], 0x08, f.SRQ)
	binary.BigEndian.PutUint16(r[76:], f.PrimaryLocalLID)
	binary.BigEndian.PutUint16(r[78:], f.PrimaryRemoteLID)
	copy(r[80:96], f.PrimaryLocalGID[:])
	copy(r[96:112], f.PrimaryRemoteGID[:])
	binary.BigEndian.PutUint32(r[112:], f.PrimaryFlowLabel<<12|uint32(f.PrimaryPacketRate&0x3f))
	r[116] = f.PrimaryTrafficClass
	r[117] = f.PrimaryHopLimit
	r[118] = f.PrimarySL << 4
	setBit(&r[118], 0x08, f.PrimarySubnetLocal)
	r[119] = f.PrimaryLocalACKTimeout << 3
	copy(r[164:Size], f.PrivateData)
}

// Message kinds a MRA or REJ names (IBA Table 103 and 104).
const (
	MsgREQ   uint8 = 0
	MsgREP   uint8 = 1
	MsgOther uint8 = 2
)

// MRA: MsgRcptAck, IBA vol. 1 §12.6.6.
//
//	24 Local Communication ID, 28 Remote Communication ID
//	32 Message MRAed (2) | reserved (6)
//	33 Service Timeout (5) | reserved (3)
//	34 PrivateData (222)
type MRA MAD

// MRAFields holds the fields of a MRA.
type MRAFields struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              uint8 // 2 bits: MsgREQ, MsgREP, MsgOther
	ServiceTimeout            uint8 // 5 bits
	PrivateData               []byte
}

// Fields returns the MRA's fields.
func (r MRA) Fields() MRAFields {
	return MRAFields{LocalCommID: MAD(r).LocalCommID(), RemoteCommID: MAD(r).RemoteCommID(),
		MessageMRAed: r[32] >> 6, ServiceTimeout: r[33] >> 3, PrivateData: r[34:Size]}
}

// Encode writes f into the MRA's data.
func (r MRA) Encode(f *MRAFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[28:], f.RemoteCommID)
	r[32] = f.MessageMRAed << 6
	r[33] = f.ServiceTimeout << 3
	copy(r[34:Size], f.PrivateData)
}

// RejReason is a REJ reason, IBA vol. 1 Table 105 (enum ib_cm_rej_reason).
type RejReason uint16

// REJ reasons used by the kernel's cm and rdma_cm.
const (
	RejNoQP               RejReason = 1
	RejNoEEC              RejReason = 2
	RejNoResources        RejReason = 3
	RejTimeout            RejReason = 4
	RejUnsupported        RejReason = 5
	RejInvalidCommID      RejReason = 6
	RejInvalidCommInstanc RejReason = 7
	RejInvalidServiceID   RejReason = 8
	RejInvalidTransport   RejReason = 9
	RejStaleConn          RejReason = 10
	RejRDCNotExist        RejReason = 11
	RejInvalidGID         RejReason = 12
	RejInvalidLID         RejReason = 13
	RejInvalidSL          RejReason = 14
	RejInvalidTrafficCls  RejReason = 15
	RejInvalidHopLimit    RejReason = 16
	RejInvalidPacketRate  RejReason = 17
	RejInvalidAltGID      RejReason = 18
	RejPortCMRedirect     RejReason = 24
	RejPortRedirect       RejReason = 25
	RejInvalidMTU         RejReason = 26
	RejInsufficientRespRe RejReason = 27
	RejConsumerDefined    RejReason = 28
	RejInvalidRNRRetry    RejReason = 29
	RejDuplicateLocalComm RejReason = 30
	RejInvalidClassVer    RejReason = 31
	RejInvalidFlowLabel   RejReason = 32
	RejInvalidAltFlowLbl  RejReason = 33
	RejVendorOptionNotSup RejReason = 35
)

// String returns the reason as the kernel's ibcm_reject_msg prints it
// (without the IB_CM_REJ_ prefix), or its number.
func (r RejReason) String() string {
	names := map[RejReason]string{
		RejNoQP: "NO_QP", RejNoEEC: "NO_EEC", RejNoResources: "NO_RESOURCES", RejTimeout: "TIMEOUT",
		RejUnsupported: "UNSUPPORTED", RejInvalidCommID: "INVALID_COMM_ID",
		RejInvalidCommInstanc: "INVALID_COMM_INSTANCE", RejInvalidServiceID: "INVALID_SERVICE_ID",
		RejInvalidTransport: "INVALID_TRANSPORT_TYPE", RejStaleConn: "STALE_CONN",
		RejRDCNotExist: "RDC_NOT_EXIST", RejInvalidGID: "INVALID_GID", RejInvalidLID: "INVALID_LID",
		RejInvalidSL: "INVALID_SL", RejInvalidTrafficCls: "INVALID_TRAFFIC_CLASS",
		RejInvalidHopLimit: "INVALID_HOP_LIMIT", RejInvalidPacketRate: "INVALID_PACKET_RATE",
		RejInvalidAltGID: "INVALID_ALT_GID", RejPortCMRedirect: "PORT_CM_REDIRECT",
		RejPortRedirect: "PORT_REDIRECT", RejInvalidMTU: "INVALID_MTU",
		RejInsufficientRespRe: "INSUFFICIENT_RESP_RESOURCES", RejConsumerDefined: "CONSUMER_DEFINED",
		RejInvalidRNRRetry: "INVALID_RNR_RETRY", RejDuplicateLocalComm: "DUPLICATE_LOCAL_COMM_ID",
		RejInvalidClassVer: "INVALID_CLASS_VERSION", RejInvalidFlowLabel: "INVALID_FLOW_LABEL",
		RejInvalidAltFlowLbl: "INVALID_ALT_FLOW_LABEL", RejVendorOptionNotSup: "VENDOR_OPTION_NOT_SUPPORTED",
	}
	if n, ok := names[r]; ok {
		return n
	}
	return "RejReason(" + itoa(int(r)) + ")"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [8]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// REJ: ConnectReject, IBA vol. 1 §12.6.7.
//
//	 24 Local Communication ID, 28 Remote Communication ID
//	 32 Message REJected (2) | reserved (6)
//	 33 Reject Info Length (7) | reserved (1)
//	 34 Reason (16)
//	 36 Additional Reject Information (72)
//	108 PrivateData (148)
type REJ MAD

// REJFields holds the fields of a REJ.
type REJFields struct {
	LocalCommID, RemoteCommID uint32
	MessageREJected           uint8 // 2 bits: MsgREQ, MsgREP, MsgOther
	RejectInfoLength          uint8 // 7 bits
	Reason                    RejReason
	ARI                       []byte // up to 72 bytes
	PrivateData               []byte
}

// Reason returns the reject reason.
func (r REJ) Reason() RejReason { return RejReason(binary.BigEndian.Uint16(r[34:])) }

// Fields returns the REJ's fields.
func (r REJ) Fields() REJFields {
	return REJFields{LocalCommID: MAD(r).LocalCommID(), RemoteCommID: MAD(r).RemoteCommID(),
		MessageREJected: r[32] >> 6, RejectInfoLength: r[33] >> 1, Reason: r.Reason(),
		ARI: r[36:108], PrivateData: r[108:Size]}
}

// Encode writes f into the REJ's data.
func (r REJ) Encode(f *REJFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[28:], f.RemoteCommID)
	r[32] = f.MessageREJected << 6
	r[33] = f.RejectInfoLength << 1
	binary.BigEndian.PutUint16(r[34:], uint16(f.Reason))
	copy(r[36:108], f.ARI)
	copy(r[108:Size], f.PrivateData)
}

// REP: ConnectReply, IBA vol. 1 §12.6.8.
//
//	24 Local Communication ID, 28 Remote Communication ID
//	32 Local Q_Key
//	36 Local QPN (24) | reserved (8)
//	40 Local EE Context Number (24) | reserved (8)
//	44 Starting PSN (24) | reserved (8)
//	48 Responder Resources, 49 Initiator Depth
//	50 Target ACK Delay (5) | Failover Accepted (2) | End-to-End Flow Control (1)
//	51 RNR Retry Count (3) | SRQ (1) | reserved (4)
//	52 Local CA GUID (8)
//	60 PrivateData (196)
type REP MAD

// REPFields holds the fields of a REP.
type REPFields struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	EndToEndFlowControl       bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               []byte
}

// LocalQPN returns the Local QPN.
func (r REP) LocalQPN() uint32 { return get24(r[36:]) }

// StartingPSN returns the Starting PSN.
func (r REP) StartingPSN() uint32 { return get24(r[44:]) }

// Fields returns the REP's fields.
func (r REP) Fields() REPFields {
	return REPFields{LocalCommID: MAD(r).LocalCommID(), RemoteCommID: MAD(r).RemoteCommID(),
		LocalQKey: be32(r[32:]), LocalQPN: r.LocalQPN(), StartingPSN: r.StartingPSN(),
		ResponderResources: r[48], InitiatorDepth: r[49], TargetACKDelay: r[50] >> 3,
		FailoverAccepted: r[50] >> 1 & 3, EndToEndFlowControl: bit(r[50], 1), RNRRetryCount: r[51] >> 5,
		SRQ: bit(r[51], 0x10), LocalCAGUID: binary.BigEndian.Uint64(r[52:]), PrivateData: r[60:Size]}
}

// Encode writes f into the REP's data.
func (r REP) Encode(f *REPFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[28:], f.RemoteCommID)
	binary.BigEndian.PutUint32(r[32:], f.LocalQKey)
	put24(r[36:], f.LocalQPN)
	put24(r[44:], f.StartingPSN)
	r[48] = f.ResponderResources
	r[49] = f.InitiatorDepth
	r[50] = f.TargetACKDelay<<3 | f.FailoverAccepted&3<<1
	setBit(&r[50], 1, f.EndToEndFlowControl)
	r[51] = f.RNRRetryCount << 5
	setBit(&r[51], 0x10, f.SRQ)
	binary.BigEndian.PutUint64(r[52:], f.LocalCAGUID)
	copy(r[60:Size], f.PrivateData)
}

// CommIDs is the body of RTU and DREP (IBA §12.6.9, §12.6.11): the two
// communication IDs and private data (224 bytes from offset 32).
type CommIDs struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte
}

// RTU: ReadyToUse, IBA vol. 1 §12.6.9.
type RTU MAD

// Fields returns the RTU's fields.
func (r RTU) Fields() CommIDs { return commIDs(MAD(r)) }

// Encode writes f into the RTU's data.
func (r RTU) Encode(f *CommIDs) { encodeCommIDs(MAD(r), f) }

// DREP: DisconnectReply, IBA vol. 1 §12.6.11.
type DREP MAD

// Fields returns the DREP's fields.
func (r DREP) Fields() CommIDs { return commIDs(MAD(r)) }

// Encode writes f into the DREP's data.
func (r DREP) Encode(f *CommIDs) { encodeCommIDs(MAD(r), f) }

func commIDs(m MAD) CommIDs {
	return CommIDs{LocalCommID: m.LocalCommID(), RemoteCommID: m.RemoteCommID(), PrivateData: m[32:Size]}
}

func encodeCommIDs(m MAD, f *CommIDs) {
	clear(m[HeaderSize:Size])
	binary.BigEndian.PutUint32(m[24:], f.LocalCommID)
	binary.BigEndian.PutUint32(m[28:], f.RemoteCommID)
	copy(m[32:Size], f.PrivateData)
}

// DREQ: DisconnectRequest, IBA vol. 1 §12.6.10.
//
//	24 Local Communication ID, 28 Remote Communication ID
//	32 Remote QPN/EECN (24) | reserved (8)
//	36 PrivateData (220)
type DREQ MAD

// DREQFields holds the fields of a DREQ.
type DREQFields struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver's QPN
	PrivateData               []byte
}

// Fields returns the DREQ's fields.
func (r DREQ) Fields() DREQFields {
	return DREQFields{LocalCommID: MAD(r).LocalCommID(), RemoteCommID: MAD(r).RemoteCommID(),
		RemoteQPN: get24(r[32:]), PrivateData: r[36:Size]}
}

// Encode writes f into the DREQ's data.
func (r DREQ) Encode(f *DREQFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[28:], f.RemoteCommID)
	put24(r[32:], f.RemoteQPN)
	copy(r[36:Size], f.PrivateData)
}
