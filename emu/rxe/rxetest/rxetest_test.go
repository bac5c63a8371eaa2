package rxetest

import (
	"errors"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// TestPairs brings up a pair of each type with Connect and moves one SEND
// from A to B: the kit's steps are what each type needs.
func TestPairs(t *testing.T) {
	for _, typ := range []qpstate.Type{qpstate.TypeRC, qpstate.TypeUC, qpstate.TypeUD} {
		t.Run(typ.Name(), func(t *testing.T) {
			l, err := NewLink(Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			a, b, err := l.Pair(typ, 4096)
			if err != nil {
				t.Fatal(err)
			}
			if err := Connect(a, b); err != nil {
				t.Fatal(err)
			}
			for _, q := range []*QP{a, b} {
				at, _, err := q.Query(qpstate.AttrState)
				if err != nil || at.QPState != qpstate.StateRTS {
					t.Fatalf("QP %#x: %v, %v; want RTS", q.QPNum(), at.QPState, err)
				}
			}
			off := 0
			wr := emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, SGList: []emu.SGE{a.SGE(0, 5)}}
			if typ == qpstate.TypeUD {
				off = emu.GRHSize
				if wr.AH, err = a.AH(b); err != nil {
					t.Fatal(err)
				}
				wr.RemoteQPN, wr.RemoteQKey = b.QPNum(), QKey
			}
			if _, err := b.PostRecv([]emu.RecvWR{{WRID: 2, SGList: []emu.SGE{b.SGE(0, 64+off)}}}); err != nil {
				t.Fatal(err)
			}
			copy(a.Buf, "hello")
			if _, err := a.PostSend([]emu.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			wcs, err := Wait(l.B.CQ, 1, 5*time.Second)
			if err != nil || wcs[0].Status != emu.WCSuccess || string(b.Buf[off:off+5]) != "hello" {
				t.Fatalf("receive: %+v, %v, %q", wcs, err, b.Buf[off:off+5])
			}
			if wcs, err := Wait(l.A.CQ, 1, 5*time.Second); err != nil || wcs[0].Status != emu.WCSuccess {
				t.Fatalf("send: %+v, %v", wcs, err)
			}
		})
	}
}

// TestStepsEditable: a step the test breaks fails with the core's error,
// naming the state it aimed at; the QP stays where it was.
func TestStepsEditable(t *testing.T) {
	l, err := NewLink(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, b, err := l.Pair(qpstate.TypeRC, 64)
	if err != nil {
		t.Fatal(err)
	}
	steps := a.Steps(b)
	steps[1].Mask &^= qpstate.AttrDestQPN // RTR without IB_QP_DEST_QPN
	err = a.Apply(steps...)
	var te *qpstate.TransitionError
	if !errors.As(err, &te) || te.Missing&qpstate.AttrDestQPN == 0 || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Apply = %v, want a TransitionError missing IB_QP_DEST_QPN", err)
	}
	if at, _, _ := a.Query(qpstate.AttrState); at.QPState != qpstate.StateInit {
		t.Fatalf("state %v after the refused RTR, want INIT", at.QPState)
	}
}

// TestWaitDeadline: Wait returns what arrived and ETIMEDOUT when fewer
// than n completions come.
func TestWaitDeadline(t *testing.T) {
	l, err := NewLink(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	wcs, err := Wait(l.A.CQ, 2, 20*time.Millisecond)
	if len(wcs) != 0 || !errors.Is(err, unix.ETIMEDOUT) {
		t.Fatalf("Wait = %v, %v; want none and ETIMEDOUT", wcs, err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("Wait returned after %v, before its deadline", d)
	}
}
