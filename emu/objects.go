package emu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// UData is struct ib_udata: the driver-specific input and output buffers
// of a userspace verb. A nil *UData means a kernel caller.
type UData struct {
	// In is the command's driver input.
	In []byte
	// Out receives the driver's response; its length is the space the
	// caller provided.
	Out []byte
	// OutLen is how many bytes the driver wrote to Out.
	OutLen int
	// Privileged marks a caller allowed to set privileged Q_Keys (the
	// uverbs CAP_NET_RAW / privileged_qkey check).
	Privileged bool
	// Extended marks the extended uverbs command (MODIFY_QP_EX), which
	// lets IB_QP_RATE_LIMIT through to the driver.
	Extended bool
}

// CopyFrom copies len(dst) bytes of input into dst (ib_copy_from_udata);
// a shorter input fails with EFAULT.
func (u *UData) CopyFrom(dst []byte) error {
	if len(u.In) < len(dst) {
		return errorf(unix.EFAULT, "udata: %d input bytes, need %d", len(u.In), len(dst))
	}
	copy(dst, u.In)
	return nil
}

// CopyTo writes src to the output (ib_copy_to_udata); too little room
// fails with EFAULT.
func (u *UData) CopyTo(src []byte) error {
	if len(u.Out) < len(src) {
		return errorf(unix.EFAULT, "udata: %d output bytes, need %d", len(u.Out), len(src))
	}
	u.OutLen = copy(u.Out, src)
	return nil
}

// usecnt is an object's use count (atomic_t usecnt).
type usecnt struct{ n atomic.Int32 }

func (u *usecnt) inc()       { u.n.Add(1) }
func (u *usecnt) dec()       { u.n.Add(-1) }
func (u *usecnt) busy() bool { return u.n.Load() > 0 }

// PDFlags is enum ib_pd_flags.
type PDFlags uint32

// PDUnsafeGlobalRKey is IB_PD_UNSAFE_GLOBAL_RKEY.
const PDUnsafeGlobalRKey PDFlags = 1

// PD is struct ib_pd, a protection domain.
type PD struct {
	Device *Device // the device that owns the PD
	// LocalDMALKey is the lkey of the PD's internal DMA MR: rxe does not
	// advertise a device-wide local DMA lkey, so the core makes one.
	LocalDMALKey uint32
	// UnsafeGlobalRKey is that MR's rkey with PDUnsafeGlobalRKey, else 0.
	UnsafeGlobalRKey uint32
	// Space is the address space the PD's user MRs lie in: the pages of
	// the process that registers them (ib_umem over the owner's mm). Nil
	// means the device's Memory; a uverbs file sets its client's.
	Space dma.Space

	priv     any // the driver's state
	use      usecnt
	internal *MR
}

// AllocPD allocates a protection domain (ib_alloc_pd) and, because the
// device has no local DMA lkey, its internal DMA MR with LOCAL_WRITE (and
// REMOTE_READ|REMOTE_WRITE with PDUnsafeGlobalRKey).
func (d *Device) AllocPD(flags PDFlags) (*PD, error) {
	pd := &PD{Device: d}
	if err := d.ops.AllocPD(pd); err != nil {
		return nil, err
	}
	access := ib.AccessLocalWrite
	if flags&PDUnsafeGlobalRKey != 0 {
		access |= ib.AccessRemoteRead | ib.AccessRemoteWrite
	}
	mr := &MR{Device: d, PD: pd, Type: MRTypeDMA, Access: access}
	if err := d.ops.GetDMAMR(mr, access); err != nil {
		d.ops.DeallocPD(pd)
		return nil, err
	}
	pd.internal = mr
	pd.LocalDMALKey = mr.lkey
	if flags&PDUnsafeGlobalRKey != 0 {
		pd.UnsafeGlobalRKey = mr.rkey
	}
	return pd, nil
}

// AllocUserPD allocates a protection domain for a userspace caller
// (ib_uverbs_alloc_pd): the driver's alloc_pd alone, with no internal DMA
// MR (a user has no local DMA lkey; one would reach the device's own
// memory). Its user MRs lie in space (PD.Space).
func (d *Device) AllocUserPD(space dma.Space) (*PD, error) {
	pd := &PD{Device: d, Space: space}
	if err := d.ops.AllocPD(pd); err != nil {
		return nil, err
	}
	return pd, nil
}

// Dealloc frees the PD (ib_dealloc_pd). Objects still created on it make
// it fail with EBUSY: the kernel only warns for a kernel caller, the
// emulator refuses rather than leave dangling objects.
func (pd *PD) Dealloc() error { return pd.DeallocUser(nil) }

// DeallocUser frees the PD for a userspace caller (ib_dealloc_pd_user):
// EBUSY while objects use it.
func (pd *PD) DeallocUser(udata *UData) error {
	if pd.use.busy() {
		return errorf(unix.EBUSY, "dealloc PD: %d objects still use it", pd.use.n.Load())
	}
	if pd.internal != nil {
		if err := pd.Device.ops.DeregMR(pd.internal); err != nil {
			return err
		}
		pd.internal = nil
	}
	return pd.Device.ops.DeallocPD(pd)
}

// SGE is struct ib_sge: one scatter/gather element.
type SGE struct {
	Addr   uint64 // start address, in the lkey's MR address space (ib_sge.addr)
	Length uint32 // length in bytes (ib_sge.length)
	LKey   uint32 // local key of the MR holding the buffer (ib_sge.lkey)
}

// SendWR is struct ib_send_wr with its per-opcode extensions (rdma, atomic,
// ud, reg, bind) flattened.
type SendWR struct {
	WRID           uint64    // caller's cookie, returned in WC.WRID (wr_id)
	Opcode         WROpcode  // IB_WR_* operation (opcode)
	SendFlags      SendFlags // IB_SEND_* flags: fence, signaled, solicited, inline (send_flags)
	SGList         []SGE     // local gather list (sg_list, num_sge)
	ImmData        uint32    // big-endian as on the wire, like __be32 ex.imm_data
	InvalidateRKey uint32    // rkey the peer invalidates, for SEND_WITH_INV; key for LOCAL_INV (ex.invalidate_rkey)

	// RDMA and atomic operations.
	RemoteAddr uint64 // remote virtual address (rdma_wr/atomic_wr.remote_addr)
	RKey       uint32 // remote key of the target MR or MW (rdma_wr/atomic_wr.rkey)
	CompareAdd uint64 // compare value of CMP_AND_SWP, addend of FETCH_AND_ADD (atomic_wr.compare_add)
	Swap       uint64 // swap value of CMP_AND_SWP (atomic_wr.swap)

	// UD.
	AH         *AH    // destination address handle (ud_wr.ah)
	RemoteQPN  uint32 // destination QP number (ud_wr.remote_qpn)
	RemoteQKey uint32 // Q_Key sent in the DETH (ud_wr.remote_qkey)

	// REG_MR (struct ib_reg_wr): MR, the new Key and Access.
	MR     *MR            // MR to register (ib_reg_wr.mr)
	Key    uint32         // new lkey/rkey of the MR (ib_reg_wr.key), or new rkey of the MW
	Access ib.AccessFlags // IB_ACCESS_* rights of the registration (ib_reg_wr.access)

	// BIND_MW (struct ib_bind_mw_wr): MW, its new RKey in Key, and Bind.
	MW   *MW    // MW to bind
	Bind MWBind // the MR range and rights the MW is bound to (bind_info)
}

// MWBind is struct ib_mw_bind_info.
type MWBind struct {
	MR     *MR            // MR the window is bound into (mr)
	Addr   uint64         // start of the window, in the MR's address space (addr)
	Length uint64         // window length in bytes (length)
	Access ib.AccessFlags // IB_ACCESS_REMOTE_* rights of the window (mw_access_flags)
}

// RecvWR is struct ib_recv_wr.
type RecvWR struct {
	WRID   uint64 // caller's cookie, returned in WC.WRID (wr_id)
	SGList []SGE  // scatter list for the incoming data (sg_list, num_sge)
}

// WC is struct ib_wc, a work completion.
type WC struct {
	WRID           uint64      // wr_id of the completed work request
	Status         WCStatus    // IB_WC_* completion status
	Opcode         WCOpcode    // IB_WC_* opcode; receives have IB_WC_RECV (1<<7) set
	VendorErr      uint32      // driver-specific error detail (vendor_err); 0 from rxe
	ByteLen        uint32      // bytes received, or sent on a successful send completion (byte_len)
	QP             *QP         // the QP the work request was posted to
	ImmData        uint32      // immediate data, valid with WCWithImm; byte order as SendWR.ImmData (ex.imm_data)
	InvalidateRKey uint32      // rkey the peer invalidated, valid with WCWithInvalidate (ex.invalidate_rkey)
	SrcQP          uint32      // sender's QP number (UD receives, from the DETH)
	WCFlags        WCFlags     // IB_WC_* flags saying which optional fields are valid (wc_flags)
	PKeyIndex      uint16      // P_Key index (GSI receives only)
	SLID           uint32      // source LID (IB only; 0 on RoCE)
	SL             uint8       // service level of the received packet
	DLIDPathBits   uint8       // destination LID path bits (IB only)
	PortNum        uint32      // port number (port_num): kernel sets it only for DR SMPs on switches, rxe always 1
	SMAC           [6]byte     // source MAC, valid with WCWithSMAC
	VLANID         uint16      // VLAN ID, valid with WCWithVLAN
	NetworkHdrType NetworkType // RDMA_NETWORK_* of the received packet, valid with WCWithNetworkHdrType
}

// CQInitAttr is struct ib_cq_init_attr plus the handlers ib_create_cq
// takes.
type CQInitAttr struct {
	CQE        int    // minimum number of entries requested (cqe)
	CompVector int    // completion vector (interrupt) index, below NumCompVectors (comp_vector)
	Flags      uint32 // IB_UVERBS_CQ_FLAGS_* (flags); rxe accepts none
	// CompHandler is called (outside driver locks) when a completion
	// arrives on an armed CQ.
	CompHandler func(*CQ)
	// EventHandler receives the CQ's async events (IB_EVENT_CQ_ERR).
	EventHandler func(Event)
	// Ring, if set, receives every completion in place of the CQ's own
	// queue: a userspace CQ whose entries live in memory the consumer maps,
	// as rxe's user CQs do. It returns false when the ring is full (the CQ
	// overflows). The driver calls it under its lock: it must not call
	// back into the device.
	Ring func(wc WC) bool
	// RingResize, with Ring, moves a userspace CQ to a ring of n entries
	// when the CQ is resized to cqe (rxe_cq_resize_queue: a new ring the
	// consumer maps, the completions it has not polled copied over in
	// order). It fails with EINVAL when the ring holds more than cqe
	// completions, and changes nothing when it fails. The driver calls it
	// under its lock: it must not call back into the device. Without it a
	// userspace CQ cannot be resized (EOPNOTSUPP).
	RingResize func(cqe, n int) error
}

// PollContext is enum ib_poll_context.
type PollContext int

// Poll contexts. The emulator supports PollDirect: the consumer polls.
const (
	PollDirect    PollContext = 0 // IB_POLL_DIRECT
	PollSoftIRQ   PollContext = 1 // IB_POLL_SOFTIRQ
	PollWorkqueue PollContext = 2 // IB_POLL_WORKQUEUE
)

// CQ is struct ib_cq, a completion queue.
type CQ struct {
	Device *Device // the device that owns the CQ
	// CQE is the actual capacity (may exceed the request).
	CQE          int
	CompHandler  func(*CQ)   // called when a completion arrives on an armed CQ (comp_handler)
	EventHandler func(Event) // receives IB_EVENT_CQ_ERR (event_handler)
	priv         any         // the driver's state
	use          usecnt
}

// CreateCQ creates a completion queue (ib_create_cq / __ib_create_cq).
func (d *Device) CreateCQ(attr CQInitAttr) (*CQ, error) {
	cq := &CQ{Device: d, CompHandler: attr.CompHandler, EventHandler: attr.EventHandler}
	if err := d.ops.CreateCQ(cq, &attr); err != nil {
		return nil, err
	}
	return cq, nil
}

// AllocCQAny creates a CQ of at least nrCQE entries on any completion
// vector (ib_alloc_cq_any). Only PollDirect is supported: other contexts
// fail with EOPNOTSUPP (the emulator runs no softirq or workqueue).
func (d *Device) AllocCQAny(nrCQE int, ctx PollContext) (*CQ, error) {
	if ctx != PollDirect {
		return nil, errorf(unix.EOPNOTSUPP, "alloc CQ: poll context %d: only IB_POLL_DIRECT is emulated", ctx)
	}
	return d.CreateCQ(CQInitAttr{CQE: nrCQE})
}

// Poll moves up to len(wc) completions into wc and returns how many
// (ib_poll_cq); it never fails.
func (cq *CQ) Poll(wc []WC) int { return cq.Device.ops.PollCQ(cq, wc) }

// ReqNotify arms the CQ (ib_req_notify_cq): CQSolicited and/or CQNextComp,
// optionally with CQReportMissedEvents, when it returns 1 if completions
// are already waiting.
func (cq *CQ) ReqNotify(flags CQNotifyFlags) int { return cq.Device.ops.ReqNotifyCQ(cq, flags) }

// SetModeration sets the interrupt moderation (rdma_set_cq_moderation);
// a driver without modify_cq (rxe) gives EOPNOTSUPP.
func (cq *CQ) SetModeration(count, period uint16) error {
	m, ok := cq.Device.ops.(CQModerator)
	if !ok {
		return errorf(unix.EOPNOTSUPP, "set CQ moderation: driver has no modify_cq")
	}
	return m.ModifyCQ(cq, count, period)
}

// Resize changes the CQ's capacity to at least cqe entries, keeping the
// completions it holds in order, and updates CQE (ib_resize_cq). A driver
// without resize_cq gives EOPNOTSUPP.
func (cq *CQ) Resize(cqe int) error {
	r, ok := cq.Device.ops.(CQResizer)
	if !ok {
		return errorf(unix.EOPNOTSUPP, "resize CQ: driver has no resize_cq")
	}
	return r.ResizeCQ(cq, cqe)
}

// Destroy destroys the CQ (ib_destroy_cq); EBUSY while a QP or SRQ uses it.
func (cq *CQ) Destroy() error { return cq.DestroyUser(nil) }

// DestroyUser destroys the CQ for a caller with udata (ib_destroy_cq_user).
func (cq *CQ) DestroyUser(udata *UData) error {
	if cq.use.busy() {
		return errorf(unix.EBUSY, "destroy CQ: used by %d QPs", cq.use.n.Load())
	}
	return cq.Device.ops.DestroyCQ(cq)
}

// SRQAttr is struct ib_srq_attr.
type SRQAttr struct {
	MaxWR    uint32 // receive WRs the SRQ can hold (max_wr)
	MaxSGE   uint32 // scatter entries per receive WR (max_sge)
	SRQLimit uint32 // low watermark: IB_EVENT_SRQ_LIMIT_REACHED fires when fewer WRs remain; 0 = unarmed (srq_limit)
}

// SRQInitAttr is struct ib_srq_init_attr.
type SRQInitAttr struct {
	Attr         SRQAttr     // requested size and limit (attr)
	Type         SRQType     // IB_SRQT_BASIC or IB_SRQT_XRC (srq_type)
	EventHandler func(Event) // receives the SRQ's async events (event_handler)
	// RecvRing, if set, is where the responder takes receive WRs from when
	// the SRQ's own queue is empty: a userspace queue the consumer posts to
	// without a doorbell, as librxe does. It moves the oldest WR into wr
	// and reports whether there was one. The driver calls it under its
	// lock: it must not call back into the device.
	RecvRing func(wr *RecvWR) bool
	// RecvRingResize, with RecvRing, moves a userspace SRQ to a ring of
	// maxWR entries when a modify resizes it (rxe_srq_from_attr: a new ring
	// the consumer maps, the WRs it posted and the responder has not taken
	// copied over in order). The driver may already hold WRs it took from
	// the ring; room is what is left of maxWR for the ring's. It fails with
	// EINVAL when the ring holds more than room WRs, and changes nothing
	// when it fails. The driver calls it under its lock: it must not call
	// back into the device. Without it a userspace SRQ cannot be resized
	// (EOPNOTSUPP).
	RecvRingResize func(maxWR, room uint32) error
}

// SRQ is struct ib_srq, a shared receive queue.
type SRQ struct {
	Device       *Device     // the device that owns the SRQ
	PD           *PD         // the SRQ's protection domain
	Type         SRQType     // IB_SRQT_* (srq_type)
	EventHandler func(Event) // receives IB_EVENT_SRQ_LIMIT_REACHED and IB_EVENT_SRQ_ERR (event_handler)
	priv         any         // the driver's state
	use          usecnt
}

// CreateSRQ creates an SRQ (ib_create_srq); attr.Attr.MaxWR is updated to
// the actual capacity.
func (pd *PD) CreateSRQ(attr *SRQInitAttr) (*SRQ, error) {
	s := &SRQ{Device: pd.Device, PD: pd, Type: attr.Type, EventHandler: attr.EventHandler}
	if err := pd.Device.ops.CreateSRQ(s, attr, nil); err != nil {
		return nil, err
	}
	pd.use.inc()
	return s, nil
}

// Modify changes MaxWR (resize) and/or SRQLimit (arm the limit event)
// (ib_modify_srq); a driver without the op gives EOPNOTSUPP.
func (s *SRQ) Modify(attr *SRQAttr, mask SRQAttrMask) error {
	m, ok := s.Device.ops.(SRQModifier)
	if !ok {
		return errorf(unix.EOPNOTSUPP, "modify SRQ: driver has no modify_srq")
	}
	return m.ModifySRQ(s, attr, mask)
}

// Query returns the SRQ's attributes (ib_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	m, ok := s.Device.ops.(SRQModifier)
	if !ok {
		return SRQAttr{}, errorf(unix.EOPNOTSUPP, "query SRQ: driver has no query_srq")
	}
	return m.QuerySRQ(s)
}

// PostRecv posts receive WRs (ib_post_srq_recv); on failure bad is the
// index of the failing WR and the earlier ones stay posted.
func (s *SRQ) PostRecv(wrs []RecvWR) (bad int, err error) {
	return s.Device.ops.PostSRQRecv(s, wrs)
}

// Destroy destroys the SRQ (ib_destroy_srq); EBUSY while QPs use it.
func (s *SRQ) Destroy() error { return s.DestroyUser(nil) }

// DestroyUser destroys the SRQ for a caller with udata
// (ib_destroy_srq_user).
func (s *SRQ) DestroyUser(udata *UData) error {
	if s.use.busy() {
		return errorf(unix.EBUSY, "destroy SRQ: used by %d QPs", s.use.n.Load())
	}
	if err := s.Device.ops.DestroySRQ(s); err != nil {
		return err
	}
	s.PD.use.dec()
	return nil
}

// MR is struct ib_mr, a memory region.
type MR struct {
	Device *Device        // the device that owns the MR
	PD     *PD            // the MR's protection domain
	Type   MRType         // IB_MR_TYPE_* (type)
	IOVA   uint64         // first I/O virtual address of the region (iova)
	Length uint64         // region length in bytes (length)
	Access ib.AccessFlags // IB_ACCESS_* rights granted at registration
	// PageSize is set by MapSG for fast-registration MRs.
	PageSize int

	lkey, rkey uint32 // set by the driver
	priv       any    // the driver's state
}

// LKey returns the MR's local key, the one SGEs name (ib_mr.lkey).
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the MR's remote key, the one a peer names in a RETH or
// AtomicETH (ib_mr.rkey).
func (mr *MR) RKey() uint32 { return mr.rkey }

// GetDMAMR returns an MR covering all memory (ib_get_dma_mr; the core's
// internal MR of each PD).
func (pd *PD) GetDMAMR(access ib.AccessFlags) (*MR, error) {
	mr := &MR{Device: pd.Device, PD: pd, Type: MRTypeDMA, Access: access}
	if err := pd.Device.ops.GetDMAMR(mr, access); err != nil {
		return nil, err
	}
	pd.use.inc()
	return mr, nil
}

// CheckMRAccess applies the core's access rules (ib_check_mr_access):
// REMOTE_WRITE or REMOTE_ATOMIC need LOCAL_WRITE (EINVAL); unknown bits
// EINVAL; ON_DEMAND without ODP and FLUSH_* without the device cap
// EOPNOTSUPP.
func (d *Device) CheckMRAccess(access ib.AccessFlags) error {
	if access&(ib.AccessRemoteWrite|ib.AccessRemoteAtomic) != 0 && access&ib.AccessLocalWrite == 0 {
		return errorf(unix.EINVAL, "MR access %v: remote write/atomic needs IB_ACCESS_LOCAL_WRITE", access)
	}
	if !access.IsValid() {
		return errorf(unix.EINVAL, "MR access %v: unknown bits", access)
	}
	a := d.ops.QueryDevice()
	if access&ib.AccessOnDemand != 0 && a.KernelCapFlags&KernelCapOnDemandPaging == 0 {
		return errorf(unix.EOPNOTSUPP, "MR access %v: device has no on-demand paging", access)
	}
	if access&ib.AccessFlushGlobal != 0 && a.DeviceCapFlags&DeviceCapFlushGlobal == 0 ||
		access&ib.AccessFlushPersistent != 0 && a.DeviceCapFlags&DeviceCapFlushPersistent == 0 {
		return errorf(unix.EOPNOTSUPP, "MR access %v: device cannot flush", access)
	}
	return nil
}

// RegUserMR registers [start, start+length) of memory with address iova
// (the uverbs reg_mr path: ib_check_mr_access, then the driver).
//
// start is an address in the device's memory, Device.Memory() (the
// Config.Memory the device was created with, or the one it made): the
// emulator's stand-in for a process's address space. Get the address from
// there: Memory().Alloc(n) for a new buffer, Memory().Add(buf) for a slice
// of your own; an address the Memory does not hold fails. SGEs on the MR
// then give addresses from iova on (iova == start for the usual
// ibv_reg_mr), and a peer's RDMA addresses the same way through the rkey.
func (pd *PD) RegUserMR(start, length, iova uint64, access ib.AccessFlags) (*MR, error) {
	if err := pd.Device.CheckMRAccess(access); err != nil {
		return nil, err
	}
	mr := &MR{Device: pd.Device, PD: pd, Type: MRTypeUser, IOVA: iova, Length: length, Access: access}
	if err := pd.Device.ops.RegUserMR(mr, start, length, iova, access); err != nil {
		return nil, err
	}
	pd.use.inc()
	return mr, nil
}

// AllocMR allocates a fast-registration MR for up to maxNumSG pages
// (ib_alloc_mr); IB_MR_TYPE_INTEGRITY must use ib_alloc_mr_integrity and
// fails with EINVAL here.
func (pd *PD) AllocMR(t MRType, maxNumSG int) (*MR, error) {
	if t == MRTypeIntegrity {
		return nil, errorf(unix.EINVAL, "alloc MR: %v needs ib_alloc_mr_integrity", t)
	}
	mr := &MR{Device: pd.Device, PD: pd, Type: t}
	if err := pd.Device.ops.AllocMR(mr, t, maxNumSG); err != nil {
		return nil, err
	}
	pd.use.inc()
	return mr, nil
}

// MapSG maps a DMA-mapped scatterlist into a fast-registration MR with the
// given page size (ib_map_mr_sg) and returns how many entries it mapped.
func (mr *MR) MapSG(sg []dma.Scatterlist, pageSize int) (int, error) {
	return mr.Device.ops.MapMRSG(mr, sg, pageSize)
}

// Dereg deregisters the MR (ib_dereg_mr).
func (mr *MR) Dereg() error { return mr.DeregUser(nil) }

// DeregUser deregisters the MR for a caller with udata (ib_dereg_mr_user);
// rxe refuses an MR with bound memory windows with EINVAL.
func (mr *MR) DeregUser(udata *UData) error {
	if err := mr.Device.ops.DeregMR(mr); err != nil {
		return err
	}
	mr.PD.use.dec()
	return nil
}

// CheckReregFlags applies ib_uverbs_rereg_mr's first checks: no flags is
// EINVAL, undefined ones EOPNOTSUPP, a new range whose start and iova
// differ in the offset within the page EINVAL.
func CheckReregFlags(flags MRReregFlags, start, iova uint64) error {
	switch {
	case flags == 0:
		return errorf(unix.EINVAL, "rereg MR: no flags")
	case !flags.IsValid():
		return errorf(unix.EOPNOTSUPP, "rereg MR: flags %v", flags)
	case flags&MRReregTrans != 0 && (start^iova)%dma.PageSize != 0:
		return errorf(unix.EINVAL, "rereg MR: start %#x and iova %#x differ in the page offset", start, iova)
	}
	return nil
}

// ReregUser re-registers a user MR in place (the uverbs rereg_mr path:
// CheckReregFlags, ib_check_mr_access with MRReregAccess, then the
// driver's rereg_user_mr): a new range with MRReregTrans, pd with
// MRReregPD (nil or another device's is EINVAL), access with
// MRReregAccess. Keys stay. An MR that is not a user MR is EINVAL; a
// driver without the op gives EOPNOTSUPP. When it fails, nothing changed.
func (mr *MR) ReregUser(flags MRReregFlags, pd *PD, start, length, iova uint64, access ib.AccessFlags) error {
	if err := CheckReregFlags(flags, start, iova); err != nil {
		return err
	}
	if mr.Type != MRTypeUser {
		return errorf(unix.EINVAL, "rereg MR: %v is not a user MR", mr.Type)
	}
	if flags&MRReregAccess != 0 {
		if err := mr.Device.CheckMRAccess(access); err != nil {
			return err
		}
	}
	if flags&MRReregPD != 0 && (pd == nil || pd.Device != mr.Device) {
		return errorf(unix.EINVAL, "rereg MR: no PD of the MR's device")
	}
	if flags&MRReregPD == 0 {
		pd = mr.PD
	}
	r, ok := mr.Device.ops.(MRReregisterer)
	if !ok {
		return errorf(unix.EOPNOTSUPP, "rereg MR: driver has no rereg_user_mr")
	}
	if err := r.ReregUserMR(mr, flags, start, length, iova, access, pd); err != nil {
		return err
	}
	if flags&MRReregPD != 0 {
		mr.PD.use.dec()
		pd.use.inc()
		mr.PD = pd
	}
	if flags&MRReregTrans != 0 {
		mr.IOVA, mr.Length = iova, length
	}
	if flags&MRReregAccess != 0 {
		mr.Access = access
	}
	return nil
}

// CheckStatus checks the MR's signature status (ib_check_mr_status); a
// driver without the op (rxe) gives EOPNOTSUPP.
func (mr *MR) CheckStatus(check uint32) (MRStatus, error) {
	c, ok := mr.Device.ops.(MRStatusChecker)
	if !ok {
		return MRStatus{}, errorf(unix.EOPNOTSUPP, "check MR status: driver has no check_mr_status")
	}
	return c.CheckMRStatus(mr, check)
}

// MW is struct ib_mw, a memory window.
type MW struct {
	Device *Device // the device that owns the MW
	PD     *PD     // the MW's protection domain
	Type   MWType  // IB_MW_TYPE_1 or IB_MW_TYPE_2 (type)

	rkey uint32 // set by the driver
	priv any    // the driver's state
}

// RKey returns the window's remote key (ib_mw.rkey); a bind changes its
// low byte.
func (mw *MW) RKey() uint32 { return mw.rkey }

// AllocMW allocates a memory window of type t (uverbs alloc_mw).
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	if t != MWType1 && t != MWType2 {
		return nil, errorf(unix.EINVAL, "alloc MW: type %d", t)
	}
	mw := &MW{Device: pd.Device, PD: pd, Type: t}
	if err := pd.Device.ops.AllocMW(mw); err != nil {
		return nil, err
	}
	pd.use.inc()
	return mw, nil
}

// Dealloc frees the window, unbinding it (never fails on rxe).
func (mw *MW) Dealloc() error {
	if err := mw.Device.ops.DeallocMW(mw); err != nil {
		return err
	}
	mw.PD.use.dec()
	return nil
}

// Device capability bits used by the core (enum ib_device_cap_flags, the
// same values as uverbs').
const (
	DeviceCapMemWindow       uint64 = 1 << 17
	DeviceCapMemMgtExt       uint64 = 1 << 21
	DeviceCapXRC             uint64 = 1 << 20
	DeviceCapFlushGlobal     uint64 = 1 << 38
	DeviceCapFlushPersistent uint64 = 1 << 39
	DeviceCapAtomicWrite     uint64 = 1 << 40
	KernelCapOnDemandPaging  uint64 = 1 << 2
	KernelCapAllowUserUnreg  uint64 = 1 << 4
)

// String formats an MR for messages.
func (mr *MR) String() string {
	return fmt.Sprintf("MR %v lkey %#x rkey %#x", mr.Type, mr.lkey, mr.rkey)
}

var _ sync.Locker = (*sync.Mutex)(nil)
