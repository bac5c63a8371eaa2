package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
)

// TestRetransmitTimeoutProcessesReceivedAckFirst checks a timeout that
// fires while the ACK it waits for has arrived but is not processed yet
// (the device's reader has not run: a loaded machine): the requester
// does not resend the window, as rxe's completer, which takes the queued
// response before acting on the timeout, does not; the ACK then completes
// the WRITE with no duplicate at the responder and no retry counted.
func TestRetransmitTimeoutProcessesReceivedAckFirst(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{timeout: 14, retry: 1})
	d := Quirks{}.RetransmitTimeout(14)
	src, _, smr := p.a.buf(8192, 1)
	dst, _, dmr := p.b.buf(8192, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 8192, LKey: smr.LKey()}}, RemoteAddr: dst, RKey: dmr.RKey()})
	p.b.r.Poll() // b executes the WRITE; its ACK waits on a's link
	if got := ops(p.b.rec.take(t)); len(got) != 1 {
		t.Fatalf("b wrote %v, want one ACK", got)
	}
	p.a.rec.take(t)
	p.clk.Advance(d)
	if n := p.a.counter("completer_retry_err"); n != 0 {
		t.Errorf("completer_retry_err %d with the ACK waiting, want 0", n)
	}
	if got := ops(p.a.rec.take(t)); len(got) != 0 {
		t.Errorf("a resent %v with the ACK waiting", got)
	}
	p.settle()
	if wcs := poll(p.a.scq); len(wcs) != 1 || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("WRITE completions %+v, want one success", wcs)
	}
	p.run(3 * d)
	if n := p.a.counter("completer_retry_err"); n != 0 {
		t.Errorf("completer_retry_err %d after the ACK, want 0", n)
	}
	if n := p.b.counter("duplicate_request"); n != 0 {
		t.Errorf("duplicate_request %d at b, want 0", n)
	}
}

// TestRetransmitTimeoutPutsOffOnce checks that frames waiting on the link
// which acknowledge nothing put a timeout's retry off by one timeout only:
// the next expiry resends although they still wait, and the WRITE
// completes once both devices run.
func TestRetransmitTimeoutPutsOffOnce(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{timeout: 14, retry: 7})
	d := Quirks{}.RetransmitTimeout(14)
	src, _, smr := p.a.buf(64, 1)
	dst, _, dmr := p.b.buf(64, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 64, LKey: smr.LKey()}}, RemoteAddr: dst, RKey: dmr.RKey()})
	p.a.rec.take(t)
	// A frame for a that is no response (an ARP-sized runt of zeros),
	// left unread; b does not run, so no ACK comes.
	junk := make([]byte, 60)
	copy(junk, p.a.mac[:])
	if _, err := p.b.end.WritePackets([][]byte{junk}); err != nil {
		t.Fatal(err)
	}
	p.clk.Advance(d)
	if n := p.a.counter("completer_retry_err"); n != 0 {
		t.Fatalf("completer_retry_err %d at the first timeout with a frame waiting, want 0", n)
	}
	p.clk.Advance(d)
	if n := p.a.counter("completer_retry_err"); n != 1 {
		t.Fatalf("completer_retry_err %d at the second timeout, want 1", n)
	}
	if got := ops(p.a.rec.take(t)); len(got) != 1 {
		t.Errorf("a resent %v, want the WRITE once", got)
	}
	p.settle()
	if wcs := poll(p.a.scq); len(wcs) != 1 || wcs[0].Status != emu.WCSuccess {
		t.Fatalf("WRITE completions %+v, want one success", wcs)
	}
}
