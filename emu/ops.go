package emu

import (
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
	"github.com/softroce/softroce/qpstate"
)

// DeviceOps is the Go counterpart of struct ib_device_ops: what a driver
// implements. The core (this package) validates arguments, keeps reference
// counts and calls these; each method sees objects the core has already
// checked. A driver registers itself, stores its own state in each object
// and sets the objects' numbers and keys through package
// emu/internal/driver, which only packages under emu can import: users
// never call these methods, they call the objects' (PD.CreateQP, QP.Modify
// ...), which check their arguments first.
//
// Ops the kernel lets a driver leave NULL are separate optional interfaces
// (SRQModifier, CQResizer, CQModerator, MRReregisterer, MRStatusChecker, AHModifier, McastAttacher,
// GIDAdder, XRCDAllocator, RDMANetdevAllocator, HWStatsProvider,
// MADProcessor, MADLayerTaker): the core answers EOPNOTSUPP where the kernel does for a
// NULL op.
type DeviceOps interface {
	// QueryDevice returns the device's attributes (query_device).
	QueryDevice() DeviceAttr
	// QueryPort returns a port's attributes (query_port).
	QueryPort(port uint32) (PortAttr, error)
	// PortImmutable returns a port's fixed properties (get_port_immutable).
	PortImmutable(port uint32) (PortImmutable, error)
	// QueryPKey returns the P_Key at index of a port's table (query_pkey).
	QueryPKey(port uint32, index uint16) (uint16, error)

	// AllocPD sets up a protection domain (alloc_pd).
	AllocPD(pd *PD) error
	// DeallocPD releases a protection domain (dealloc_pd).
	DeallocPD(pd *PD) error

	// CreateCQ sets up a completion queue (create_cq).
	CreateCQ(cq *CQ, attr *CQInitAttr) error
	// DestroyCQ releases a completion queue (destroy_cq).
	DestroyCQ(cq *CQ) error
	// PollCQ moves up to len(wc) completions into wc and returns how many (poll_cq; CQ.Poll).
	PollCQ(cq *CQ, wc []WC) int
	// ReqNotifyCQ arms the CQ's completion handler (req_notify_cq; CQ.ReqNotify).
	ReqNotifyCQ(cq *CQ, flags CQNotifyFlags) int

	// CreateSRQ sets up a shared receive queue (create_srq).
	CreateSRQ(srq *SRQ, attr *SRQInitAttr, udata *UData) error
	// DestroySRQ releases a shared receive queue (destroy_srq).
	DestroySRQ(srq *SRQ) error
	// PostSRQRecv posts receive WRs to an SRQ (post_srq_recv); on failure bad is
	// the index of the failing WR.
	PostSRQRecv(srq *SRQ, wrs []RecvWR) (bad int, err error)

	// CreateQP sets up a queue pair (create_qp).
	CreateQP(qp *QP, attr *QPInitAttr, udata *UData) error
	// ModifyQP validates (qpstate.Policy.Validate, with qp.Port as the
	// port the core recorded) and applies a modify, all or nothing, and
	// returns the QP's port afterwards (0 if none was set).
	ModifyQP(qp *QP, attr *qpstate.Attr, mask qpstate.AttrMask, udata *UData) (port uint32, err error)
	// QueryQP returns the QP's attributes and creation attributes (query_qp; QP.Query).
	QueryQP(qp *QP, mask qpstate.AttrMask) (qpstate.Attr, QPInitAttr, error)
	// DestroyQP releases a queue pair (destroy_qp).
	DestroyQP(qp *QP) error
	// PostSend posts send WRs (post_send); on failure bad is the index of the
	// failing WR (QP.PostSend).
	PostSend(qp *QP, wrs []SendWR) (bad int, err error)
	// PostRecv posts receive WRs (post_recv), with PostSend's failure rule.
	PostRecv(qp *QP, wrs []RecvWR) (bad int, err error)

	// CreateAH sets up an address handle (create_ah).
	CreateAH(ah *AH, attr *ib.AHAttr, udata *UData) error
	// DestroyAH releases an address handle (destroy_ah).
	DestroyAH(ah *AH) error

	// GetDMAMR sets up an MR over all of memory (get_dma_mr).
	GetDMAMR(mr *MR, access ib.AccessFlags) error
	// RegUserMR registers a user memory region (reg_user_mr).
	RegUserMR(mr *MR, start, length, iova uint64, access ib.AccessFlags) error
	// AllocMR sets up an MR of type t for up to maxNumSG pages (alloc_mr).
	AllocMR(mr *MR, t MRType, maxNumSG int) error
	// MapMRSG maps a scatterlist into a fast-registration MR and returns how
	// many entries it mapped (map_mr_sg; MR.MapSG).
	MapMRSG(mr *MR, sg []dma.Scatterlist, pageSize int) (int, error)
	// DeregMR releases a memory region (dereg_mr).
	DeregMR(mr *MR) error

	// AllocMW sets up a memory window (alloc_mw).
	AllocMW(mw *MW) error
	// DeallocMW releases a memory window (dealloc_mw).
	DeallocMW(mw *MW) error
}

// SRQModifier is the optional modify_srq/query_srq pair.
type SRQModifier interface {
	// ModifySRQ changes the SRQ attributes in mask (modify_srq).
	ModifySRQ(srq *SRQ, attr *SRQAttr, mask SRQAttrMask) error
	// QuerySRQ returns the SRQ's attributes (query_srq).
	QuerySRQ(srq *SRQ) (SRQAttr, error)
}

// CQResizer is the optional resize_cq op.
type CQResizer interface {
	// ResizeCQ changes the CQ's capacity to at least cqe entries, keeping
	// the completions it holds, and sets CQ.CQE (resize_cq).
	ResizeCQ(cq *CQ, cqe int) error
}

// MRReregisterer is the optional rereg_user_mr op.
type MRReregisterer interface {
	// ReregUserMR changes a user MR in place (rereg_user_mr): the range
	// (start, length, iova) with MRReregTrans, the PD with MRReregPD, the
	// access with MRReregAccess. The core has checked the flags and the
	// access and updates MR.PD, the PDs' use counts, MR.Access and, for a
	// new range, MR.IOVA and MR.Length after it succeeds.
	ReregUserMR(mr *MR, flags MRReregFlags, start, length, iova uint64, access ib.AccessFlags, pd *PD) error
}

// CQModerator is the optional modify_cq op (rdma_set_cq_moderation).
type CQModerator interface {
	// ModifyCQ sets the CQ's moderation count and period (modify_cq).
	ModifyCQ(cq *CQ, count, period uint16) error
}

// MRStatusChecker is the optional check_mr_status op.
type MRStatusChecker interface {
	// CheckMRStatus reports the MR's signature status (check_mr_status).
	CheckMRStatus(mr *MR, check uint32) (MRStatus, error)
}

// AHModifier is the optional modify_ah/query_ah pair.
type AHModifier interface {
	// ModifyAH changes an address handle (modify_ah).
	ModifyAH(ah *AH, attr *ib.AHAttr) error
	// QueryAH returns an address handle's attributes (query_ah).
	QueryAH(ah *AH) (ib.AHAttr, error)
}

// McastAttacher is the optional attach_mcast/detach_mcast pair.
type McastAttacher interface {
	// AttachMcast attaches the QP to a multicast group (attach_mcast).
	AttachMcast(qp *QP, gid GID, lid uint16) error
	// DetachMcast detaches the QP from a multicast group (detach_mcast).
	DetachMcast(qp *QP, gid GID, lid uint16) error
}

// XRCDAllocator is the optional alloc_xrcd op; rxe has none.
type XRCDAllocator interface {
	// AllocXRCD sets up an XRC domain (alloc_xrcd).
	AllocXRCD(x *XRCD) error
}

// HWStatsProvider is the optional alloc_hw_port_stats/get_hw_stats pair.
type HWStatsProvider interface {
	// StatDescs returns the port counter descriptors.
	StatDescs(port uint32) []StatDesc
	// HWStats fills values (one per descriptor) and returns how many it
	// filled.
	HWStats(port uint32, values []uint64) int
}

// MADProcessor is the optional process_mad op: a MAD that port received
// on its GSI QP, answered by the driver itself before the MAD layer's
// agents see it (rxe answers the performance management class from Linux
// 7.2).
type MADProcessor interface {
	// ProcessMAD returns the reply to in and true, or false where the
	// driver leaves in to the MAD layer.
	ProcessMAD(port uint32, in mad.MAD) (mad.MAD, bool)
}

// MADLayerTaker is the optional op of a driver that keeps its GSI QP for
// the kernel's MAD layer (rxe reserves QP number 1 for it, as ib_mad holds
// it on a running kernel) and can hand it to a consumer that plays that
// layer (Device.TakeMADLayer).
type MADLayerTaker interface {
	// TakeMADLayer hands the reserved GSI QP to the next GSI QP created.
	TakeMADLayer() error
}
