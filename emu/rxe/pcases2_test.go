package rxe

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// rawFrame builds a request from a to b's QP with mutate applied to the
// frame description.
func (p *pair) rawFrame(t *testing.T, c conn, op wire.Opcode, psn uint32, payload []byte, mutate func(*wire.Frame)) []byte {
	t.Helper()
	f := wire.Frame{DstMAC: p.b.mac, SrcMAC: p.a.mac, Src: p.a.ip, Dst: p.b.ip, HopLimit: 64,
		SrcPort: 0xC000, Payload: payload,
		BTH: wire.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: c.qb.QPNum(), PSN: psn, AckReq: true}}
	if mutate != nil {
		mutate(&f)
	}
	b := make([]byte, f.Len())
	if _, err := wire.Build(b, &f); err != nil {
		t.Fatal(err)
	}
	return b
}

func (p *pair) inject(t *testing.T, frames ...[]byte) {
	t.Helper()
	if _, err := p.a.end.WritePackets(frames); err != nil {
		t.Fatal(err)
	}
	p.settle()
}

// TestBadFrames: frames rxe drops before the responder (P23-P26, P44),
// each counted and none stalling the QP: a good SEND afterwards still
// completes.
func TestBadFrames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		op      wire.Opcode
		mutate  func(*wire.Frame)
		raw     func([]byte) []byte
		accept  bool // the frame is processed (ACKed)
		badPKey uint32
		rcvd    uint64 // rcvd_pkts after the frame
	}{
		{name: "P23-bad-ICRC", op: wire.RCSendOnly, raw: func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{name: "P23-corrupt-payload", op: wire.RCSendOnly, raw: func(b []byte) []byte { b[len(b)-6] ^= 0x80; return b }},
		{name: "P24-TVer-1", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.TVer = 1 }},
		{name: "P24-PKey-8001", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.PKey = 0x8001 }, badPKey: 1},
		{name: "P24-PKey-7FFF", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.PKey = 0x7FFF }, accept: true, rcvd: 1},
		{name: "P25-QPN-0", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.DestQP = 0 }},
		{name: "P25-unknown-QPN", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.DestQP = 0x1234 }},
		{name: "P26-wrong-source-IP", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.Src = netip.MustParseAddr("10.0.0.9") }},
		{name: "wrong-destination-IP", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.Dst = netip.MustParseAddr("10.0.0.7") }},
		{name: "UC-opcode-to-RC-QP", op: wire.UCSendOnly},
		{name: "truncated", op: wire.RCSendOnly, raw: func(b []byte) []byte { return b[:40] }},
		{name: "unsolicited-ACK", op: wire.RCAcknowledge, mutate: func(f *wire.Frame) { f.AETH.Syndrome = 0x1F }, rcvd: 1},
		{name: "unsolicited-read-response", op: wire.RCRDMAReadResponseOnly, rcvd: 1},
		{name: "P44-CNP", op: wire.CNP, mutate: func(f *wire.Frame) { f.BTH.AckReq = false; f.BTH.PSN = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{sqpsnA: 40})
			dst, _, mrb := p.b.buf(64, 0)
			p.b.postRecv(c.qb, emu.RecvWR{WRID: 1, SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}},
				emu.RecvWR{WRID: 2, SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}})
			var pay []byte
			if tc.op.HasPayload() {
				pay = []byte("hello")
			}
			b := p.rawFrame(t, c, tc.op, 40, pay, tc.mutate)
			if tc.raw != nil {
				b = tc.raw(b)
			}
			p.inject(t, b)
			resp := p.b.rec.take(t)
			if (len(resp) > 0) != tc.accept {
				t.Errorf("responses %v, accept %v", ops(resp), tc.accept)
			}
			if got := p.b.counter("rcvd_pkts"); got != tc.rcvd {
				t.Errorf("rcvd_pkts %d, want %d", got, tc.rcvd)
			}
			pa, _ := p.b.dev.QueryPort(1)
			if pa.BadPKeyCntr != tc.badPKey {
				t.Errorf("bad_pkey_cntr %d, want %d", pa.BadPKeyCntr, tc.badPKey)
			}
			// The QPs still work.
			if tc.accept {
				a := qpstate.Attr{SQPSN: 41}
				if err := c.qa.Modify(&a, qpstate.AttrSQPSN); err != nil {
					t.Fatal(err)
				}
			}
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 3, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			wantWC(t, "send after the bad frame", poll(p.a.scq), emu.WCSuccess)
		})
	}
}

// TestP28MissingFirst: SEND_MIDDLE at the expected PSN: NAK 0x61.
func TestP28MissingFirst(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 40})
	p.inject(t, p.rawFrame(t, c, wire.RCSendMiddle, 40, make([]byte, 1024), nil))
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCAcknowledge)
	if resp[0].AETH().Syndrome() != 0x61 || p.b.state(c.qb) != qpstate.StateErr {
		t.Errorf("syndrome %v state %v", resp[0].AETH().Syndrome(), p.b.state(c.qb))
	}
}

// TestP29RecvOverflow: 200 bytes into a 100-byte buffer (quirk 15, both
// settings).
func TestP29RecvOverflow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        Quirks
		recv     emu.WCStatus
		syn      wire.Syndrome
		sendStat emu.WCStatus
	}{
		{"rxe", Quirks{}, emu.WCLocQPOpErr, 0x63, emu.WCRemOpErr},
		{"ibta", Quirks{RecvOverflowIBTA: true}, emu.WCLocLenErr, 0x61, emu.WCRemInvReqErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksB: tc.q})
			c := p.connect(qpOpts{})
			p.sendN(c, 200, 100, 0)
			p.settle()
			wantSyndrome(t, p.b.rec.take(t), tc.syn)
			wantWC(t, "recv", poll(p.b.rcq), tc.recv)
			wantWC(t, "send", poll(p.a.scq), tc.sendStat)
			if p.a.state(c.qa) != qpstate.StateErr || p.b.state(c.qb) != qpstate.StateErr {
				t.Error("QPs not in ERR")
			}
		})
	}
}

// TestP30SendWithInvalidate: an unknown IETH rkey is ACKed (rxe) or NAKed
// (InvalidateNAK); a valid one invalidates a fast-reg MR.
func TestP30SendWithInvalidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        Quirks
		good     bool
		syn      wire.Syndrome
		sendStat emu.WCStatus
		recvStat emu.WCStatus
	}{
		{"unknown-rkey-rxe", Quirks{}, false, 0x1F, emu.WCSuccess, emu.WCRemInvReqErr},
		{"unknown-rkey-ibta", Quirks{InvalidateNAK: true}, false, 0x61, emu.WCRemInvReqErr, emu.WCRemInvReqErr},
		{"valid", Quirks{}, true, 0x1F, emu.WCSuccess, emu.WCSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksB: tc.q})
			c := p.connect(qpOpts{})
			rkey := uint32(0xABCDEF01)
			if tc.good {
				m, err := p.b.pd.AllocMR(emu.MRTypeMemReg, 4)
				if err != nil {
					t.Fatal(err)
				}
				p.b.postSend(c.qb, emu.SendWR{WRID: 9, Opcode: emu.WRRegMR, MR: m, Key: m.RKey(), Access: allAccess})
				rkey = m.RKey()
			}
			src, _, mra := p.a.buf(8, 1)
			dst, _, mrb := p.b.buf(64, 0)
			p.b.postRecv(c.qb, emu.RecvWR{WRID: 1, SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}})
			p.a.postSend(c.qa, emu.SendWR{WRID: 2, Opcode: emu.WRSendWithInv, SendFlags: emu.SendSignaled,
				InvalidateRKey: rkey, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			wantSyndrome(t, p.b.rec.take(t), tc.syn)
			wantWC(t, "send", poll(p.a.scq), tc.sendStat)
			rw := poll(p.b.rcq)
			wantWC(t, "recv", rw, tc.recvStat)
			if rw[0].InvalidateRKey != rkey || rw[0].WCFlags&emu.WCWithInvalidate == 0 {
				t.Errorf("recv WC %+v", rw[0])
			}
			if got := p.b.state(c.qb) == qpstate.StateErr; got == tc.good {
				t.Errorf("responder state %v", p.b.state(c.qb))
			}
		})
	}
}

// TestP31CoalescedACK: the first two ACKs are lost; the third completes
// all three WQEs in order.
func TestP31CoalescedACK(t *testing.T) {
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

// TestP32ReadRetry: a READ then a SEND; the READ's response is lost, the
// SEND's ACK triggers a retry from the READ (retry_cnt -1), which succeeds.
func TestP32ReadRetry(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{retry: 3})
	p.b.rec.Link = link.NewFaults(p.b.rec.Link, link.FaultConfig{Schedule: link.ByIndex(map[uint64]link.Action{0: link.Drop})})
	rsrc, data, mrb := p.b.buf(100, 5)
	dst, got, mra := p.a.buf(100, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: dst, Length: 100, LKey: mra.LKey()}}, RemoteAddr: rsrc, RKey: mrb.RKey()})
	p.sendN(c, 8, 8, 0)
	p.settle()
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess)
	if !bytes.Equal(got, data) {
		t.Error("read data")
	}
	if n := p.a.counter("completer_retry_err"); n != 1 {
		t.Errorf("completer_retry_err %d", n)
	}
	wantOps(t, "requests", p.a.rec.take(t), wire.RCRDMAReadRequest, wire.RCSendOnly, wire.RCRDMAReadRequest, wire.RCSendOnly)
}

// TestP37Window: with a silent responder at most 129 PSNs go out.
func TestP37Window(t *testing.T) {
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

// TestP38P39ReadCredits: max_rd_atomic 1 holds the second READ; a fenced
// WRITE waits for the READ.
func TestP38P39ReadCredits(t *testing.T) {
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

// TestP42MSN: ACK MSNs count messages from 1.
func TestP42MSN(t *testing.T) {
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

// TestP45PSNWrap: sq_psn 0xFFFFFE, a 3-packet SEND wraps to 0.
func TestP45PSNWrap(t *testing.T) {
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

// TestRNRDelayQuirk: code 25 waits 61.41 ms (rxe) or 61.44 ms (IBTA);
// Tick rounds timers up.
func TestRNRDelayQuirk(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    Quirks
		code uint8
		want time.Duration
	}{
		{"code25-rxe", Quirks{}, 25, 61410 * time.Microsecond},
		{"code25-ibta", Quirks{RNRCode25IBTA: true}, 25, 61440 * time.Microsecond},
		{"code12", Quirks{}, 12, 640 * time.Microsecond},
		{"code0", Quirks{}, 0, 655360 * time.Microsecond},
		{"code12-tick4ms", Quirks{Tick: 4 * time.Millisecond}, 12, 4 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.q.RNRDelay(tc.code); got != tc.want {
				t.Errorf("RNRDelay(%d) = %v, want %v", tc.code, got, tc.want)
			}
			// On the wire: the requester retransmits exactly after it.
			p := newPair(t, pairOpts{quirksA: tc.q})
			c := p.connect(qpOpts{minRNR: tc.code, rnr: 7})
			if tc.code == 0 {
				return
			}
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			p.a.rec.take(t)
			p.run(tc.want - time.Microsecond)
			if n := len(p.a.rec.take(t)); n != 0 {
				t.Fatalf("retransmitted early")
			}
			p.clk.Advance(time.Microsecond)
			p.a.r.Poll()
			if n := len(p.a.rec.take(t)); n != 1 {
				t.Fatalf("%d retransmissions at %v", n, tc.want)
			}
		})
	}
}

// TestRdAtomicZeroStalls: max_rd_atomic 0 holds READs forever (quirk 4).
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

// TestUnsignaled: unsignaled successful WQEs retire silently and in order;
// SIGNAL_ALL_WR completes every one.
func TestUnsignaled(t *testing.T) {
	for _, all := range []bool{false, true} {
		p := newPair(t, pairOpts{})
		c := p.connect(qpOpts{sigAll: all})
		src, _, mra := p.a.buf(8, 1)
		dst, _, mrb := p.b.buf(8, 0)
		var wrs []emu.SendWR
		for i := range 4 {
			wr := emu.SendWR{WRID: uint64(i), Opcode: emu.WRRDMAWrite, RemoteAddr: dst, RKey: mrb.RKey(),
				SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}}
			if i == 3 {
				wr.SendFlags = emu.SendSignaled
			}
			wrs = append(wrs, wr)
		}
		p.a.postSend(c.qa, wrs...)
		p.settle()
		wcs := poll(p.a.scq)
		if want := map[bool]int{false: 1, true: 4}[all]; len(wcs) != want || wcs[len(wcs)-1].WRID != 3 {
			t.Errorf("sigAll %v: completions %+v", all, wcs)
		}
	}
}

// TestFastRegRemoteWrite: REG_MR on the responder's send queue makes a
// fast-reg MR writable remotely; LOCAL_INV revokes it (the next WRITE gets
// NAK 0x62).
func TestFastRegRemoteWrite(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	m, err := p.b.pd.AllocMR(emu.MRTypeMemReg, 4)
	if err != nil {
		t.Fatal(err)
	}
	addr, page := p.b.dev.Memory().Alloc(dma.PageSize)
	sg := []dma.Scatterlist{{Page: dma.PageOf(addr), Length: dma.PageSize}}
	p.b.dev.DMA().MapSG(sg, dma.Bidirectional)
	if n, err := m.MapSG(sg, dma.PageSize); n != 1 || err != nil {
		t.Fatalf("map_mr_sg = %d, %v", n, err)
	}
	kverbs.UpdateFastRegKey(m, 0x42)
	p.b.postSend(c.qb, emu.SendWR{WRID: 1, Opcode: emu.WRRegMR, MR: m, Key: m.RKey(),
		Access: ib.AccessLocalWrite | ib.AccessRemoteWrite})
	src, data, mra := p.a.buf(100, 9)
	write := emu.SendWR{WRID: 2, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 100, LKey: mra.LKey()}}, RemoteAddr: m.IOVA + 8, RKey: m.RKey()}
	p.a.postSend(c.qa, write)
	p.settle()
	wantWC(t, "write through the fast-reg MR", poll(p.a.scq), emu.WCSuccess)
	if !bytes.Equal(page[8:108], data) {
		t.Error("data not in the fast-reg MR's page")
	}
	p.b.postSend(c.qb, emu.SendWR{WRID: 3, Opcode: emu.WRLocalInv, InvalidateRKey: m.RKey()})
	p.a.postSend(c.qa, write)
	p.settle()
	wantWC(t, "write after LOCAL_INV", poll(p.a.scq), emu.WCRemAccessErr)
}

// TestLocalErrors: requester-side errors (spec §6.2's table): a bad send
// lkey is LOC_QP_OP_ERR, a READ into memory without LOCAL_WRITE is
// LOC_PROT_ERR; the QP goes to ERR and later WQEs flush.
func TestLocalErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   emu.WROpcode
		bad  func(p *pair, sge *emu.SGE)
		st   emu.WCStatus
	}{
		{"send-bad-lkey", emu.WRSend, func(p *pair, s *emu.SGE) { s.LKey ^= 0x80 }, emu.WCLocQPOpErr},
		{"read-without-local-write", emu.WRRDMARead, func(p *pair, s *emu.SGE) {
			m, err := p.a.pd.RegUserMR(s.Addr, uint64(s.Length), s.Addr, 0)
			if err != nil {
				p.t.Fatal(err)
			}
			s.LKey = m.LKey()
		}, emu.WCLocProtErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{})
			src, _, mra := p.a.buf(64, 1)
			rem, _, mrb := p.b.buf(64, 0)
			dst, _, mrr := p.b.buf(64, 0)
			p.b.postRecv(c.qb, emu.RecvWR{SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrr.LKey()}}})
			sge := emu.SGE{Addr: src, Length: 64, LKey: mra.LKey()}
			tc.bad(p, &sge)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: tc.op, SendFlags: emu.SendSignaled, SGList: []emu.SGE{sge},
				RemoteAddr: rem, RKey: mrb.RKey()},
				emu.SendWR{WRID: 2, Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			wantWC(t, "send", poll(p.a.scq), tc.st, emu.WCWRFlushErr)
			if p.a.state(c.qa) != qpstate.StateErr {
				t.Error("QP not in ERR")
			}
		})
	}
}

// TestResponseErrors (and P43): how the completer answers responses to an
// outstanding SEND (spec §6.4's table): NAK codes, reserved syndromes
// (IB_WC_BAD_RESP_ERR, the emulator's choice for rxe's unset status), an
// ATOMIC_ACKNOWLEDGE for a SEND.
func TestResponseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   wire.Opcode
		syn  wire.Syndrome
		st   emu.WCStatus
	}{
		{"NAK-61", wire.RCAcknowledge, 0x61, emu.WCRemInvReqErr},
		{"NAK-62", wire.RCAcknowledge, 0x62, emu.WCRemAccessErr},
		{"NAK-63", wire.RCAcknowledge, 0x63, emu.WCRemOpErr},
		{"NAK-64", wire.RCAcknowledge, 0x64, emu.WCRemOpErr},
		{"reserved-40", wire.RCAcknowledge, 0x40, emu.WCBadRespErr},
		{"atomic-ack-for-send", wire.RCAtomicAcknowledge, 0x1F, emu.WCBadRespErr},
		{"P43-read-response-for-send", wire.RCRDMAReadResponseOnly, 0x1F, emu.WCFatalErr},
		{"ack", wire.RCAcknowledge, 0x1F, emu.WCSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{sqpsnA: 60})
			p.a.rec.Link = link.NewFaults(p.a.rec.Link, link.FaultConfig{Drop: 1})
			p.sendN(c, 8, 8, 0)
			p.a.r.Poll()
			f := wire.Frame{DstMAC: p.a.mac, SrcMAC: p.b.mac, Src: p.b.ip, Dst: p.a.ip, HopLimit: 64, SrcPort: 0xC000,
				BTH:  wire.BTHFields{Opcode: tc.op, PKey: 0xFFFF, DestQP: c.qa.QPNum(), PSN: 60},
				AETH: wire.AETHFields{Syndrome: tc.syn, MSN: 1}}
			b := make([]byte, f.Len())
			wire.Build(b, &f)
			p.b.end.WritePackets([][]byte{b})
			p.a.r.Poll()
			wantWC(t, "send", poll(p.a.scq), tc.st)
			if wantErr := tc.st != emu.WCSuccess; (p.a.state(c.qa) == qpstate.StateErr) != wantErr {
				t.Errorf("state %v", p.a.state(c.qa))
			}
		})
	}
}

// TestP15MisalignedAtomic: a raw COMPARE_SWAP at a VA that is not 8-byte
// aligned gets NAK 0x61.
func TestP15MisalignedAtomic(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 40})
	dst, _, mrb := p.b.buf(64, 0)
	p.inject(t, p.rawFrame(t, c, wire.RCCompareSwap, 40, nil, func(f *wire.Frame) {
		f.AtomicETH = wire.AtomicETHFields{VA: dst + 4, RKey: mrb.RKey(), SwapAdd: 1}
	}))
	wantSyndrome(t, p.b.rec.take(t), 0x61)
}

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

// TestP25RequestToInit: a request to a QP in INIT is dropped silently.
func TestP25RequestToInit(t *testing.T) {
	p := newPair(t, pairOpts{})
	qb := p.b.newQP(qpstate.TypeRC, nil, qpOpts{})
	p.b.modify(qb, qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QPAccessFlags: allAccess},
		qpstate.AttrState|qpstate.AttrPKeyIndex|qpstate.AttrPort|qpstate.AttrAccessFlags)
	dst, _, mrb := p.b.buf(64, 0)
	p.b.postRecv(qb, emu.RecvWR{SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}})
	p.inject(t, p.rawFrame(t, conn{qb: qb}, wire.RCSendOnly, 0, []byte("hi"), nil))
	if resp := p.b.rec.take(t); len(resp) != 0 || p.b.counter("rcvd_pkts") != 0 || len(poll(p.b.rcq)) != 0 {
		t.Errorf("responses %v, rcvd_pkts %d", ops(resp), p.b.counter("rcvd_pkts"))
	}
}

// TestP20GSIQKey: a QP1 packet whose Q_Key is not 0x80010000 is dropped
// and counted; the counter saturates at 0xFFFF.
func TestP20GSIQKey(t *testing.T) {
	p := newPair(t, pairOpts{noMAD: true, mtu: 1500})
	gsi := p.b.udQP(qpstate.TypeGSI, nil)
	dst, _, mrb := p.b.buf(256, 0)
	p.b.postRecv(gsi, emu.RecvWR{SGList: []emu.SGE{{Addr: dst, Length: 256, LKey: mrb.LKey()}}})
	frame := func(qkey uint32) []byte {
		return p.rawFrame(t, conn{qb: gsi}, wire.UDSendOnly, 0, []byte("mad"), func(f *wire.Frame) {
			f.DETH = wire.DETHFields{QKey: qkey, SrcQP: 1}
		})
	}
	p.inject(t, frame(0x11111111))
	if pa, _ := p.b.dev.QueryPort(1); pa.QKeyViolCntr != 1 {
		t.Errorf("qkey_viol_cntr %d", pa.QKeyViolCntr)
	}
	p.inject(t, frame(0x80010000))
	wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
	p.b.r.mu.Lock()
	p.b.r.badQKey = 0xFFFE
	p.b.r.mu.Unlock()
	p.inject(t, frame(1), frame(2))
	if pa, _ := p.b.dev.QueryPort(1); pa.QKeyViolCntr != 0xFFFF {
		t.Errorf("qkey_viol_cntr %#x, want saturated 0xFFFF", pa.QKeyViolCntr)
	}
}
