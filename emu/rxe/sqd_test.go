package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// TestSQDDrain: SQD holds new WQEs, lets the outstanding ones finish on
// the wire and raises IB_EVENT_SQ_DRAINED when the last ACK arrives; back
// in RTS the held WQE goes out.
func TestSQDDrain(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	p.a.takeEvents()
	p.sendN(c, 3000, 4096, 0)
	p.a.r.Poll() // the SEND is on the wire, not yet ACKed
	a := qpstate.Attr{QPState: qpstate.StateSQD}
	if err := c.qa.Modify(&a, qpstate.AttrState); err != nil {
		t.Fatal(err)
	}
	p.sendN(c, 8, 64, 0) // held
	if evs := p.a.takeEvents(); len(evs) != 0 {
		t.Fatalf("events before the ACK: %v", evs)
	}
	p.settle()
	if evs := p.a.takeEvents(); len(evs) != 1 || evs[0] != emu.EventSQDrained {
		t.Fatalf("events %v, want SQ_DRAINED", evs)
	}
	wantOps(t, "while draining", p.a.rec.take(t), wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast)
	a.QPState = qpstate.StateRTS
	if err := c.qa.Modify(&a, qpstate.AttrState); err != nil {
		t.Fatal(err)
	}
	p.settle()
	wantOps(t, "after RTS", p.a.rec.take(t), wire.RCSendOnly)
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess)
}
