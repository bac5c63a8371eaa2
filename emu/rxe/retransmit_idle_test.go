package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
)

// TestRetransmitTimerOfAnIdleQPLapses checks the retransmit timer a QP
// leaves pending once everything it sent was acknowledged: it retries
// nothing when it fires, and a message sent while it is pending gets a
// full timeout of its own (no retry at the old deadline), then a retry at
// its own.
func TestRetransmitTimerOfAnIdleQPLapses(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{timeout: 14, retry: 7})
	d := Quirks{}.RetransmitTimeout(14)
	src, _, smr := p.a.buf(64, 1)
	dst, _, dmr := p.b.buf(64, 0)
	wr := emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 64, LKey: smr.LKey()}}, RemoteAddr: dst, RKey: dmr.RKey()}
	p.a.postSend(c.qa, wr)
	p.settle()
	if wcs := poll(p.a.scq); len(wcs) != 1 || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("first WRITE: %+v", wcs)
	}
	// Most of the timeout later, a second WRITE whose ACK is held back
	// (b does not process it yet).
	p.clk.Advance(d * 9 / 10)
	p.a.postSend(c.qa, wr)
	p.clk.Advance(d / 5) // past the first WRITE's deadline
	p.a.r.Poll()
	if n := p.a.counter("completer_retry_err"); n != 0 {
		t.Fatalf("%d retries at the deadline of a WRITE already acknowledged", n)
	}
	// Past the second WRITE's own deadline: one retry.
	p.clk.Advance(d)
	if n := p.a.counter("completer_retry_err"); n != 1 {
		t.Fatalf("%d retries after the second WRITE's timeout, want 1", n)
	}
	p.settle()
	if wcs := poll(p.a.scq); len(wcs) != 1 || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("second WRITE: %+v", wcs)
	}
}
