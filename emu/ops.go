package emu

import (
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/qpstate"
)

// DeviceOps is the Go counterpart of struct ib_device_ops: what a driver
// implements. The core (this package) validates arguments, keeps reference
// counts and calls these; each method sees objects the core has already
// checked. A driver stores its own state in each object's Priv field.
//
// Ops the kernel lets a driver leave NULL are separate optional interfaces
// (SRQModifier, CQModerator, MRStatusChecker, AHModifier, McastAttacher,
// GIDAdder, XRCDAllocator, RDMANetdevAllocator, HWStatsProvider): the core
// answers EOPNOTSUPP where the kernel does for a NULL op.
type DeviceOps interface {
	QueryDevice() DeviceAttr
	QueryPort(port uint32) (PortAttr, error)
	PortImmutable(port uint32) (PortImmutable, error)
	QueryPKey(port uint32, index uint16) (uint16, error)

	AllocPD(pd *PD) error
	DeallocPD(pd *PD) error

	CreateCQ(cq *CQ, attr *CQInitAttr) error
	DestroyCQ(cq *CQ) error
	PollCQ(cq *CQ, wc []WC) int
	ReqNotifyCQ(cq *CQ, flags CQNotifyFlags) int

	CreateSRQ(srq *SRQ, attr *SRQInitAttr, udata *UData) error
	DestroySRQ(srq *SRQ) error
	PostSRQRecv(srq *SRQ, wrs []RecvWR) (bad int, err error)

	CreateQP(qp *QP, attr *QPInitAttr, udata *UData) error
	// ModifyQP validates (qpstate.Policy.Validate, with qp.Port as the
	// port the core recorded) and applies a modify, all or nothing, and
	// returns the QP's port afterwards (0 if none was set).
	ModifyQP(qp *QP, attr *qpstate.Attr, mask qpstate.AttrMask, udata *UData) (port uint32, err error)
	QueryQP(qp *QP, mask qpstate.AttrMask) (qpstate.Attr, QPInitAttr, error)
	DestroyQP(qp *QP) error
	PostSend(qp *QP, wrs []SendWR) (bad int, err error)
	PostRecv(qp *QP, wrs []RecvWR) (bad int, err error)

	CreateAH(ah *AH, attr *qpstate.AHAttr, udata *UData) error
	DestroyAH(ah *AH) error

	GetDMAMR(mr *MR, access qpstate.AccessFlags) error
	RegUserMR(mr *MR, start, length, iova uint64, access qpstate.AccessFlags) error
	AllocMR(mr *MR, t MRType, maxNumSG int) error
	MapMRSG(mr *MR, sg []dma.Scatterlist, pageSize int) (int, error)
	DeregMR(mr *MR) error

	AllocMW(mw *MW) error
	DeallocMW(mw *MW) error
}

// SRQModifier is the optional modify_srq/query_srq pair.
type SRQModifier interface {
	ModifySRQ(srq *SRQ, attr *SRQAttr, mask SRQAttrMask) error
	QuerySRQ(srq *SRQ) (SRQAttr, error)
}

// CQModerator is the optional modify_cq op (rdma_set_cq_moderation).
type CQModerator interface {
	ModifyCQ(cq *CQ, count, period uint16) error
}

// MRStatusChecker is the optional check_mr_status op.
type MRStatusChecker interface {
	CheckMRStatus(mr *MR, check uint32) (MRStatus, error)
}

// AHModifier is the optional modify_ah/query_ah pair.
type AHModifier interface {
	ModifyAH(ah *AH, attr *qpstate.AHAttr) error
	QueryAH(ah *AH) (qpstate.AHAttr, error)
}

// McastAttacher is the optional attach_mcast/detach_mcast pair.
type McastAttacher interface {
	AttachMcast(qp *QP, gid GID, lid uint16) error
	DetachMcast(qp *QP, gid GID, lid uint16) error
}

// XRCDAllocator is the optional alloc_xrcd op; rxe has none.
type XRCDAllocator interface {
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
