package qpstate

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Reason says which rule of ib_modify_qp_is_ok a TransitionError broke.
// The zero value is invalid.
type Reason uint8

// Reasons a transition is refused, in the order the kernel tests them.
const (
	// ReasonOutOfRange: a state is outside RESET..ERR or the type outside
	// the table (the kernel's callers refuse these before the table).
	ReasonOutOfRange Reason = iota + 1
	// ReasonCurState: IB_QP_CUR_STATE given while the current state is
	// not RTR, RTS, SQD or SQE (rule 1).
	ReasonCurState
	// ReasonPair: (cur, next) is not a valid transition (rule 2).
	ReasonPair
	// ReasonMask: required attributes are missing or attributes are
	// given that the transition does not allow (rules 3 and 4).
	ReasonMask
)

var reasonNames = [...]string{"", "out of range", "CUR_STATE not allowed", "transition not allowed", "attribute mask"}

// IsValid reports whether r is one of the defined reasons.
func (r Reason) IsValid() bool { return r >= ReasonOutOfRange && r <= ReasonMask }

// String returns a short description of r.
func (r Reason) String() string {
	if r.IsValid() {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// TransitionError reports why a QP modify failed the transition table. Its
// Unwrap returns Errno, so errors.Is(err, unix.EINVAL) holds, and its
// message names the transition and the bits to add or remove, e.g.
//
//	modify QP: RTR->RTS (RC): missing IB_QP_TIMEOUT|IB_QP_RETRY_CNT; not allowed IB_QP_PORT: invalid argument
type TransitionError struct {
	Cur, Next State      // the QP's current state and the requested one
	Type      Type       // the QP type the table was looked up for
	Mask      AttrMask   // the mask that was checked
	Reason    Reason     // which rule refused the transition
	Missing   AttrMask   // required bits absent from Mask (ReasonMask)
	Forbidden AttrMask   // bits of Mask the transition does not allow (ReasonMask, or CUR for ReasonCurState)
	Errno     unix.Errno // the kernel's errno, EINVAL; what Unwrap returns
}

// Error implements error.
func (e *TransitionError) Error() string {
	var b strings.Builder
	b.WriteString("modify QP: ")
	b.WriteString(e.Cur.Name())
	b.WriteString("->")
	b.WriteString(e.Next.Name())
	b.WriteString(" (")
	b.WriteString(e.Type.Name())
	b.WriteString("): ")
	switch e.Reason {
	case ReasonOutOfRange:
		switch {
		case !e.Cur.IsValid() || !e.Next.IsValid():
			b.WriteString("state out of range (RESET..ERR)")
		default:
			b.WriteString("unknown QP type")
		}
	case ReasonCurState:
		b.WriteString("IB_QP_CUR_STATE may only be given from RTR, RTS, SQD or SQE")
	case ReasonPair:
		b.WriteString("transition not allowed")
	case ReasonMask:
		if e.Missing != 0 {
			b.WriteString("missing ")
			b.WriteString(e.Missing.String())
		}
		if e.Forbidden != 0 {
			if e.Missing != 0 {
				b.WriteString("; ")
			}
			b.WriteString("not allowed ")
			b.WriteString(e.Forbidden.String())
		}
	default:
		b.WriteString("rejected")
	}
	b.WriteString(": ")
	b.WriteString(e.Errno.Error())
	return b.String()
}

// Unwrap returns the errno the kernel gives for this failure (EINVAL).
func (e *TransitionError) Unwrap() error { return e.Errno }

// Check gives the same verdict as ModifyIsOK, and on refusal says why: it
// returns nil or a *TransitionError (errno EINVAL, the kernel's answer to a
// false ib_modify_qp_is_ok) carrying the missing and forbidden bits.
func Check(cur, next State, t Type, mask AttrMask) error {
	fail := func(r Reason, missing, forbidden AttrMask) error {
		return &TransitionError{Cur: cur, Next: next, Type: t, Mask: mask, Reason: r,
			Missing: missing, Forbidden: forbidden, Errno: unix.EINVAL}
	}
	if !inTable(cur, next, t) {
		return fail(ReasonOutOfRange, 0, 0)
	}
	if mask&AttrCurState != 0 && !curAssertable(cur) {
		return fail(ReasonCurState, 0, AttrCurState)
	}
	req, opt, valid := Masks(cur, next, t)
	if !valid {
		return fail(ReasonPair, 0, 0)
	}
	missing, forbidden := req&^mask, mask&^(req|opt|AttrState)
	if missing == 0 && forbidden == 0 {
		return nil
	}
	return fail(ReasonMask, missing, forbidden)
}
