package qpstate

import (
	"fmt"
	"strconv"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// Policy selects whose modify_qp checks Validate reproduces. The stacks
// agree on the table but differ on when they consult it and on which
// attribute values they check (rxe_modify_qp and rxe_qp_chk_attr against
// ib_modify_qp_is_ok as mlx5 applies it).
//
// The zero value is PolicyRxe, the default: an emulator that wants "like
// the kernel's rxe" needs to choose nothing.
type Policy uint8

const (
	// PolicyRxe is rxe as of Linux 6.4 (the "Protect QP state with
	// qp->state_lock" rework), the 6.12 and 7.3 of package rxe's
	// kernels: the table is consulted only
	// when IB_QP_STATE is in the mask, so an attribute-only modify is
	// accepted in any state with any standard bits, subject to rxe's
	// value checks (rxe_qp_chk_attr). rxe does not check retry_cnt,
	// rnr_retry, min_rnr_timer, max_dest_rd_atomic, pkey_index or qkey.
	PolicyRxe Policy = iota
	// PolicyRxePre64 is rxe before Linux 6.4 (5.10 and later, package
	// rxe's 6.1): the table
	// is consulted on every modify, with next = current when IB_QP_STATE
	// is absent, before the same value checks except the access flag
	// check, which rxe gained in 6.4 too.
	PolicyRxePre64
	// PolicyHardware is a hardware driver in the manner of mlx5: the table
	// on every modify (next = current when IB_QP_STATE is absent), the
	// port number against the port count, pkey_index against the P_Key
	// table, rd_atomic limits, and IBTA ranges the rxe driver leaves
	// unchecked: timeout and min_rnr_timer <= 31, retry_cnt and
	// rnr_retry <= 7, path_mtu a valid code no larger than the port's,
	// access flags within IB_ACCESS_SUPPORTED. IB_QP_RATE_LIMIT is a
	// supported bit (the table still allows it only for RAW_PACKET).
	// There is no SQD drain restriction.
	PolicyHardware
)

var policyNames = [...]string{"rxe", "rxe-pre-6.4", "hardware"}

// IsValid reports whether p is a defined policy.
func (p Policy) IsValid() bool { return int(p) < len(policyNames) }

// String returns "rxe", "rxe-pre-6.4" or "hardware".
func (p Policy) String() string {
	if p.IsValid() {
		return policyNames[p]
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// Caller says through which door a modify arrives, which decides the uverbs
// checks (uverbs_cmd.c modify_qp). The zero value is a kernel caller (a ULP
// calling ib_modify_qp): no uverbs checks, and the caller must have resolved the
// destination MAC itself.
type Caller struct {
	// User: the modify comes from userspace (ibv_modify_qp through
	// uverbs). The uverbs checks apply: reserved mask bits, port numbers,
	// AV/port consistency, CUR/STATE range, the privileged Q_Key.
	User bool
	// Extended: the extended uverbs command (MODIFY_QP_EX), which lets
	// IB_QP_RATE_LIMIT through; the legacy command refuses any bit above
	// bit 20 with EOPNOTSUPP. Only meaningful with User.
	Extended bool
	// Unprivileged: the process lacks CAP_NET_RAW and the rdma
	// "privileged_qkey" setting is off, so a Q_Key with bit 31 set is
	// refused with EPERM. Only meaningful with User.
	Unprivileged bool
}

// QPContext is what Validate needs to know about the QP being modified.
type QPContext struct {
	State      State  // the QP's real current state
	Type       Type   // the QP's type
	Port       uint32 // the port the core recorded (qp->port): set by the last modify with IB_QP_PORT, 0 before
	SQDraining bool   // an SQD drain is in progress (rxe: only ->ERR is allowed from SQD)
	HasSRQ     bool   // the QP receives through an SRQ (receive caps are not checked)
	Caller     Caller // who issues this modify
}

// Limits are the device and port limits a modify is checked against. The
// zero value has no ports and empty tables, so it refuses nearly
// everything; start from RxeLimits.
type Limits struct {
	PhysPortCnt     uint32 // ports are numbered 1..PhysPortCnt (rdma_is_port_valid)
	IB              bool   // the ports are native InfiniBand; false: RoCE (Ethernet), like rxe
	MaxMTU          ib.MTU // the port's max_mtu
	MaxQPRdAtom     uint32 // device max_qp_rd_atom (responder resources per QP)
	MaxQPInitRdAtom uint32 // device max_qp_init_rd_atom (initiator depth per QP)
	PKeyTableLen    uint32 // port pkey_tbl_len
	GIDTableLen     uint32 // port gid_tbl_len
	// GID reports the type of the GID in slot index of port, and false for
	// an empty slot. It is called only with index < GIDTableLen. Nil means
	// every slot is empty.
	GID           func(port, index uint32) (ib.GIDType, bool)
	MaxQPWR       uint32 // device max_qp_wr
	MaxSendSGE    uint32 // device max_send_sge
	MaxRecvSGE    uint32 // device max_recv_sge
	MaxInlineData uint32 // largest max_inline_data a QP may ask for
}

// RxeLimits returns the limits of a Linux 6.12 rxe device on one RoCE port
// (rxe_param.h, rxe_init_port_param): port 1 only, max MTU 4096, 128 rd_atomic
// both ways, a one-entry P_Key table, a 1024-entry GID table, 2^20 work
// requests, 32 SGEs, 512 bytes inline. GID is nil: the caller supplies its GID
// table.
func RxeLimits() Limits {
	return Limits{
		PhysPortCnt:     1,
		MaxMTU:          ib.MTU4096,
		MaxQPRdAtom:     128,
		MaxQPInitRdAtom: 128,
		PKeyTableLen:    1,
		GIDTableLen:     1024,
		MaxQPWR:         1 << 20,
		MaxSendSGE:      32,
		MaxRecvSGE:      32,
		MaxInlineData:   512,
	}
}

func (l *Limits) portValid(p uint32) bool { return p >= 1 && p <= l.PhysPortCnt }

// ModifyError reports an attribute value or mask refused by a modify, with
// the kernel's errno underneath (EINVAL, EOPNOTSUPP, EPERM, ENODATA).
type ModifyError struct {
	Attr   AttrMask   // the attribute at fault (0 if none in particular)
	Detail string     // what is wrong, with the offending values
	Errno  unix.Errno // the kernel's errno; what Unwrap returns
}

// Error implements error: "modify QP: IB_QP_TIMEOUT: timeout 32 > 31: invalid argument".
func (e *ModifyError) Error() string {
	s := "modify QP: "
	if e.Attr != 0 {
		s += e.Attr.String() + ": "
	}
	return s + e.Detail + ": " + e.Errno.Error()
}

// Unwrap returns the errno.
func (e *ModifyError) Unwrap() error { return e.Errno }

func merr(attr AttrMask, errno unix.Errno, format string, args ...any) error {
	return &ModifyError{Attr: attr, Detail: fmt.Sprintf(format, args...), Errno: errno}
}

// Verdict is what Validate decided for an accepted modify.
type Verdict struct {
	// Mask is the mask the driver applies: the caller's mask after the
	// uverbs adjustments (IB_QP_PORT added for an AV-only modify outside
	// RESET->INIT/INIT->RTR; XRC bits stripped).
	Mask AttrMask
	// Cur is the state the table check started from: attr.CurQPState if
	// IB_QP_CUR_STATE was given, else the QP's state.
	Cur State
	// Next is the QP's state after the modify: attr.QPState if
	// IB_QP_STATE was given, else the QP's unchanged state.
	Next State
	// TableChecked reports whether ModifyIsOK was consulted (always for
	// PolicyRxePre64 and PolicyHardware; only with IB_QP_STATE for
	// PolicyRxe).
	TableChecked bool
}

// Validate runs the checks a modify_qp passes in the kernel before the driver
// changes anything, in the kernel's order: the uverbs layer (only for a
// Caller.User; uverbs_cmd.c modify_qp), the core (_ib_modify_qp: AV and
// alternate path validation, the source GID lookup), then the driver as p
// selects (rxe_modify_qp, rxe_qp_chk_attr). It returns the first failure: a
// *TransitionError when the transition table refuses the modify, otherwise a
// *ModifyError; both unwrap to the errno the kernel returns.
//
// Validate normalizes attr in place where the kernel does: RQPSN and SQPSN
// are masked to 24 bits (_ib_modify_qp, silently apart from a log line).
// It does not round rd_atomic values (see RoundUpPow2) or resolve MACs; it
// never changes the QP. The emulator applies attr under Verdict.Mask and
// moves the QP to Verdict.Next.
func (p Policy) Validate(qp QPContext, attr *Attr, mask AttrMask, lim *Limits) (Verdict, error) {
	if !p.IsValid() {
		return Verdict{}, merr(0, unix.EINVAL, "invalid policy %v", p)
	}
	if attr == nil || lim == nil {
		return Verdict{}, merr(0, unix.EINVAL, "nil attributes or limits")
	}
	var err error
	if qp.Caller.User {
		if mask, err = uverbsChecks(qp, attr, mask, lim); err != nil {
			return Verdict{}, err
		}
	}
	if err = coreChecks(qp, attr, mask, lim); err != nil {
		return Verdict{}, err
	}
	v := Verdict{Mask: mask, Cur: qp.State, Next: qp.State}
	if mask&AttrCurState != 0 {
		v.Cur = attr.CurQPState
	}
	if mask&AttrState != 0 {
		v.Next = attr.QPState
	}
	switch p {
	case PolicyRxe, PolicyRxePre64:
		err = rxeChecks(p, qp, attr, mask, lim, &v)
	case PolicyHardware:
		err = hardwareChecks(qp, attr, mask, lim, &v)
	}
	if err != nil {
		return Verdict{}, err
	}
	return v, nil
}

// uverbsChecks mirrors ib_uverbs_modify_qp / ib_uverbs_ex_modify_qp and
// modify_qp in drivers/infiniband/core/uverbs_cmd.c. It returns the mask
// the core sees.
func uverbsChecks(qp QPContext, attr *Attr, mask AttrMask, lim *Limits) (AttrMask, error) {
	allowed := AttrStandardBits
	if qp.Caller.Extended {
		allowed |= AttrRateLimit
	}
	if bad := mask &^ allowed; bad != 0 {
		return 0, merr(bad, unix.EOPNOTSUPP, "mask bits not supported by the uverbs command")
	}
	if mask&AttrPort != 0 && !lim.portValid(attr.PortNum) {
		return 0, merr(AttrPort, unix.EINVAL, "port %d not in 1..%d", attr.PortNum, lim.PhysPortCnt)
	}
	if mask&AttrAV != 0 {
		ahPort := attr.AHAttr.PortNum
		if !lim.portValid(ahPort) {
			return 0, merr(AttrAV, unix.EINVAL, "ah_attr port %d not in 1..%d", ahPort, lim.PhysPortCnt)
		}
		if mask&AttrState != 0 && attr.QPState == StateRTR {
			if ahPort != qp.Port {
				return 0, merr(AttrAV, unix.EINVAL, "ah_attr port %d differs from the QP's port %d", ahPort, qp.Port)
			}
		} else {
			// SQD->SQD (anything else fails the table later): PORT and
			// AV must agree; AV alone brings its port along.
			switch mask & (AttrAV | AttrPort) {
			case AttrAV | AttrPort:
				if attr.PortNum != ahPort {
					return 0, merr(AttrAV|AttrPort, unix.EINVAL, "port %d differs from ah_attr port %d", attr.PortNum, ahPort)
				}
			case AttrAV:
				mask |= AttrPort
				attr.PortNum = ahPort
			}
		}
	}
	if mask&AttrAltPath != 0 {
		if !lim.portValid(attr.AltPortNum) || !lim.portValid(attr.AltAHAttr.PortNum) ||
			attr.AltPortNum != attr.AltAHAttr.PortNum {
			return 0, merr(AttrAltPath, unix.EINVAL, "alt_port_num %d / alt_ah_attr port %d invalid or different",
				attr.AltPortNum, attr.AltAHAttr.PortNum)
		}
	}
	if mask&AttrCurState != 0 && !attr.CurQPState.IsValid() {
		return 0, merr(AttrCurState, unix.EINVAL, "cur_qp_state %d out of range", attr.CurQPState)
	}
	if mask&AttrState != 0 && !attr.QPState.IsValid() {
		return 0, merr(AttrState, unix.EINVAL, "qp_state %d out of range", attr.QPState)
	}
	if mask&AttrQKey != 0 && attr.QKey&QKeyPrivileged != 0 && qp.Caller.Unprivileged {
		return 0, merr(AttrQKey, unix.EPERM, "qkey %#x has the privileged bit 31 set", attr.QKey)
	}
	// The AH type is derived from the port (copy_ah_attr_from_uverbs).
	if mask&AttrAV != 0 {
		attr.AHAttr.Type = lim.ahType()
	}
	if mask&AttrAltPath != 0 {
		attr.AltAHAttr.Type = lim.ahType()
	}
	// modify_qp_mask: XRC QPs lose the bits that belong to the other half.
	switch qp.Type {
	case TypeXRCIni:
		mask &^= AttrMaxDestRdAtomic | AttrMinRNRTimer
	case TypeXRCTgt:
		mask &^= AttrMaxQPRdAtomic | AttrRetryCnt | AttrRNRRetry
	}
	return mask, nil
}

func (l *Limits) ahType() ib.AHAttrType {
	if l.IB {
		return ib.AHAttrTypeIB
	}
	return ib.AHAttrTypeRoCE
}

// coreChecks mirrors _ib_modify_qp (drivers/infiniband/core/verbs.c): the AV
// and alternate path pass rdma_check_ah_attr and the source GID lookup,
// alternate paths are refused off native IB, PSNs are masked.
func coreChecks(qp QPContext, attr *Attr, mask AttrMask, lim *Limits) error {
	if mask&AttrAV != 0 {
		if err := checkAH(AttrAV, &attr.AHAttr, lim); err != nil {
			return err
		}
	}
	if mask&AttrAltPath != 0 {
		if err := checkAH(AttrAltPath, &attr.AltAHAttr, lim); err != nil {
			return err
		}
		if !lim.IB {
			return merr(AttrAltPath, unix.EINVAL, "alternate paths are supported on InfiniBand ports only, not RoCE")
		}
	}
	if mask&AttrRQPSN != 0 {
		attr.RQPSN &= ib.PSNMask
	}
	if mask&AttrSQPSN != 0 {
		attr.SQPSN &= ib.PSNMask
	}
	return nil
}

// checkAH mirrors rdma_check_ah_attr and the GID lookup of
// rdma_fill_sgid_attr.
func checkAH(which AttrMask, ah *ib.AHAttr, lim *Limits) error {
	if !lim.portValid(ah.PortNum) {
		return merr(which, unix.EINVAL, "ah_attr port %d not in 1..%d", ah.PortNum, lim.PhysPortCnt)
	}
	grh := ah.AHFlags&ib.AHGRH != 0
	if (!lim.IB || ah.Type == ib.AHAttrTypeRoCE) && !grh {
		return merr(which, unix.EINVAL, "ah_attr without IB_AH_GRH on a RoCE port")
	}
	if !grh {
		return nil
	}
	idx := uint32(ah.GRH.SGIDIndex)
	if idx >= lim.GIDTableLen {
		return merr(which, unix.EINVAL, "sgid_index %d >= GID table length %d", idx, lim.GIDTableLen)
	}
	if lim.GID == nil {
		return merr(which, unix.ENODATA, "sgid_index %d names an empty GID slot", idx)
	}
	if _, ok := lim.GID(ah.PortNum, idx); !ok {
		return merr(which, unix.ENODATA, "sgid_index %d names an empty GID slot", idx)
	}
	return nil
}

// tableCheck runs ModifyIsOK via Check from v.Cur to v.Next, then rxe's
// drain rule when drain is set.
func tableCheck(qp QPContext, mask AttrMask, v *Verdict, drain bool) error {
	next := v.Next
	if mask&AttrState == 0 {
		next = v.Cur
	}
	v.TableChecked = true
	if err := Check(v.Cur, next, qp.Type, mask); err != nil {
		return err
	}
	if drain && mask&AttrState != 0 && v.Cur == StateSQD && qp.SQDraining && next != StateErr {
		return merr(AttrState, unix.EINVAL, "SQD->%s while the send queue is still draining (only ERR is allowed)", next.Name())
	}
	return nil
}

// rxeChecks mirrors rxe_modify_qp (drivers/infiniband/sw/rxe/rxe_verbs.c)
// with rxe_qp_chk_attr and, for the state, __qp_chk_state (rxe_qp.c).
func rxeChecks(p Policy, qp QPContext, attr *Attr, mask AttrMask, lim *Limits, v *Verdict) error {
	if bad := mask &^ AttrStandardBits; bad != 0 {
		return merr(bad, unix.EOPNOTSUPP, "mask bits outside IB_QP_ATTR_STANDARD_BITS are not supported by rxe")
	}
	// Before 6.4 the state checks came first (still EINVAL either way).
	if p == PolicyRxePre64 {
		if err := tableCheck(qp, mask, v, true); err != nil {
			return err
		}
	}
	if mask&AttrPort != 0 && !lim.portValid(attr.PortNum) {
		return merr(AttrPort, unix.EINVAL, "port %d not in 1..%d", attr.PortNum, lim.PhysPortCnt)
	}
	if mask&AttrCap != 0 {
		if err := checkCap(&attr.Cap, qp.HasSRQ, lim); err != nil {
			return err
		}
	}
	// The access flag check arrived with "RDMA/rxe: Introduce rxe access
	// supported flags", in the same 6.4 cycle as the state-lock rework.
	if mask&AttrAccessFlags != 0 && p == PolicyRxe {
		if qp.Type != TypeRC && qp.Type != TypeUC {
			return merr(AttrAccessFlags, unix.EINVAL, "access flags on a %s QP (rxe allows them on RC and UC only)", qp.Type.Name())
		}
		if bad := attr.QPAccessFlags &^ ib.AccessRxeQP; bad != 0 {
			return merr(AttrAccessFlags, unix.EINVAL, "access flags %v not supported by rxe", bad)
		}
	}
	if mask&AttrAV != 0 {
		if err := rxeCheckAV(AttrAV, &attr.AHAttr, lim); err != nil {
			return err
		}
	}
	if mask&AttrAltPath != 0 {
		if err := rxeCheckAV(AttrAltPath, &attr.AltAHAttr, lim); err != nil {
			return err
		}
		if !lim.portValid(attr.AltPortNum) {
			return merr(AttrAltPath, unix.EINVAL, "alt_port_num %d not in 1..%d", attr.AltPortNum, lim.PhysPortCnt)
		}
		if attr.AltTimeout > 31 {
			return merr(AttrAltPath, unix.EINVAL, "alt_timeout %d > 31", attr.AltTimeout)
		}
	}
	// rxe compares the enum only from above: 0 and negative codes pass
	// (rxe_qp_chk_attr, an rxe quirk).
	if mask&AttrPathMTU != 0 && attr.PathMTU > lim.MaxMTU {
		return merr(AttrPathMTU, unix.EINVAL, "path_mtu %v above the port's max %v", attr.PathMTU, lim.MaxMTU)
	}
	if mask&AttrMaxQPRdAtomic != 0 && uint32(attr.MaxRdAtomic) > lim.MaxQPRdAtom {
		return merr(AttrMaxQPRdAtomic, unix.EINVAL, "max_rd_atomic %d > %d", attr.MaxRdAtomic, lim.MaxQPRdAtom)
	}
	if mask&AttrTimeout != 0 && attr.Timeout > 31 {
		return merr(AttrTimeout, unix.EINVAL, "timeout %d > 31", attr.Timeout)
	}
	if p == PolicyRxe && mask&AttrState != 0 {
		return tableCheck(qp, mask, v, true)
	}
	return nil
}

// checkCap mirrors rxe_qp_chk_cap.
func checkCap(c *Cap, hasSRQ bool, lim *Limits) error {
	switch {
	case c.MaxSendWR > lim.MaxQPWR:
		return merr(AttrCap, unix.EINVAL, "max_send_wr %d > %d", c.MaxSendWR, lim.MaxQPWR)
	case c.MaxSendSGE > lim.MaxSendSGE:
		return merr(AttrCap, unix.EINVAL, "max_send_sge %d > %d", c.MaxSendSGE, lim.MaxSendSGE)
	case !hasSRQ && c.MaxRecvWR > lim.MaxQPWR:
		return merr(AttrCap, unix.EINVAL, "max_recv_wr %d > %d", c.MaxRecvWR, lim.MaxQPWR)
	case !hasSRQ && c.MaxRecvSGE > lim.MaxRecvSGE:
		return merr(AttrCap, unix.EINVAL, "max_recv_sge %d > %d", c.MaxRecvSGE, lim.MaxRecvSGE)
	case c.MaxInlineData > lim.MaxInlineData:
		return merr(AttrCap, unix.EINVAL, "max_inline_data %d > %d", c.MaxInlineData, lim.MaxInlineData)
	}
	return nil
}

// rxeCheckAV mirrors rxe_av_chk_attr: with a GRH, the source GID must be a
// RoCEv2 (IPv4 or IPv6 network type) entry.
func rxeCheckAV(which AttrMask, ah *ib.AHAttr, lim *Limits) error {
	if ah.AHFlags&ib.AHGRH == 0 {
		return nil
	}
	idx := uint32(ah.GRH.SGIDIndex)
	if idx > lim.GIDTableLen {
		return merr(which, unix.EINVAL, "sgid_index %d > GID table length %d", idx, lim.GIDTableLen)
	}
	var typ ib.GIDType
	ok := false
	if lim.GID != nil && idx < lim.GIDTableLen {
		typ, ok = lim.GID(ah.PortNum, idx)
	}
	if !ok || typ != ib.GIDTypeRoCEv2 {
		return merr(which, unix.EINVAL, "source GID %d is not RoCEv2 (%v): rxe sends RoCEv2 only", idx, typ)
	}
	return nil
}

// hardwareChecks is an mlx5-like driver: EOPNOTSUPP for unknown bits, the
// table always, then the value ranges.
func hardwareChecks(qp QPContext, attr *Attr, mask AttrMask, lim *Limits, v *Verdict) error {
	if bad := mask &^ (AttrStandardBits | AttrRateLimit); bad != 0 {
		return merr(bad, unix.EOPNOTSUPP, "mask bits not supported by the driver")
	}
	if err := tableCheck(qp, mask, v, false); err != nil {
		return err
	}
	switch {
	case mask&AttrPort != 0 && !lim.portValid(attr.PortNum):
		return merr(AttrPort, unix.EINVAL, "port %d not in 1..%d", attr.PortNum, lim.PhysPortCnt)
	case mask&AttrPKeyIndex != 0 && uint32(attr.PKeyIndex) >= lim.PKeyTableLen:
		return merr(AttrPKeyIndex, unix.EINVAL, "pkey_index %d >= P_Key table length %d", attr.PKeyIndex, lim.PKeyTableLen)
	case mask&AttrMaxQPRdAtomic != 0 && uint32(attr.MaxRdAtomic) > lim.MaxQPInitRdAtom:
		return merr(AttrMaxQPRdAtomic, unix.EINVAL, "max_rd_atomic %d > %d", attr.MaxRdAtomic, lim.MaxQPInitRdAtom)
	case mask&AttrMaxDestRdAtomic != 0 && uint32(attr.MaxDestRdAtomic) > lim.MaxQPRdAtom:
		return merr(AttrMaxDestRdAtomic, unix.EINVAL, "max_dest_rd_atomic %d > %d", attr.MaxDestRdAtomic, lim.MaxQPRdAtom)
	case mask&AttrPathMTU != 0 && (!attr.PathMTU.IsValid() || attr.PathMTU > lim.MaxMTU):
		return merr(AttrPathMTU, unix.EINVAL, "path_mtu %v not in IB_MTU_256..%v", attr.PathMTU, lim.MaxMTU)
	case mask&AttrTimeout != 0 && attr.Timeout > 31:
		return merr(AttrTimeout, unix.EINVAL, "timeout %d > 31", attr.Timeout)
	case mask&AttrRetryCnt != 0 && attr.RetryCnt > 7:
		return merr(AttrRetryCnt, unix.EINVAL, "retry_cnt %d > 7", attr.RetryCnt)
	case mask&AttrRNRRetry != 0 && attr.RNRRetry > 7:
		return merr(AttrRNRRetry, unix.EINVAL, "rnr_retry %d > 7", attr.RNRRetry)
	case mask&AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31:
		return merr(AttrMinRNRTimer, unix.EINVAL, "min_rnr_timer %d > 31", attr.MinRNRTimer)
	case mask&AttrAccessFlags != 0 && !attr.QPAccessFlags.IsValid():
		return merr(AttrAccessFlags, unix.EINVAL, "access flags %v outside IB_ACCESS_SUPPORTED", attr.QPAccessFlags)
	}
	return nil
}
