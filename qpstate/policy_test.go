package qpstate

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// testLimits is an rxe device whose GID table holds RoCEv2 entries in
// slots 0 and 1 and a RoCEv1 entry in slot 2; every other slot is empty.
func testLimits() *Limits {
	l := RxeLimits()
	l.GID = func(port, index uint32) (ib.GIDType, bool) {
		if port != 1 {
			return 0, false
		}
		switch index {
		case 0, 1:
			return ib.GIDTypeRoCEv2, true
		case 2:
			return ib.GIDTypeRoCE, true
		}
		return 0, false
	}
	return &l
}

// goodAttr has a valid value for every attribute.
func goodAttr() Attr {
	return Attr{
		PathMTU:         ib.MTU1024,
		QKey:            0x11111111,
		RQPSN:           0x100,
		SQPSN:           0x200,
		DestQPNum:       0x12,
		QPAccessFlags:   ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead,
		AHAttr:          ib.AHAttr{PortNum: 1, AHFlags: ib.AHGRH, Type: ib.AHAttrTypeRoCE, GRH: ib.GlobalRoute{SGIDIndex: 1, HopLimit: 64}},
		AltAHAttr:       ib.AHAttr{PortNum: 1, AHFlags: ib.AHGRH, Type: ib.AHAttrTypeRoCE, GRH: ib.GlobalRoute{SGIDIndex: 1}},
		AltPortNum:      1,
		MaxRdAtomic:     4,
		MaxDestRdAtomic: 4,
		MinRNRTimer:     12,
		PortNum:         1,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
		Cap:             Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
	}
}

const (
	rcInit   = AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags                                             // 0x39
	rcRTR    = AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer // 0x129181
	rcRTS    = AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic              // 0x12E01
	ok       = unix.Errno(0)
	einval   = unix.EINVAL
	enotsupp = unix.EOPNOTSUPP
)

var (
	kernel     = Caller{}
	userLegacy = Caller{User: true}
	userExt    = Caller{User: true, Extended: true}
	userNoPriv = Caller{User: true, Unprivileged: true}
)

type policyCase struct {
	name   string
	qp     QPContext // State, Type, Port, SQDraining, Caller
	to     State     // attr.QPState
	cur    State     // attr.CurQPState
	mask   AttrMask
	mut    func(*Attr)
	want   [3]unix.Errno // indexed by PolicyRxe, PolicyRxePre64, PolicyHardware
	check  func(t *testing.T, p Policy, v Verdict, a *Attr)
	typed  bool // a refused table check must be a *TransitionError
	lim    *Limits
	policy []Policy // restrict to these policies (nil: all three)
}

func all(e unix.Errno) [3]unix.Errno { return [3]unix.Errno{e, e, e} }

func qpc(s State, t Type) QPContext { return QPContext{State: s, Type: t, Port: 1} }

func nextIs(want State) func(*testing.T, Policy, Verdict, *Attr) {
	return func(t *testing.T, p Policy, v Verdict, _ *Attr) {
		if v.Next != want {
			t.Errorf("%v: Verdict.Next = %v, want %v", p, v.Next, want)
		}
	}
}

// policyCases holds the modify_qp validation edge cases (the transition
// table, the masks each type requires and allows, CUR, attribute-only
// modifies, value limits, the SQD draining rule, uverbs' checks), each with
// the errno rxe >= 6.4, rxe < 6.4 and a hardware driver return, then cases
// where the policies differ.
var policyCases = []policyCase{
	{name: "RC_RESET_to_INIT", qp: qpc(StateReset, TypeRC), to: StateInit, mask: rcInit, want: all(ok), check: nextIs(StateInit)},
	{name: "RC_RESET_to_INIT_without_ACCESS", qp: qpc(StateReset, TypeRC), to: StateInit, mask: 0x31, want: all(einval), typed: true},
	{name: "UD_RESET_to_INIT_with_ACCESS", qp: qpc(StateReset, TypeUD), to: StateInit, mask: 0x79, want: all(einval)},
	{name: "RESET_to_ERR", qp: qpc(StateReset, TypeRC), to: StateErr, mask: AttrState, want: all(einval), typed: true},
	{name: "RESET_to_RTR", qp: qpc(StateReset, TypeRC), to: StateRTR, mask: rcRTR, want: all(einval), typed: true},
	{name: "INIT_to_RTS", qp: qpc(StateInit, TypeRC), to: StateRTS, mask: rcRTS, want: all(einval), typed: true},
	{name: "RC_INIT_to_RTR_missing_MINRNR", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: 0x121181, want: all(einval), typed: true},
	{name: "RC_INIT_to_RTR_extra_SQ_PSN", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR | AttrSQPSN, want: all(einval), typed: true},
	{name: "UC_INIT_to_RTR_with_MDRA", qp: qpc(StateInit, TypeUC), to: StateRTR, mask: 0x101181 | AttrMaxDestRdAtomic, want: all(einval), typed: true},
	{name: "UC_INIT_to_RTR_ok", qp: qpc(StateInit, TypeUC), to: StateRTR, mask: 0x101181, want: all(ok)},
	{name: "RTR_to_RTR", qp: qpc(StateRTR, TypeRC), to: StateRTR, mask: AttrState | AttrTimeout, want: all(einval), typed: true},
	{name: "RC_RTS_to_RTS_MINRNR", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrMinRNRTimer, want: all(ok)},
	{name: "UC_RTS_to_RTS_MINRNR", qp: qpc(StateRTS, TypeUC), to: StateRTS, mask: AttrState | AttrMinRNRTimer, want: all(einval), typed: true},
	{name: "RTS_to_SQE", qp: qpc(StateRTS, TypeRC), to: StateSQE, mask: AttrState, want: all(einval), typed: true},
	{name: "INIT_to_INIT_with_CUR", qp: qpc(StateInit, TypeRC), to: StateInit, cur: StateInit, mask: AttrState | AttrCurState, want: all(einval), typed: true},
	{name: "RC_RTR_to_RTS_with_CUR", qp: qpc(StateRTR, TypeRC), to: StateRTS, cur: StateRTR, mask: 0x12E03, want: all(ok), check: nextIs(StateRTS)},
	{name: "UD_RESET_asserting_CUR_RTR", qp: qpc(StateReset, TypeUD), to: StateRTS, cur: StateRTR, mask: 0x10003, want: all(ok),
		check: func(t *testing.T, p Policy, v Verdict, _ *Attr) {
			if v.Cur != StateRTR || v.Next != StateRTS {
				t.Errorf("%v: Verdict %+v, want Cur RTR Next RTS", p, v)
			}
		}},
	{name: "ERR_to_ERR", qp: qpc(StateErr, TypeRC), to: StateErr, mask: AttrState, want: all(ok)},
	{name: "ERR_to_INIT", qp: qpc(StateErr, TypeRC), to: StateInit, mask: AttrState, want: all(einval), typed: true},
	{name: "RTR_TIMEOUT_only", qp: qpc(StateRTR, TypeRC), mask: AttrTimeout, want: [3]unix.Errno{ok, einval, einval},
		check: func(t *testing.T, p Policy, v Verdict, _ *Attr) {
			if v.TableChecked || v.Next != StateRTR {
				t.Errorf("%v: Verdict %+v, want no table check and Next RTR", p, v)
			}
		}},
	{name: "RTS_TIMEOUT_only", qp: qpc(StateRTS, TypeRC), mask: AttrTimeout, want: [3]unix.Errno{ok, einval, einval}},
	{name: "UD_RESET_QKEY_only", qp: qpc(StateReset, TypeUD), mask: AttrQKey, want: [3]unix.Errno{ok, einval, einval}},
	{name: "RATE_LIMIT_kernel_caller", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrRateLimit, want: [3]unix.Errno{enotsupp, enotsupp, einval}},
	{name: "RATE_LIMIT_legacy_uverbs", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, Caller: userLegacy}, to: StateRTS, mask: AttrState | AttrRateLimit, want: all(enotsupp)},
	{name: "RATE_LIMIT_extended_uverbs", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, Caller: userExt}, to: StateRTS, mask: AttrState | AttrRateLimit, want: [3]unix.Errno{enotsupp, enotsupp, einval}},
	{name: "RATE_LIMIT_RAW_PACKET_hardware", qp: qpc(StateRTS, TypeRawPacket), to: StateRTS, mask: AttrState | AttrRateLimit, want: [3]unix.Errno{enotsupp, enotsupp, ok}},
	{name: "reserved_bit_21", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrReserved1, want: all(enotsupp)},
	{name: "reserved_bit_21_uverbs", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, Caller: userExt}, to: StateRTS, mask: AttrState | AttrReserved1, want: all(enotsupp)},
	{name: "timeout_32", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.Timeout = 32 }, want: all(einval)},
	{name: "timeout_31", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.Timeout = 31 }, want: all(ok)},
	{name: "max_rd_atomic_129", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.MaxRdAtomic = 129 }, want: all(einval)},
	{name: "max_rd_atomic_128", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.MaxRdAtomic = 128 }, want: all(ok)},
	{name: "max_rd_atomic_3_rounds_to_4", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.MaxRdAtomic = 3 }, want: all(ok),
		check: func(t *testing.T, p Policy, _ Verdict, a *Attr) {
			if a.MaxRdAtomic != 3 || RoundUpPow2(uint32(a.MaxRdAtomic)) != 4 {
				t.Errorf("%v: MaxRdAtomic %d (rounded %d), want 3 kept and 4 stored", p, a.MaxRdAtomic, RoundUpPow2(uint32(a.MaxRdAtomic)))
			}
		}},
	{name: "path_mtu_6", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.PathMTU = 6 }, want: all(einval)},
	{name: "path_mtu_5", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.PathMTU = 5 }, want: all(ok)},
	{name: "port_2", qp: qpc(StateReset, TypeRC), to: StateInit, mask: rcInit, mut: func(a *Attr) { a.PortNum = 2 }, want: all(einval)},
	{name: "port_0", qp: qpc(StateReset, TypeRC), to: StateInit, mask: rcInit, mut: func(a *Attr) { a.PortNum = 0 }, want: all(einval)},
	{name: "port_2_uverbs", qp: QPContext{State: StateReset, Type: TypeRC, Caller: userLegacy}, to: StateInit, mask: rcInit, mut: func(a *Attr) { a.PortNum = 2 }, want: all(einval)},
	{name: "sq_psn_masked", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.SQPSN = 0x1000001; a.RQPSN = 0xFF000002 }, want: all(ok),
		check: func(t *testing.T, p Policy, _ Verdict, a *Attr) {
			if a.SQPSN != 0x000001 {
				t.Errorf("%v: SQPSN = %#x, want 0x1", p, a.SQPSN)
			}
			if a.RQPSN != 0xFF000002 {
				t.Errorf("%v: RQPSN = %#x changed though RQ_PSN is not in the mask", p, a.RQPSN)
			}
		}},
	{name: "rq_psn_masked", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.RQPSN = 0xABCDEF12 }, want: all(ok),
		check: func(t *testing.T, p Policy, _ Verdict, a *Attr) {
			if a.RQPSN != 0xCDEF12 {
				t.Errorf("%v: RQPSN = %#x, want 0xcdef12", p, a.RQPSN)
			}
		}},
	{name: "SQD_to_RTS_while_draining", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, SQDraining: true}, to: StateRTS, mask: AttrState, want: [3]unix.Errno{einval, einval, ok}},
	{name: "SQD_to_SQD_while_draining", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, SQDraining: true}, to: StateSQD, mask: AttrState, want: [3]unix.Errno{einval, einval, ok}},
	{name: "SQD_to_RESET_while_draining", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, SQDraining: true}, to: StateReset, mask: AttrState, want: [3]unix.Errno{einval, einval, ok}},
	{name: "SQD_to_ERR_while_draining", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, SQDraining: true}, to: StateErr, mask: AttrState, want: all(ok)},
	{name: "SQD_to_RTS_after_drain", qp: qpc(StateSQD, TypeRC), to: StateRTS, mask: AttrState, want: all(ok)},
	{name: "draining_attribute_only_rxe", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, SQDraining: true}, mask: AttrTimeout, want: [3]unix.Errno{ok, ok, ok}},
	{name: "RTS_to_SQD_without_SQDN", qp: qpc(StateRTS, TypeRC), to: StateSQD, mask: AttrState, want: all(ok)},
	{name: "RTS_to_SQD_with_SQDN", qp: qpc(StateRTS, TypeRC), to: StateSQD, mask: AttrState | AttrEnSQDAsyncNotify, mut: func(a *Attr) { a.EnSQDAsyncNotify = 1 }, want: all(ok)},
	{name: "SQD_to_SQD_TIMEOUT", qp: qpc(StateSQD, TypeRC), to: StateSQD, mask: AttrState | AttrTimeout, want: all(ok)},
	{name: "UD_RTS_CUR_SQE", qp: qpc(StateRTS, TypeUD), to: StateRTS, cur: StateSQE, mask: 0x3, want: all(ok)},
	{name: "RC_RTS_CUR_SQE", qp: qpc(StateRTS, TypeRC), to: StateRTS, cur: StateSQE, mask: 0x3, want: all(einval), typed: true},
	{name: "CAP_with_STATE", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrCap, want: all(einval), typed: true},
	{name: "CAP_without_STATE", qp: qpc(StateRTS, TypeRC), mask: AttrCap, want: [3]unix.Errno{ok, einval, einval}},
	{name: "CAP_without_STATE_over_limit", qp: qpc(StateRTS, TypeRC), mask: AttrCap, mut: func(a *Attr) { a.Cap.MaxSendSGE = 33 }, want: all(einval)},
	{name: "CAP_inline_over_limit", qp: qpc(StateRTS, TypeRC), mask: AttrCap, mut: func(a *Attr) { a.Cap.MaxInlineData = 513 }, want: all(einval)},
	{name: "CAP_recv_over_limit_with_SRQ", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, HasSRQ: true}, mask: AttrCap, mut: func(a *Attr) { a.Cap.MaxRecvWR = 1<<20 + 1 }, want: [3]unix.Errno{ok, einval, einval}},
	{name: "CAP_recv_over_limit", qp: qpc(StateRTS, TypeRC), mask: AttrCap, mut: func(a *Attr) { a.Cap.MaxRecvWR = 1<<20 + 1 }, want: all(einval)},
	{name: "ALT_on_RoCE", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR | AttrAltPath, want: all(einval)},
	{name: "AV_without_GRH", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.AHAttr.AHFlags = 0 }, want: all(einval)},
	{name: "AV_empty_sgid_slot", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.AHAttr.GRH.SGIDIndex = 200 }, want: all(unix.ENODATA)},
	{name: "privileged_qkey_unprivileged_user", qp: QPContext{State: StateRTS, Type: TypeUD, Port: 1, Caller: userNoPriv}, to: StateRTS, mask: AttrState | AttrQKey, mut: func(a *Attr) { a.QKey = 0x80000001 }, want: all(unix.EPERM)},
	{name: "privileged_qkey_privileged_user", qp: QPContext{State: StateRTS, Type: TypeUD, Port: 1, Caller: userLegacy}, to: StateRTS, mask: AttrState | AttrQKey, mut: func(a *Attr) { a.QKey = 0x80000001 }, want: all(ok)},
	{name: "privileged_qkey_kernel_caller", qp: QPContext{State: StateRTS, Type: TypeUD, Port: 1}, to: StateRTS, mask: AttrState | AttrQKey, mut: func(a *Attr) { a.QKey = 0x80000001 }, want: all(ok)},
	{name: "qp_state_7_uverbs", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, Caller: userLegacy}, to: 7, mask: AttrState, want: all(einval)},
	{name: "cur_qp_state_9_uverbs", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, Caller: userLegacy}, to: StateRTS, cur: 9, mask: AttrState | AttrCurState, want: all(einval)},
	{name: "qp_state_7_kernel", qp: qpc(StateRTS, TypeRC), to: 7, mask: AttrState, want: all(einval), typed: true},

	// Where the policies differ beyond the cases above.
	{name: "pkey_index_beyond_table", qp: qpc(StateReset, TypeRC), to: StateInit, mask: rcInit, mut: func(a *Attr) { a.PKeyIndex = 1 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "retry_cnt_8", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.RetryCnt = 8 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "rnr_retry_8", qp: qpc(StateRTR, TypeRC), to: StateRTS, mask: rcRTS, mut: func(a *Attr) { a.RNRRetry = 8 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "min_rnr_timer_32", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.MinRNRTimer = 32 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "max_dest_rd_atomic_255", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.MaxDestRdAtomic = 255 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "path_mtu_0_rxe_quirk", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.PathMTU = 0 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "path_mtu_negative_rxe_quirk", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.PathMTU = -1 }, want: [3]unix.Errno{ok, ok, einval}},
	{name: "sgid_RoCEv1", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.AHAttr.GRH.SGIDIndex = 2 }, want: [3]unix.Errno{einval, einval, ok}},
	{name: "access_zero_based", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrAccessFlags, mut: func(a *Attr) { a.QPAccessFlags |= ib.AccessZeroBased }, want: [3]unix.Errno{einval, ok, ok}},
	{name: "access_relaxed_ordering", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrAccessFlags, mut: func(a *Attr) { a.QPAccessFlags |= ib.AccessRelaxedOrdering }, want: all(ok)},
	{name: "access_bit_10", qp: qpc(StateRTS, TypeRC), to: StateRTS, mask: AttrState | AttrAccessFlags, mut: func(a *Attr) { a.QPAccessFlags |= 1 << 10 }, want: [3]unix.Errno{einval, ok, einval}},
	{name: "access_on_UD_attribute_only", qp: qpc(StateRTS, TypeUD), mask: AttrAccessFlags, want: all(einval)},
	{name: "access_on_UD_INIT_to_INIT", qp: qpc(StateInit, TypeUD), mask: AttrAccessFlags, want: all(einval)},
	{name: "RESET_to_RESET_attribute_only", qp: qpc(StateReset, TypeRC), mask: AttrPKeyIndex, want: [3]unix.Errno{ok, einval, einval}},
	{name: "INIT_to_INIT_attribute_only", qp: qpc(StateInit, TypeRC), mask: AttrPKeyIndex | AttrAccessFlags, want: all(ok)},
	{name: "empty_mask_in_RTR", qp: qpc(StateRTR, TypeRC), mask: 0, want: [3]unix.Errno{ok, einval, einval}},
	{name: "empty_mask_in_RTS", qp: qpc(StateRTS, TypeRC), mask: 0, want: all(ok)},
	{name: "CUR_only_rxe_no_table", qp: qpc(StateInit, TypeRC), cur: StateInit, mask: AttrCurState, want: [3]unix.Errno{ok, einval, einval}},
	{name: "sgid_index_beyond_table", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.AHAttr.GRH.SGIDIndex = 20 },
		lim: func() *Limits { l := testLimits(); l.GIDTableLen = 16; return l }(), want: all(einval)},
	{name: "no_GID_table", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR,
		lim: func() *Limits { l := RxeLimits(); return &l }(), want: all(unix.ENODATA)},
	{name: "AV_port_2", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, mut: func(a *Attr) { a.AHAttr.PortNum = 2 }, want: all(einval)},
	{name: "uverbs_AV_port_differs_from_QP_port", qp: QPContext{State: StateInit, Type: TypeRC, Port: 2, Caller: userLegacy}, to: StateRTR, mask: rcRTR,
		lim: func() *Limits { l := testLimits(); l.PhysPortCnt = 2; return l }(), want: all(einval)},
	{name: "uverbs_AV_only_in_SQD_adds_PORT", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, Caller: userLegacy}, mask: AttrAV,
		mut: func(a *Attr) { a.PortNum = 0 }, want: all(ok),
		check: func(t *testing.T, p Policy, v Verdict, a *Attr) {
			if v.Mask != AttrAV|AttrPort || a.PortNum != 1 {
				t.Errorf("%v: mask %v port %d, want AV|PORT and port 1", p, v.Mask, a.PortNum)
			}
		}},
	{name: "uverbs_AV_and_PORT_disagree", qp: QPContext{State: StateSQD, Type: TypeRC, Port: 1, Caller: userLegacy}, to: StateSQD, mask: AttrState | AttrAV | AttrPort,
		mut: func(a *Attr) { a.PortNum = 2 }, lim: func() *Limits { l := testLimits(); l.PhysPortCnt = 2; return l }(), want: all(einval)},
	{name: "uverbs_ALT_ports_differ", qp: QPContext{State: StateRTS, Type: TypeRC, Port: 1, Caller: userLegacy}, to: StateRTS, mask: AttrState | AttrAltPath,
		mut: func(a *Attr) { a.AltPortNum = 2 }, want: all(einval)},
	{name: "uverbs_XRC_INI_strips_MDRA_MINRNR", qp: QPContext{State: StateInit, Type: TypeXRCIni, Port: 1, Caller: userLegacy}, to: StateRTR, mask: rcRTR,
		policy: []Policy{PolicyHardware}, want: all(ok),
		check: func(t *testing.T, p Policy, v Verdict, _ *Attr) {
			if v.Mask != rcRTR&^(AttrMaxDestRdAtomic|AttrMinRNRTimer) {
				t.Errorf("%v: mask %v", p, v.Mask)
			}
		}},
	{name: "kernel_XRC_INI_keeps_MDRA", qp: qpc(StateInit, TypeXRCIni), to: StateRTR, mask: rcRTR, policy: []Policy{PolicyHardware}, want: all(einval), typed: true},
	{name: "IB_port_AV_without_GRH", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR, policy: []Policy{PolicyHardware},
		mut: func(a *Attr) { a.AHAttr.AHFlags = 0; a.AHAttr.Type = ib.AHAttrTypeIB },
		lim: func() *Limits { l := testLimits(); l.IB = true; return l }(), want: all(ok)},
	{name: "IB_port_ALT_allowed", qp: qpc(StateInit, TypeRC), to: StateRTR, mask: rcRTR | AttrAltPath, policy: []Policy{PolicyHardware},
		lim: func() *Limits { l := testLimits(); l.IB = true; return l }(), want: all(ok)},
}

func TestPolicyValidate(t *testing.T) {
	for _, tt := range policyCases {
		t.Run(tt.name, func(t *testing.T) {
			policies := tt.policy
			if policies == nil {
				policies = []Policy{PolicyRxe, PolicyRxePre64, PolicyHardware}
			}
			for _, p := range policies {
				a := goodAttr()
				a.QPState, a.CurQPState = tt.to, tt.cur
				if tt.mut != nil {
					tt.mut(&a)
				}
				lim := tt.lim
				if lim == nil {
					lim = testLimits()
				}
				v, err := p.Validate(tt.qp, &a, tt.mask, lim)
				want := tt.want[p]
				if want == 0 {
					if err != nil {
						t.Errorf("%v: Validate = %v, want success", p, err)
						continue
					}
					if tt.check != nil {
						tt.check(t, p, v, &a)
					}
					continue
				}
				if !errors.Is(err, want) {
					t.Errorf("%v: Validate = %v, want errno %v (%d)", p, err, want.Error(), int(want))
					continue
				}
				if v != (Verdict{}) {
					t.Errorf("%v: failed Validate returned a verdict %+v", p, v)
				}
				var te *TransitionError
				if tt.typed && !errors.As(err, &te) {
					t.Errorf("%v: %T %v, want *TransitionError", p, err, err)
				}
				var me *ModifyError
				if !errors.As(err, &te) && !errors.As(err, &me) {
					t.Errorf("%v: %T is neither *TransitionError nor *ModifyError", p, err)
				}
			}
		})
	}
}

func TestValidateZeroPolicyIsRxe(t *testing.T) {
	var p Policy
	if p != PolicyRxe || p.String() != "rxe" || !p.IsValid() {
		t.Fatalf("zero Policy = %v, want rxe", p)
	}
	if Policy(3).IsValid() {
		t.Error("Policy(3).IsValid() = true")
	}
	a := goodAttr()
	if _, err := Policy(9).Validate(qpc(StateRTS, TypeRC), &a, 0, testLimits()); !errors.Is(err, unix.EINVAL) {
		t.Errorf("invalid policy: %v, want EINVAL", err)
	}
	if _, err := p.Validate(qpc(StateRTS, TypeRC), nil, 0, testLimits()); !errors.Is(err, unix.EINVAL) {
		t.Errorf("nil attr: %v, want EINVAL", err)
	}
}

// TestValidateMatchesTable checks that, with values that pass every
// attribute check, a modify with IB_QP_STATE gets exactly the table's
// verdict under every policy, for every state pair, type and the generated
// masks of the exhaustive test (kernel callers, standard bits only).
func TestValidateMatchesTable(t *testing.T) {
	lim := testLimits()
	for c := StateReset; c <= StateErr; c++ {
		for x := StateReset; x <= StateErr; x++ {
			for _, ty := range []Type{TypeRC, TypeUC, TypeUD, TypeGSI} {
				req, opt, _ := Masks(c, x, ty)
				masks := []AttrMask{req, req | opt}
				for _, b := range AttrStandardBits.Bits() {
					masks = append(masks, req|b, req&^b)
				}
				for _, m := range masks {
					m |= AttrState
					m &^= AttrAltPath // refused by the core on RoCE whatever the table says
					if ty != TypeRC && ty != TypeUC {
						m &^= AttrAccessFlags // refused by rxe on UD/GSI
					}
					for _, p := range []Policy{PolicyRxe, PolicyRxePre64, PolicyHardware} {
						a := goodAttr()
						a.QPState, a.CurQPState = x, c
						_, err := p.Validate(QPContext{State: c, Type: ty, Port: 1}, &a, m, lim)
						if want := ModifyIsOK(c, x, ty, m); (err == nil) != want {
							t.Fatalf("%v %v->%v %v mask %v: Validate = %v, table says %v", p, c.Name(), x.Name(), ty.Name(), m, err, want)
						}
					}
				}
			}
		}
	}
}

func TestModifyErrorMessage(t *testing.T) {
	a := goodAttr()
	a.Timeout = 32
	_, err := PolicyRxe.Validate(qpc(StateRTR, TypeRC), &a, rcRTS, testLimits())
	const want = "modify QP: IB_QP_TIMEOUT: timeout 32 > 31: invalid argument"
	if err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}
