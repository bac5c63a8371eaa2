package emu

import (
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// QPInitAttr is struct ib_qp_init_attr.
type QPInitAttr struct {
	EventHandler func(Event)  // receives the QP's async events (event_handler)
	SendCQ       *CQ          // CQ for send completions (send_cq)
	RecvCQ       *CQ          // CQ for receive completions (recv_cq)
	SRQ          *SRQ         // shared receive queue; nil gives the QP its own RQ (srq)
	XRCD         *XRCD        // XRC domain, XRC_TGT QPs only (xrcd)
	Cap          qpstate.Cap  // requested queue sizes; holds the actual ones on return (cap)
	SQSigType    SigType      // IB_SIGNAL_ALL_WR or IB_SIGNAL_REQ_WR (sq_sig_type)
	QPType       qpstate.Type // IB_QPT_* (qp_type)
	CreateFlags  uint32       // IB_QP_CREATE_* bits (create_flags); rxe accepts none
	PortNum      uint32       // GSI and SMI only
	// RecvRing is SRQInitAttr.RecvRing for the QP's own receive queue.
	RecvRing func(wr *RecvWR) bool
}

// QP is struct ib_qp, a queue pair. An XRC target handle from OpenQP
// shares the real QP and forwards modify and query to it.
type QP struct {
	Device       *Device      // the device that owns the QP
	PD           *PD          // the QP's protection domain
	SendCQ       *CQ          // CQ for send completions (send_cq)
	RecvCQ       *CQ          // CQ for receive completions (recv_cq)
	SRQ          *SRQ         // shared receive queue, or nil (srq)
	QPType       qpstate.Type // IB_QPT_* (qp_type)
	EventHandler func(Event)  // receives the QP's async events (event_handler)
	// Port is the port recorded by the last modify carrying IB_QP_PORT
	// (or AV), as the core tracks it.
	Port uint32
	// RNRNAKSent, if set, is called (under the driver's lock) each time
	// the QP's responder answers a SEND with an RNR NAK: no receive WQE
	// in its RQ or SRQ (softroce run --check sets it).
	RNRNAKSent func()
	// PayloadSent, if set, is called (under the driver's lock) with each
	// request packet's payload the requester read from a send WR's
	// source (not inline data): when first sent and at each
	// retransmission (softroce run --check sets it).
	PayloadSent func(psn uint32, wrID uint64, payload []byte)

	qpn   uint32 // the 24-bit QP number (qp_num), set by the driver
	priv  any    // the driver's state
	real  *QP    // self for a real QP, the target for an open handle
	xrcd  *XRCD
	use   usecnt
	mcast map[mcastKey]bool
}

// QPNum returns the QP's 24-bit number (ib_qp.qp_num): 0 for the SMI QP,
// 1 for the GSI QP, from 17 (0x11) on for the others on rxe.
func (qp *QP) QPNum() uint32 { return qp.qpn }

type mcastKey struct {
	gid GID
	lid uint16
}

// CreateQP creates a queue pair on pd (ib_create_qp); init.Cap is updated
// to the actual capacities (which may exceed the request).
func (pd *PD) CreateQP(init *QPInitAttr) (*QP, error) {
	return pd.createQP(init, nil)
}

func (pd *PD) createQP(init *QPInitAttr, udata *UData) (*QP, error) {
	d := pd.Device
	qp := &QP{Device: d, PD: pd, SendCQ: init.SendCQ, RecvCQ: init.RecvCQ, SRQ: init.SRQ,
		QPType: init.QPType, EventHandler: init.EventHandler, mcast: map[mcastKey]bool{}}
	qp.real = qp
	if err := d.ops.CreateQP(qp, init, udata); err != nil {
		return nil, d.recordFailure("create_qp", err)
	}
	pd.use.inc()
	for _, cq := range []*CQ{qp.SendCQ, qp.RecvCQ} {
		if cq != nil {
			cq.use.inc()
		}
	}
	if qp.SRQ != nil {
		qp.SRQ.use.inc()
	}
	return qp, nil
}

// CreateUserQP creates a QP for a userspace caller; udata carries the
// driver's command and response (rxe: empty input, else EINVAL).
func (pd *PD) CreateUserQP(init *QPInitAttr, udata *UData) (*QP, error) {
	return pd.createQP(init, udata)
}

// Modify changes the QP's attributes and state (ib_modify_qp): the core
// checks of _ib_modify_qp, then the driver's modify_qp, which validates
// with package qpstate and applies everything or nothing.
//
// Every error unwraps to the kernel's errno (errors.Is(err, unix.EINVAL));
// errors.As tells which check refused, and the first failing check is the
// one reported. With rxe's default policy (qpstate.PolicyRxe) they run in
// this order:
//
//  1. the handle: a closed XRC handle is an *Error (EINVAL);
//  2. for a userspace caller (ModifyWithUdata) with an AV on a connected
//     RoCE QP, the MAC resolution: an *Error with the Resolver's errno
//     (EHOSTUNREACH when none answers);
//  3. the uverbs checks (userspace callers only), then the core's AV and
//     alternate path checks (port, IB_AH_GRH, source GID index): a
//     *qpstate.ModifyError (EINVAL, EPERM, EOPNOTSUPP, ENODATA);
//  4. rxe's value checks (mask bits, port, capacities, access flags, the
//     AV's values, alternate path, path MTU, rd_atomic, timeout): a
//     *qpstate.ModifyError;
//  5. last, and only when IB_QP_STATE is in mask, the transition table and
//     the SQD drain rule: a *qpstate.TransitionError (EINVAL), or a
//     *qpstate.ModifyError for the drain.
//
// So a value check wins over the table: RTS->RTS with IB_QP_AV and a zero
// AV reports the AV's port, not that RTS->RTS does not take IB_QP_AV. The
// older rxe policy (qpstate.PolicyRxePre64) and qpstate.PolicyHardware
// consult the table right after step 3.
func (qp *QP) Modify(attr *qpstate.Attr, mask qpstate.AttrMask) error {
	return qp.ModifyWithUdata(attr, mask, nil)
}

// ModifyWithUdata is Modify for a caller with udata
// (ib_modify_qp_with_udata). A non-nil udata marks a userspace caller: the
// uverbs checks then apply too (udata.Privileged and udata.Extended say
// what the caller may do), and on a RoCE connected QP the destination MAC
// of a valid new AV is resolved through the device's Resolver and its hop
// limit replaced by the route's, as ib_resolve_eth_dmac does. Every check
// (uverbs, core, driver) is package qpstate's Policy.Validate, run by the
// driver with its limits; the core adds only the MAC resolution. On
// failure nothing changes, attr included.
func (qp *QP) ModifyWithUdata(attr *qpstate.Attr, mask qpstate.AttrMask, udata *UData) (err error) {
	q, err := qp.target("modify")
	if err != nil {
		return err
	}
	d := q.Device
	if rec := d.cfg.Recorder; rec != nil {
		var cur qpstate.State
		if cattr, _, qerr := d.ops.QueryQP(q, qpstate.AttrState); qerr == nil {
			cur = cattr.QPState
		}
		defer func() { recordModify(rec, q, cur, attr, mask, err) }()
	}
	a := *attr
	if udata != nil && mask&qpstate.AttrAV != 0 && isConnected(q.QPType) &&
		d.protocolRoCE(a.AHAttr.PortNum) && d.checkAHAttr(&a.AHAttr) == nil {
		if err := d.resolveDMAC(&a.AHAttr); err != nil {
			return errorf(unwrapErrno(err), "modify QP %#x: %v", q.qpn, err)
		}
	}
	port, err := d.ops.ModifyQP(q, &a, mask, udata)
	if err != nil {
		return err
	}
	if port != 0 {
		q.Port = port
	}
	if mask&qpstate.AttrAV != 0 {
		attr.AHAttr.DMAC = a.AHAttr.DMAC
		attr.AHAttr.GRH.HopLimit = a.AHAttr.GRH.HopLimit
	}
	return nil
}

func isConnected(t qpstate.Type) bool {
	return t == qpstate.TypeRC || t == qpstate.TypeUC || t == qpstate.TypeXRCIni || t == qpstate.TypeXRCTgt
}

// Query returns the QP's attributes and creation attributes (ib_query_qp);
// mask says which the caller wants (rxe fills everything).
func (qp *QP) Query(mask qpstate.AttrMask) (qpstate.Attr, QPInitAttr, error) {
	q, err := qp.target("query")
	if err != nil {
		return qpstate.Attr{}, QPInitAttr{}, err
	}
	return q.Device.ops.QueryQP(q, mask)
}

// target returns the real QP behind qp (itself, or the XRC target of an
// open handle); a closed handle is EINVAL.
func (qp *QP) target(op string) (*QP, error) {
	if qp.real == nil {
		return nil, errorf(unix.EINVAL, "%s QP %#x: handle closed", op, qp.qpn)
	}
	return qp.real, nil
}

// PostSend posts send WRs (ib_post_send). On failure bad is the index of
// the failing WR; the WRs before it stay posted.
func (qp *QP) PostSend(wrs []SendWR) (bad int, err error) {
	q, err := qp.target("post send")
	if err != nil {
		return 0, err
	}
	bad, err = q.Device.ops.PostSend(q, wrs)
	if err != nil {
		q.Device.recordFailure("post_send", err)
	}
	return bad, err
}

// PostRecv posts receive WRs (ib_post_recv), with PostSend's failure rule.
func (qp *QP) PostRecv(wrs []RecvWR) (bad int, err error) {
	q, err := qp.target("post recv")
	if err != nil {
		return 0, err
	}
	bad, err = q.Device.ops.PostRecv(q, wrs)
	if err != nil {
		q.Device.recordFailure("post_recv", err)
	}
	return bad, err
}

// Destroy destroys the QP (ib_destroy_qp): EBUSY while it is attached to a
// multicast group or has open XRC handles. Outstanding WRs are discarded
// without completions. Destroying an open XRC handle closes it.
func (qp *QP) Destroy() error { return qp.DestroyUser(nil) }

// DestroyUser destroys the QP for a caller with udata (ib_destroy_qp_user).
func (qp *QP) DestroyUser(udata *UData) error {
	if qp.real != qp {
		return qp.Close()
	}
	if qp.use.busy() {
		return qp.Device.recordFailure("destroy_qp", errorf(unix.EBUSY, "destroy QP %#x: %d multicast attachments or open handles", qp.qpn, qp.use.n.Load()))
	}
	if err := qp.Device.ops.DestroyQP(qp); err != nil {
		return qp.Device.recordFailure("destroy_qp", err)
	}
	qp.PD.use.dec()
	for _, cq := range []*CQ{qp.SendCQ, qp.RecvCQ} {
		if cq != nil {
			cq.use.dec()
		}
	}
	if qp.SRQ != nil {
		qp.SRQ.use.dec()
	}
	return nil
}

// XRCD is struct ib_xrcd, an XRC domain grouping XRC target QPs.
type XRCD struct {
	Device *Device // the device that owns the domain
	priv   any     // the driver's state
	tgts   map[uint32]*QP
}

// AllocXRCD allocates an XRC domain (ib_alloc_xrcd_user); a driver without
// alloc_xrcd (rxe: no XRC) gives EOPNOTSUPP.
func (d *Device) AllocXRCD() (*XRCD, error) {
	a, ok := d.ops.(XRCDAllocator)
	if !ok {
		return nil, errorf(unix.EOPNOTSUPP, "alloc XRCD on %s: driver has no XRC support", d.name)
	}
	x := &XRCD{Device: d, tgts: map[uint32]*QP{}}
	if err := a.AllocXRCD(x); err != nil {
		return nil, err
	}
	return x, nil
}

// AddTarget records an XRC target QP in the domain (what creating an
// XRC_TGT QP with this xrcd does); drivers with XRC call it.
func (x *XRCD) AddTarget(qp *QP) {
	qp.xrcd = x
	x.tgts[qp.qpn] = qp
}

// QPOpenAttr is struct ib_qp_open_attr.
type QPOpenAttr struct {
	EventHandler func(Event)  // receives the QP's async events for this handle (event_handler)
	QPNum        uint32       // QP number of the XRC target QP to open (qp_num)
	QPType       qpstate.Type // must be IB_QPT_XRC_TGT (qp_type)
}

// OpenQP opens a handle on an existing XRC target QP of xrcd (ib_open_qp):
// the type must be XRC_TGT and the QP must exist in the domain, else
// EINVAL. The handle counts as a use of the real QP. On rxe no XRCD can
// exist (AllocXRCD gives EOPNOTSUPP), so OpenQP can only fail.
func OpenQP(xrcd *XRCD, attr QPOpenAttr) (*QP, error) {
	if xrcd == nil {
		return nil, errorf(unix.EINVAL, "open QP %#x: no XRC domain", attr.QPNum)
	}
	if attr.QPType != qpstate.TypeXRCTgt {
		return nil, errorf(unix.EINVAL, "open QP %#x: type %v, only IB_QPT_XRC_TGT can be opened", attr.QPNum, attr.QPType)
	}
	real, ok := xrcd.tgts[attr.QPNum]
	if !ok {
		return nil, errorf(unix.EINVAL, "open QP %#x: no such XRC target in the domain", attr.QPNum)
	}
	real.use.inc()
	return &QP{Device: real.Device, PD: real.PD, qpn: real.qpn, QPType: real.QPType,
		EventHandler: attr.EventHandler, real: real, xrcd: xrcd}, nil
}

// Close closes a handle from OpenQP (ib_close_qp); closing a real
// (non-shared) QP is EINVAL.
func (qp *QP) Close() error {
	if qp.real == qp {
		return errorf(unix.EINVAL, "close QP %#x: not an open XRC handle", qp.qpn)
	}
	if qp.real == nil {
		return errorf(unix.EINVAL, "close QP %#x: already closed", qp.qpn)
	}
	qp.real.use.dec()
	qp.real = nil
	return nil
}

// AttachMcast attaches a UD QP to the multicast group gid (ib_attach_mcast).
// The GID must be multicast and the QP UD (EINVAL); on an InfiniBand port
// the LID must be a multicast LID. The attachment is a use of the QP.
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	if err := qp.checkMcast(gid, lid, "attach"); err != nil {
		return err
	}
	m := qp.Device.ops.(McastAttacher)
	if err := m.AttachMcast(qp, gid, lid); err != nil {
		return err
	}
	k := mcastKey{gid, lid}
	if !qp.mcast[k] {
		qp.mcast[k] = true
		qp.use.inc()
	}
	return nil
}

// ForgetMcast drops the attachments the device no longer holds, for the
// close of the file that made them. rxe ignores the LID: a QP attached to
// one GID under two LIDs is one member, and the second detach finds no
// group (EINVAL), leaving the attachment counted and the QP undestroyable
// (EBUSY). The kernel then leaks the QP at ib_uverbs_close with a warning
// (uverbs_destroy_uobject: failed to remove uobject); a daemon serving many
// programs releases it instead, so that no client's exit leaves objects
// behind. Call it after detaching every group the file attached.
func (qp *QP) ForgetMcast() {
	for k := range qp.mcast {
		delete(qp.mcast, k)
		qp.use.dec()
	}
}

// DetachMcast detaches the QP from gid (ib_detach_mcast).
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	if err := qp.checkMcast(gid, lid, "detach"); err != nil {
		return err
	}
	m := qp.Device.ops.(McastAttacher)
	if err := m.DetachMcast(qp, gid, lid); err != nil {
		return err
	}
	k := mcastKey{gid, lid}
	if qp.mcast[k] {
		delete(qp.mcast, k)
		qp.use.dec()
	}
	return nil
}

func (qp *QP) checkMcast(gid GID, lid uint16, op string) error {
	if _, ok := qp.Device.ops.(McastAttacher); !ok {
		return errorf(unix.EOPNOTSUPP, "%s mcast: driver has no %s_mcast", op, op)
	}
	if !gid.IsMulticast() {
		return errorf(unix.EINVAL, "%s mcast QP %#x: %v is not a multicast GID", op, qp.qpn, gid)
	}
	if qp.QPType != qpstate.TypeUD {
		return errorf(unix.EINVAL, "%s mcast QP %#x: type %v, only UD QPs join groups", op, qp.qpn, qp.QPType)
	}
	if qp.Device.coreCap(1)&CoreCapProtIB != 0 && (lid < MulticastLIDBase || lid == PermissiveLID) {
		return errorf(unix.EINVAL, "%s mcast QP %#x: LID %#x is not a multicast LID", op, qp.qpn, lid)
	}
	return nil
}
