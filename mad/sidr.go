package mad

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// SIDR messages, IBA vol. 1 §12.11: service ID resolution, how a UD
// consumer learns the QPN and Q_Key behind a service ID (rdma_connect on
// an RDMA_PS_UDP or RDMA_PS_IPOIB id). Neither is retransmitted by the
// receiver nor acknowledged; the requester retries SIDR_REQ on its timer.

// Private data and additional-information sizes of the SIDR messages
// (IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, IB_CM_SIDR_REP_PRIVATE_DATA_SIZE,
// IB_CM_SIDR_REP_INFO_LENGTH).
const (
	SIDRREQPrivateDataSize = 216
	SIDRREPPrivateDataSize = 136
	SIDRREPInfoSize        = 72
)

// SIDRStatus is the status of a SIDR_REP, IBA vol. 1 Table 119 (enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0 // QPN and Q_Key valid
	SIDRUnsupported        SIDRStatus = 1 // no listener for the service ID (cm_sidr_req_handler)
	SIDRReject             SIDRStatus = 2 // the consumer rejected (rdma_reject, udaddy beyond -c)
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5 // rdma_cm header version not 0
)

// String returns the status as the kernel names it (IB_SIDR_*, without
// the prefix), or its number.
func (s SIDRStatus) String() string {
	switch s {
	case SIDRSuccess:
		return "SUCCESS"
	case SIDRUnsupported:
		return "UNSUPPORTED"
	case SIDRReject:
		return "REJECT"
	case SIDRNoQP:
		return "NO_QP"
	case SIDRRedirect:
		return "REDIRECT"
	case SIDRUnsupportedVersion:
		return "UNSUPPORTED_VERSION"
	}
	return "SIDRStatus(" + itoa(int(s)) + ")"
}

// SIDRREQ: ServiceIDResReq, IBA vol. 1 §12.11.1 (Table 118).
//
//	24 Request ID
//	28 Partition Key (16) | reserved (16)
//	32 ServiceID (8)
//	40 PrivateData (216): the rdma_cm header (36), then the consumer's 180
type SIDRREQ MAD

// SIDRREQFields holds the fields of a SIDR_REQ.
type SIDRREQFields struct {
	RequestID    uint32
	PartitionKey uint16
	ServiceID    uint64
	PrivateData  []byte
}

// RequestID returns the Request ID (the sender's local ID; the
// SIDR_REP carries it back).
func (r SIDRREQ) RequestID() uint32 { return be32(r[24:]) }

// ServiceID returns the ServiceID.
func (r SIDRREQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[32:]) }

// PrivateData returns the 216 bytes of private data.
func (r SIDRREQ) PrivateData() []byte { return r[40:Size] }

// Fields returns the SIDR_REQ's fields.
func (r SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{RequestID: r.RequestID(), PartitionKey: binary.BigEndian.Uint16(r[28:]),
		ServiceID: r.ServiceID(), PrivateData: r.PrivateData()}
}

// Encode writes f into the SIDR_REQ's data (reserved bytes zeroed,
// private data cut at SIDRREQPrivateDataSize and zero-filled).
func (r SIDRREQ) Encode(f *SIDRREQFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.RequestID)
	binary.BigEndian.PutUint16(r[28:], f.PartitionKey)
	binary.BigEndian.PutUint64(r[32:], f.ServiceID)
	copy(r[40:Size], f.PrivateData)
}

// SIDRREP: ServiceIDResReqResp, IBA vol. 1 §12.11.2 (Table 119).
//
//	 24 Request ID
//	 28 Status (8) | Additional Information Length (8) | reserved (16)
//	 32 QPN (24) | reserved (8)
//	 36 ServiceID (8)
//	 44 Q_Key
//	 48 Class Port Info / Additional Information (72)
//	120 PrivateData (136)
type SIDRREP MAD

// SIDRREPFields holds the fields of a SIDR_REP.
type SIDRREPFields struct {
	RequestID   uint32
	Status      SIDRStatus
	InfoLength  uint8
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        []byte // up to SIDRREPInfoSize
	PrivateData []byte
}

// RequestID returns the Request ID of the SIDR_REQ answered.
func (r SIDRREP) RequestID() uint32 { return be32(r[24:]) }

// Status returns the status.
func (r SIDRREP) Status() SIDRStatus { return SIDRStatus(r[28]) }

// QPN returns the QPN (valid with SIDRSuccess).
func (r SIDRREP) QPN() uint32 { return get24(r[32:]) }

// QKey returns the Q_Key (valid with SIDRSuccess).
func (r SIDRREP) QKey() uint32 { return be32(r[44:]) }

// Fields returns the SIDR_REP's fields.
func (r SIDRREP) Fields() SIDRREPFields {
	return SIDRREPFields{RequestID: r.RequestID(), Status: r.Status(), InfoLength: r[29], QPN: r.QPN(),
		ServiceID: binary.BigEndian.Uint64(r[36:]), QKey: r.QKey(), Info: r[48:120], PrivateData: r[120:Size]}
}

// Encode writes f into the SIDR_REP's data.
func (r SIDRREP) Encode(f *SIDRREPFields) {
	clear(r[HeaderSize:Size])
	binary.BigEndian.PutUint32(r[24:], f.RequestID)
	r[28] = uint8(f.Status)
	r[29] = f.InfoLength
	put24(r[32:], f.QPN)
	binary.BigEndian.PutUint64(r[36:], f.ServiceID)
	binary.BigEndian.PutUint32(r[44:], f.QKey)
	copy(r[48:120], f.Info)
	copy(r[120:Size], f.PrivateData)
}

// Check reports whether the kernel's ib_send_cm_sidr_rep would send f:
// additional information beyond SIDRREPInfoSize or private data beyond
// SIDRREPPrivateDataSize is EINVAL.
func (f *SIDRREPFields) Check() error {
	if len(f.Info) > SIDRREPInfoSize || int(f.InfoLength) > SIDRREPInfoSize {
		return fmt.Errorf("mad: SIDR_REP info of %d bytes, at most %d: %w", max(len(f.Info), int(f.InfoLength)), SIDRREPInfoSize, unix.EINVAL)
	}
	if len(f.PrivateData) > SIDRREPPrivateDataSize {
		return fmt.Errorf("mad: SIDR_REP private data of %d bytes, at most %d: %w", len(f.PrivateData), SIDRREPPrivateDataSize, unix.EINVAL)
	}
	return nil
}
