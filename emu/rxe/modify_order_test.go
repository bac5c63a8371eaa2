package rxe

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestModifyCheckOrder pins the order QP.Modify documents: the AV's value
// checks run before the transition table, so RTS->RTS with IB_QP_AV (which
// the table refuses for RC) and a zero AV reports the AV as a
// *qpstate.ModifyError; with a valid AV the table's *qpstate.TransitionError
// comes back. Both unwrap to EINVAL.
func TestModifyCheckOrder(t *testing.T) {
	e := newEnv(t)
	qp := e.qp(qpstate.TypeRC, nil)
	e.toRTS(qp)
	mask := qpstate.AttrState | qpstate.AttrAV

	err := qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS}, mask)
	var me *qpstate.ModifyError
	if !errors.As(err, &me) || me.Attr != qpstate.AttrAV || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("RTS->RTS with a zero AV: %v (%T), want a *qpstate.ModifyError on IB_QP_AV, EINVAL", err, err)
	}
	var te *qpstate.TransitionError
	if errors.As(err, &te) {
		t.Fatalf("RTS->RTS with a zero AV reported the table: %v", err)
	}

	err = qp.Modify(&qpstate.Attr{QPState: qpstate.StateRTS, AHAttr: av()}, mask)
	if !errors.As(err, &te) || te.Forbidden&qpstate.AttrAV == 0 || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("RTS->RTS with a valid AV: %v (%T), want a *qpstate.TransitionError forbidding IB_QP_AV", err, err)
	}
	if s := e.state(qp); s != qpstate.StateRTS {
		t.Fatalf("state %v after two refused modifies, want RTS", s)
	}
}
