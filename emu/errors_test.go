package emu_test

import (
	"errors"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestErrorType: the core and the driver report a verb's failure with the
// same *emu.Error, which carries the operation and the reason and unwraps
// to the errno.
func TestErrorType(t *testing.T) {
	d := newDevice(t)
	pd := must[*emu.PD](t)(d.AllocPD(0))
	cq := must[*emu.CQ](t)(d.CreateCQ(emu.CQInitAttr{CQE: 4}))
	qp := must[*emu.QP](t)(pd.CreateQP(&emu.QPInitAttr{QPType: qpstate.TypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: qpstate.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	for _, tc := range []struct {
		name  string
		err   error
		errno unix.Errno
		op    string
	}{
		{"core", pd.Dealloc(), unix.EBUSY, "dealloc PD"},
		{"driver", func() error { _, err := qp.PostSend([]emu.SendWR{{Opcode: emu.WRSend}}); return err }(), unix.EINVAL, "rxe: post send QP"},
	} {
		var e *emu.Error
		if !errors.As(tc.err, &e) {
			t.Fatalf("%s: %v (%T) is not an *emu.Error", tc.name, tc.err, tc.err)
		}
		if !errors.Is(tc.err, tc.errno) || e.Errno != tc.errno {
			t.Errorf("%s: %v: errno %v, want %v", tc.name, tc.err, e.Errno, tc.errno)
		}
		if len(e.Op) < len(tc.op) || e.Op[:len(tc.op)] != tc.op || e.Reason == "" {
			t.Errorf("%s: op %q reason %q, want op %q... and a reason", tc.name, e.Op, e.Reason, tc.op)
		}
		if got, want := e.Error(), e.Op+": "+e.Reason+": "+tc.errno.Error(); got != want {
			t.Errorf("%s: message %q, want %q", tc.name, got, want)
		}
	}
}
