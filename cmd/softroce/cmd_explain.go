package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/softroce/softroce/qpstate"
)

func init() {
	register(command{
		name:     "explain",
		summary:  "explain whether a QP transition passes the kernel's ib_modify_qp_is_ok, and how to fix it",
		operands: "CUR NEXT [MASK...]",
		run:      runExplain,
	})
}

// runExplain checks CUR -> NEXT with MASK the way ib_modify_qp_is_ok does
// and prints the verdict, the transition's required and optional
// attributes, and on refusal the bits to add or remove. It exits 1 when the
// kernel would answer EINVAL.
func runExplain(e *env) error {
	args, stdout, stderr := e.args, e.stdout, e.stderr
	fs := newFlagSet(e, "explain")
	typeName := fs.String("type", "RC", "the QP type `TYPE`: RC, UC, UD, GSI, SMI, RAW_PACKET, XRC_INI, XRC_TGT, ... (kernel names too)")
	flagUsage := fs.Usage
	fs.Usage = func() {
		flagUsage()
		fmt.Fprint(stderr, `
CUR and NEXT are states (RESET, INIT, RTR, RTS, SQD, SQE, ERR or IB_QPS_*).
MASK lists attributes: kernel names (IB_QP_STATE|IB_QP_TIMEOUT), short names
(STATE,TIMEOUT,SQ_PSN; also MTU, MQRA, MDRA, MINRNR, DQPN, ...) or hex
(0x12e01), separated by "|", "," or spaces; flags may follow them.
Exit status 1 means EINVAL.

example: softroce explain -type RC RTR RTS STATE,TIMEOUT,SQ_PSN
`)
	}
	operands, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(operands) < 2 {
		fs.Usage()
		return errUsage
	}
	typ, err := qpstate.ParseType(*typeName)
	if err != nil {
		return usageErr(stderr, err)
	}
	cur, err := qpstate.ParseState(operands[0])
	if err != nil {
		return usageErr(stderr, err)
	}
	next, err := qpstate.ParseState(operands[1])
	if err != nil {
		return usageErr(stderr, err)
	}
	mask, err := qpstate.ParseAttrMask(strings.Join(operands[2:], ","))
	if err != nil {
		return usageErr(stderr, err)
	}
	if explain(stdout, cur, next, typ, mask) {
		return nil
	}
	return &exitError{code: 1}
}

func usageErr(stderr io.Writer, err error) error {
	fmt.Fprintf(stderr, "softroce explain: %v\n", err)
	return errUsage
}

// explain writes the verdict on (cur, next, typ, mask) to w and reports
// whether the modify passes.
func explain(w io.Writer, cur, next qpstate.State, typ qpstate.Type, mask qpstate.AttrMask) bool {
	err := qpstate.Check(cur, next, typ, mask)
	pair := fmt.Sprintf("%s->%s (%s)", cur.Name(), next.Name(), typ.Name())
	req, opt, valid := qpstate.Masks(cur, next, typ)
	if err == nil {
		fmt.Fprintf(w, "OK: modify QP %s with %v\n", pair, mask)
	} else {
		fmt.Fprintln(w, err)
	}
	if valid {
		fmt.Fprintf(w, "  required: %s (plus IB_QP_STATE)\n", maskOrNone(req))
		fmt.Fprintf(w, "  optional: %s\n", maskOrNone(opt))
	}
	if mask&qpstate.AttrState == 0 && err == nil && cur != next {
		fmt.Fprintf(w, "  note: IB_QP_STATE is not in the mask, so the QP would not move to %s\n", next.Name())
	}
	if mask&qpstate.AttrState == 0 {
		fmt.Fprintln(w, "  note: without IB_QP_STATE, rxe since Linux 6.4 skips the table; older rxe and hardware drivers check CUR->CUR")
	}
	var te *qpstate.TransitionError
	if !errors.As(err, &te) {
		return err == nil
	}
	switch te.Reason {
	case qpstate.ReasonOutOfRange:
		fmt.Fprintln(w, "  fix: use a state RESET..ERR and a QP type the kernel defines")
	case qpstate.ReasonCurState:
		fmt.Fprintln(w, "  fix: remove IB_QP_CUR_STATE; it may only be given when the current state is RTR, RTS, SQD or SQE")
	case qpstate.ReasonPair:
		var to []string
		for s := qpstate.StateReset; s <= qpstate.StateErr; s++ {
			if qpstate.ValidPair(cur, s) {
				to = append(to, s.Name())
			}
		}
		fmt.Fprintf(w, "  fix: from %s the valid next states are %s\n", cur.Name(), strings.Join(to, ", "))
	case qpstate.ReasonMask:
		// A modify that changes the state needs IB_QP_STATE too: the
		// table's required masks leave it out, but without it the QP
		// does not move.
		add := te.Missing
		if cur != next {
			add |= qpstate.AttrState &^ mask
		}
		var fix []string
		if add != 0 {
			fix = append(fix, "add "+add.String())
		}
		if te.Forbidden != 0 {
			fix = append(fix, "remove "+te.Forbidden.String())
		}
		fixed := (mask | add) &^ te.Forbidden
		fmt.Fprintf(w, "  fix: %s\n", strings.Join(fix, ", "))
		fmt.Fprintf(w, "  try: softroce explain -type %s %s %s %s\n", typ.Name(), cur.Name(), next.Name(),
			strings.ReplaceAll(fixed.ShortString(), "|", ","))
	}
	return false
}

func maskOrNone(m qpstate.AttrMask) string {
	if m == 0 {
		return "none"
	}
	return m.String()
}
