package rxetest_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe/rxetest"
	"github.com/softroce/softroce/qpstate"
	"golang.org/x/sys/unix"
)

// Example brings an RC pair to RTS on two devices, WRITEs from A's buffer
// into B's, tries a transition the state machine refuses, then moves A to
// ERR and sees a posted receive flushed.
func Example() {
	l, err := rxetest.NewLink(rxetest.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	a, b, err := l.Pair(qpstate.TypeRC, 4096)
	if err != nil {
		panic(err)
	}
	// The steps are plain attributes and masks: a test may change any of
	// them before applying.
	steps := a.Steps(b)
	steps[2].Attr.Timeout = 18
	if err := errors.Join(a.Apply(steps...), b.Apply(b.Steps(a)...)); err != nil {
		panic(err)
	}

	copy(a.Buf, "written by A")
	a.PostSend([]emu.SendWR{{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{a.SGE(0, 12)}, RemoteAddr: b.Addr, RKey: b.MR.RKey()}})
	wcs, err := rxetest.Wait(l.A.CQ, 1, 5*time.Second)
	fmt.Println(wcs[0].Status, err, string(b.Buf[:12]))

	// RTS -> RTR is not in the transition table.
	err = a.Modify(&qpstate.Attr{QPState: qpstate.StateRTR}, qpstate.AttrState)
	var te *qpstate.TransitionError
	fmt.Println(errors.As(err, &te), errors.Is(err, unix.EINVAL))

	a.PostRecv([]emu.RecvWR{{WRID: 2, SGList: []emu.SGE{a.SGE(0, 64)}}})
	if err := a.Modify(&qpstate.Attr{QPState: qpstate.StateErr}, qpstate.AttrState); err != nil {
		panic(err)
	}
	wcs, err = rxetest.Wait(l.A.CQ, 1, 5*time.Second)
	fmt.Println(wcs[0].WRID, wcs[0].Status, err)
	// Output:
	// IB_WC_SUCCESS <nil> written by A
	// true true
	// 2 IB_WC_WR_FLUSH_ERR <nil>
}
