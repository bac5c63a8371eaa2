package rxe

import (
	"bytes"
	"slices"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/wire"
)

// TestOutOfSequenceNAK: the responder sees N+1 then N+2 after N was lost: one
// NAK, the requester goes back to N.
func TestOutOfSequenceNAK(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 50, retry: 7})
	p.a.rec.off = true
	// Drop the first frame a writes.
	flt := link.NewFaults(p.a.rec.Link, link.FaultConfig{Schedule: link.ByIndex(map[uint64]link.Action{0: link.Drop})})
	p.a.rec.Link = flt
	p.a.rec.off = false
	var sent, got [][]byte
	for range 3 {
		d, g := p.sendN(c, 8, 8, 0)
		sent, got = append(sent, d), append(got, g)
	}
	p.settle()
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCAcknowledge, wire.RCAcknowledge, wire.RCAcknowledge, wire.RCAcknowledge)
	if resp[0].AETH().Syndrome() != 0x60 || resp[0].BTH().PSN() != 50 {
		t.Errorf("NAK %v PSN %d", resp[0].AETH().Syndrome(), resp[0].BTH().PSN())
	}
	if n := p.b.counter("out_of_seq_request"); n != 1 {
		t.Errorf("out_of_seq_request %d", n)
	}
	req := p.a.rec.take(t)
	var psns []uint32
	for i := range req {
		psns = append(psns, req[i].BTH().PSN())
	}
	if !slices.Equal(psns, []uint32{50, 51, 52, 50, 51, 52}) {
		t.Errorf("request PSNs %v", psns)
	}
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess, emu.WCSuccess)
	wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess, emu.WCSuccess, emu.WCSuccess)
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Errorf("message %d: received %x, sent %x", i, got[i], sent[i])
		}
	}
	if n := p.a.counter("rcvd_seq_err"); n != 0 {
		t.Errorf("rcvd_seq_err %d (the NAK did not advance)", n)
	}
}

// TestDuplicateSendReACKed: a duplicate SEND_ONLY is re-ACKed, not delivered.
func TestDuplicateSendReACKed(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 70})
	p.sendN(c, 8, 8, 0)
	p.settle()
	req := p.a.rec.take(t)
	p.b.rec.take(t)
	// A receive the duplicate must not consume.
	dst, _, mrb := p.b.buf(8, 0)
	p.b.postRecv(c.qb, emu.RecvWR{WRID: 2, SGList: []emu.SGE{{Addr: dst, Length: 8, LKey: mrb.LKey()}}})
	p.a.end.WritePackets([][]byte{req[0].Frame()})
	p.settle()
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCAcknowledge)
	if resp[0].BTH().PSN() != 70 || resp[0].AETH().MSN() != 1 {
		t.Errorf("ACK PSN %d MSN %d", resp[0].BTH().PSN(), resp[0].AETH().MSN())
	}
	wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
	if n := p.b.counter("duplicate_request"); n != 1 {
		t.Errorf("duplicate_request %d", n)
	}
}

// TestCoalescedACKCompletesAll: the first two ACKs are lost; the third completes
// all three WQEs in order.
func TestCoalescedACKCompletesAll(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	p.b.rec.Link = link.NewFaults(p.b.rec.Link, link.FaultConfig{Schedule: link.ByIndex(map[uint64]link.Action{0: link.Drop, 1: link.Drop})})
	for range 3 {
		p.sendN(c, 8, 8, 0)
	}
	p.settle()
	wcs := poll(p.a.scq)
	wantWC(t, "send", wcs, emu.WCSuccess, emu.WCSuccess, emu.WCSuccess)
	if len(p.a.rec.take(t)) != 3 {
		t.Error("retransmissions")
	}
}

// TestSendWindow129PSNs: with a silent responder at most 129 PSNs go out.
func TestSendWindow129PSNs(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{maxSend: 512})
	p.b.r.Close()
	src, _, mra := p.a.buf(8, 1)
	var wrs []emu.SendWR
	for i := range 200 {
		wrs = append(wrs, emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
	}
	p.a.postSend(c.qa, wrs...)
	p.a.r.Poll()
	if n := len(p.a.rec.take(t)); n != 129 {
		t.Errorf("%d packets sent, want 129", n)
	}
}

// TestACKMSNCountsMessages: ACK MSNs count messages from 1.
func TestACKMSNCountsMessages(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	for range 3 {
		p.sendN(c, 8, 8, 0)
	}
	p.settle()
	resp := p.b.rec.take(t)
	for i := range resp {
		if resp[i].AETH().MSN() != uint32(i+1) {
			t.Errorf("ACK %d MSN %d", i, resp[i].AETH().MSN())
		}
	}
}

// TestPSNWrap: sq_psn 0xFFFFFE, a 3-packet SEND wraps to 0.
func TestPSNWrap(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 0xFFFFFE})
	p.sendN(c, 2500, 4096, 0)
	p.settle()
	req := p.a.rec.take(t)
	var psns []uint32
	for i := range req {
		psns = append(psns, req[i].BTH().PSN())
	}
	if len(psns) != 3 || psns[0] != 0xFFFFFE || psns[1] != 0xFFFFFF || psns[2] != 0 {
		t.Errorf("PSNs %x", psns)
	}
	resp := p.b.rec.take(t)
	if len(resp) != 1 || resp[0].BTH().PSN() != 0 {
		t.Errorf("ACK PSN")
	}
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
}
