package rxe

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// TestAtomics: CMP_SWAP and FETCH_ADD; duplicate FETCH_ADD replays the saved
// value (the responder's atomic replay: memory changes once).
func TestAtomics(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	tgt, tb, mrb := p.b.buf(16, 0)
	binary.LittleEndian.PutUint64(tb, 100)
	res, rb, mra := p.a.buf(16, 0)
	p.a.postSend(c.qa,
		emu.SendWR{WRID: 1, Opcode: emu.WRAtomicCmpAndSwp, SendFlags: emu.SendSignaled, RemoteAddr: tgt, RKey: mrb.RKey(),
			CompareAdd: 100, Swap: 7, SGList: []emu.SGE{{Addr: res, Length: 8, LKey: mra.LKey()}}},
		emu.SendWR{WRID: 2, Opcode: emu.WRAtomicFetchAndAdd, SendFlags: emu.SendSignaled, RemoteAddr: tgt, RKey: mrb.RKey(),
			CompareAdd: 5, SGList: []emu.SGE{{Addr: res + 8, Length: 8, LKey: mra.LKey()}}})
	p.settle()
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess)
	if v := binary.LittleEndian.Uint64(tb); v != 12 {
		t.Errorf("target %d, want 12", v)
	}
	if a, b := binary.LittleEndian.Uint64(rb), binary.LittleEndian.Uint64(rb[8:]); a != 100 || b != 7 {
		t.Errorf("originals %d %d, want 100 7", a, b)
	}
	req := p.a.rec.take(t)
	p.b.rec.take(t)
	// A duplicate FETCH_ADD: replay the frame itself.
	if _, err := p.a.end.WritePackets([][]byte{req[1].Frame()}); err != nil {
		t.Fatal(err)
	}
	p.settle()
	resp := p.b.rec.take(t)
	wantOps(t, "duplicate", resp, wire.RCAtomicAcknowledge)
	if resp[0].AtomicAckETH().OrigData() != 7 {
		t.Errorf("replayed original %d, want 7", resp[0].AtomicAckETH().OrigData())
	}
	if v := binary.LittleEndian.Uint64(tb); v != 12 {
		t.Errorf("target %d after the duplicate, want 12", v)
	}
	if n := p.b.counter("duplicate_request"); n != 1 {
		t.Errorf("duplicate_request %d", n)
	}
}

// TestReadCreditsAndFence: max_rd_atomic 1 holds the second READ; a fenced
// WRITE waits for the READ.
func TestReadCreditsAndFence(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{rdAtomic: 1})
	rsrc, _, mrb := p.b.buf(64, 5)
	dst, _, mra := p.a.buf(64, 0)
	rd := emu.SendWR{Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mra.LKey()}}, RemoteAddr: rsrc, RKey: mrb.RKey()}
	wr := emu.SendWR{WRID: 3, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled | emu.SendFence,
		SGList: []emu.SGE{{Addr: dst, Length: 8, LKey: mra.LKey()}}, RemoteAddr: rsrc, RKey: mrb.RKey()}
	rd2 := rd
	rd2.WRID = 2
	p.a.postSend(c.qa, rd, rd2, wr)
	wantOps(t, "before any response", p.a.rec.take(t), wire.RCRDMAReadRequest)
	p.settle()
	wantOps(t, "after", p.a.rec.take(t), wire.RCRDMAReadRequest, wire.RCRDMAWriteOnly)
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess, emu.WCSuccess)
}

// TestRdAtomicZeroStalls: max_rd_atomic 0 holds READs forever (rxe has no
// credit for them, an rxe quirk).
func TestRdAtomicZeroStalls(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{rdAtomic: 1})
	a := qpstate.Attr{MaxRdAtomic: 0}
	if err := c.qa.Modify(&a, qpstate.AttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
	rsrc, _, mrb := p.b.buf(64, 5)
	dst, _, mra := p.a.buf(64, 0)
	p.a.postSend(c.qa, emu.SendWR{Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mra.LKey()}}, RemoteAddr: rsrc, RKey: mrb.RKey()})
	p.run(time.Second)
	if n := len(p.a.rec.take(t)); n != 0 || len(poll(p.a.scq)) != 0 {
		t.Errorf("%d packets", n)
	}
}

// TestAtomicWrite: ATOMIC_WRITE stores 8 bytes and completes on the empty
// READ_RESPONSE_ONLY.
func TestAtomicWrite(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	src, data, mra := p.a.buf(8, 0x41)
	dst, got, mrb := p.b.buf(8, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRAtomicWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey()})
	p.settle()
	wantOps(t, "requests", p.a.rec.take(t), wire.RCAtomicWrite)
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCRDMAReadResponseOnly)
	if resp[0].PayloadLen() != 0 {
		t.Error("payload in the ATOMIC_WRITE response")
	}
	wcs := poll(p.a.scq)
	wantWC(t, "send", wcs, emu.WCSuccess)
	if wcs[0].Opcode != emu.WCAtomicWrite || !bytes.Equal(got, data) {
		t.Errorf("WC %+v, target %x", wcs[0], got)
	}
}

// TestMisalignedAtomicNAK: a raw COMPARE_SWAP at a VA that is not 8-byte
// aligned gets NAK 0x61.
func TestMisalignedAtomicNAK(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 40})
	dst, _, mrb := p.b.buf(64, 0)
	p.inject(t, p.rawFrame(t, c, wire.RCCompareSwap, 40, nil, func(f *wire.Frame) {
		f.AtomicETH = wire.AtomicETHFields{VA: dst + 4, RKey: mrb.RKey(), SwapAdd: 1}
	}))
	wantSyndrome(t, p.b.rec.take(t), 0x61)
}

// TestAtomicWriteInline: ATOMIC_WRITE's 8 bytes may come with the WR
// itself (inline, as rxe takes a user WQE's from dma.atomic_wr), taken at
// post time and whatever the QP's max_inline_data.
func TestAtomicWriteInline(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	src, data, _ := p.a.buf(8, 0x5A)
	want := bytes.Clone(data)
	dst, got, mrb := p.b.buf(8, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRAtomicWrite, SendFlags: emu.SendSignaled | emu.SendInline,
		SGList: []emu.SGE{{Addr: src, Length: 8}}, RemoteAddr: dst, RKey: mrb.RKey()})
	clear(data)
	p.settle()
	wcs := poll(p.a.scq)
	wantWC(t, "send", wcs, emu.WCSuccess)
	if !bytes.Equal(got, want) {
		t.Errorf("target %x, want the 8 bytes posted inline %x", got, want)
	}
}
