package qpstate

// This file holds the transition table of ib_modify_qp_is_ok
// (drivers/infiniband/core/verbs.c, qp_state_table) as data, checked
// against the kernel source of Linux 6.12 and mainline: 22 valid
// (current, next) pairs and, for each, the attributes each QP type must
// (req) and may (opt) carry. A type with no entry for a valid pair may carry
// only IB_QP_STATE.

// rule is one (current, next) cell of the table.
type rule struct {
	valid bool
	req   [NumTypes]AttrMask // required attributes per QP type
	opt   [NumTypes]AttrMask // optional attributes per QP type
}

// Short local names keep the table readable.
const (
	cur    = AttrCurState
	sqdn   = AttrEnSQDAsyncNotify
	access = AttrAccessFlags
	pkey   = AttrPKeyIndex
	port   = AttrPort
	qkey   = AttrQKey
	av     = AttrAV
	mtu    = AttrPathMTU
	tmo    = AttrTimeout
	retry  = AttrRetryCnt
	rnr    = AttrRNRRetry
	rqpsn  = AttrRQPSN
	mqra   = AttrMaxQPRdAtomic
	alt    = AttrAltPath
	minrnr = AttrMinRNRTimer
	sqpsn  = AttrSQPSN
	mdra   = AttrMaxDestRdAtomic
	mig    = AttrPathMigState
	dqpn   = AttrDestQPN
	rate   = AttrRateLimit
)

var table = [NumStates][NumStates]rule{
	StateReset: {
		StateReset: {valid: true},
		StateInit: {valid: true,
			req: [NumTypes]AttrMask{
				TypeUD:        pkey | port | qkey,
				TypeRawPacket: port,
				TypeUC:        pkey | port | access,
				TypeRC:        pkey | port | access,
				TypeXRCIni:    pkey | port | access,
				TypeXRCTgt:    pkey | port | access,
				TypeSMI:       pkey | qkey,
				TypeGSI:       pkey | qkey,
			}},
	},
	StateInit: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateInit: {valid: true,
			opt: [NumTypes]AttrMask{
				TypeUD:     pkey | port | qkey,
				TypeUC:     pkey | port | access,
				TypeRC:     pkey | port | access,
				TypeXRCIni: pkey | port | access,
				TypeXRCTgt: pkey | port | access,
				TypeSMI:    pkey | qkey,
				TypeGSI:    pkey | qkey,
			}},
		StateRTR: {valid: true,
			req: [NumTypes]AttrMask{
				TypeUC:     av | mtu | dqpn | rqpsn,
				TypeRC:     av | mtu | dqpn | rqpsn | mdra | minrnr,
				TypeXRCIni: av | mtu | dqpn | rqpsn,
				TypeXRCTgt: av | mtu | dqpn | rqpsn | mdra | minrnr,
			},
			opt: [NumTypes]AttrMask{
				TypeUD:     pkey | qkey,
				TypeUC:     alt | access | pkey,
				TypeRC:     alt | access | pkey,
				TypeXRCIni: alt | access | pkey,
				TypeXRCTgt: alt | access | pkey,
				TypeSMI:    pkey | qkey,
				TypeGSI:    pkey | qkey,
			}},
	},
	StateRTR: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS: {valid: true,
			req: [NumTypes]AttrMask{
				TypeUD:     sqpsn,
				TypeUC:     sqpsn,
				TypeRC:     tmo | retry | rnr | sqpsn | mqra,
				TypeXRCIni: tmo | retry | rnr | sqpsn | mqra,
				TypeXRCTgt: tmo | sqpsn,
				TypeSMI:    sqpsn,
				TypeGSI:    sqpsn,
			},
			opt: [NumTypes]AttrMask{
				TypeUD:        cur | qkey,
				TypeUC:        cur | alt | access | mig,
				TypeRC:        cur | alt | access | minrnr | mig,
				TypeXRCIni:    cur | alt | access | mig,
				TypeXRCTgt:    cur | alt | access | minrnr | mig,
				TypeSMI:       cur | qkey,
				TypeGSI:       cur | qkey,
				TypeRawPacket: rate,
			}},
	},
	StateRTS: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS: {valid: true,
			opt: [NumTypes]AttrMask{
				TypeUD:        cur | qkey,
				TypeUC:        cur | access | alt | mig,
				TypeRC:        cur | access | alt | mig | minrnr,
				TypeXRCIni:    cur | access | alt | mig,
				TypeXRCTgt:    cur | access | alt | mig | minrnr,
				TypeSMI:       cur | qkey,
				TypeGSI:       cur | qkey,
				TypeRawPacket: rate,
			}},
		StateSQD: {valid: true,
			opt: [NumTypes]AttrMask{
				TypeUD:     sqdn,
				TypeUC:     sqdn,
				TypeRC:     sqdn,
				TypeXRCIni: sqdn,
				TypeXRCTgt: sqdn, // the kernel marks this entry "???"; kept as written
				TypeSMI:    sqdn,
				TypeGSI:    sqdn,
			}},
	},
	StateSQD: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS: {valid: true,
			opt: [NumTypes]AttrMask{
				TypeUD:     cur | qkey,
				TypeUC:     cur | alt | access | mig,
				TypeRC:     cur | alt | access | minrnr | mig,
				TypeXRCIni: cur | alt | access | mig,
				TypeXRCTgt: cur | alt | access | minrnr | mig,
				TypeSMI:    cur | qkey,
				TypeGSI:    cur | qkey,
			}},
		StateSQD: {valid: true,
			opt: [NumTypes]AttrMask{
				TypeUD:     pkey | qkey,
				TypeUC:     av | alt | access | pkey | mig,
				TypeRC:     port | av | tmo | retry | rnr | mqra | mdra | alt | access | pkey | minrnr | mig,
				TypeXRCIni: port | av | tmo | retry | rnr | mqra | alt | access | pkey | mig,
				TypeXRCTgt: port | av | tmo | mdra | alt | access | pkey | minrnr | mig,
				TypeSMI:    pkey | qkey,
				TypeGSI:    pkey | qkey,
			}},
	},
	StateSQE: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
		StateRTS: {valid: true,
			opt: [NumTypes]AttrMask{
				TypeUD:  cur | qkey,
				TypeUC:  cur | access,
				TypeSMI: cur | qkey,
				TypeGSI: cur | qkey,
			}},
	},
	StateErr: {
		StateReset: {valid: true},
		StateErr:   {valid: true},
	},
}

// inTable reports whether (cur, next, t) indexes the table. Type 7 does: the
// kernel sizes the type dimension IB_QPT_MAX = 11 and leaves 7 all zero.
func inTable(cur, next State, t Type) bool {
	return cur.IsValid() && next.IsValid() && t >= 0 && t < NumTypes
}

// Masks returns the table entry for (cur, next, t): whether the pair is a
// valid transition, and the attributes type t must (req) and may (opt) give
// besides IB_QP_STATE. Out-of-range states or types give valid = false.
func Masks(cur, next State, t Type) (req, opt AttrMask, valid bool) {
	if !inTable(cur, next, t) || !table[cur][next].valid {
		return 0, 0, false
	}
	r := &table[cur][next]
	return r.req[t], r.opt[t], true
}

// ValidPair reports whether cur -> next is one of the table's 22 valid
// transitions (for every QP type alike).
func ValidPair(cur, next State) bool {
	_, _, ok := Masks(cur, next, TypeRC)
	return ok
}

// curAssertable reports whether IB_QP_CUR_STATE may be given when the
// current state is s: only from RTR, RTS, SQD or SQE.
func curAssertable(s State) bool {
	return s == StateRTR || s == StateRTS || s == StateSQD || s == StateSQE
}

// ModifyIsOK reports whether a modify from cur to next of a QP of type t
// with attribute mask may proceed. It mirrors ib_modify_qp_is_ok
// (drivers/infiniband/core/verbs.c) exactly:
//
//  1. IB_QP_CUR_STATE in mask while cur is not RTR, RTS, SQD or SQE: false.
//  2. (cur, next) not a valid pair of the table: false.
//  3. a required attribute of (cur, next, t) missing from mask: false.
//  4. a bit of mask outside required | optional | IB_QP_STATE: false.
//
// The kernel indexes its arrays without range checks (callers guarantee
// them); here a state outside RESET..ERR or a type outside 0..10 gives
// false. Type 7, inside the kernel's array, behaves like RAW_IPV6.
// ModifyIsOK does not itself require IB_QP_STATE: the caller chooses next
// (see Policy).
func ModifyIsOK(cur, next State, t Type, mask AttrMask) bool {
	if !inTable(cur, next, t) {
		return false
	}
	if mask&AttrCurState != 0 && !curAssertable(cur) {
		return false
	}
	r := &table[cur][next]
	if !r.valid {
		return false
	}
	req, opt := r.req[t], r.opt[t]
	if mask&req != req {
		return false
	}
	return mask&^(req|opt|AttrState) == 0
}
