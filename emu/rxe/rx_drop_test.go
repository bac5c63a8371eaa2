package rxe

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
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

// TestBadFrames: frames rxe drops before the responder (rxe_rcv, hdr_check,
// rxe_icrc_check: bad ICRC, TVer, P_Key, unknown or zero QPN, a source IP
// that is not the QP's destination, unknown opcodes such as CNP),
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
		{name: "bad-ICRC", op: wire.RCSendOnly, raw: func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{name: "corrupt-payload", op: wire.RCSendOnly, raw: func(b []byte) []byte { b[len(b)-6] ^= 0x80; return b }},
		{name: "TVer-1", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.TVer = 1 }},
		{name: "PKey-8001", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.PKey = 0x8001 }, badPKey: 1},
		{name: "PKey-7FFF", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.PKey = 0x7FFF }, accept: true, rcvd: 1},
		{name: "QPN-0", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.DestQP = 0 }},
		{name: "unknown-QPN", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.BTH.DestQP = 0x1234 }},
		{name: "wrong-source-IP", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.Src = netip.MustParseAddr("10.0.0.9") }},
		{name: "wrong-destination-IP", op: wire.RCSendOnly, mutate: func(f *wire.Frame) { f.Dst = netip.MustParseAddr("10.0.0.7") }},
		{name: "UC-opcode-to-RC-QP", op: wire.UCSendOnly},
		{name: "truncated", op: wire.RCSendOnly, raw: func(b []byte) []byte { return b[:40] }},
		{name: "unsolicited-ACK", op: wire.RCAcknowledge, mutate: func(f *wire.Frame) { f.AETH.Syndrome = 0x1F }, rcvd: 1},
		{name: "unsolicited-read-response", op: wire.RCRDMAReadResponseOnly, rcvd: 1},
		{name: "CNP", op: wire.CNP, mutate: func(f *wire.Frame) { f.BTH.AckReq = false; f.BTH.PSN = 0 }},
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

// TestRequestToINITDropped: a request to a QP in INIT is dropped silently.
func TestRequestToINITDropped(t *testing.T) {
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

// TestGSIWrongQKeyDropped: a QP1 packet whose Q_Key is not 0x80010000 is dropped
// and counted; the counter saturates at 0xFFFF.
func TestGSIWrongQKeyDropped(t *testing.T) {
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

// TestWrongAddressAfterAcceptedFrames: a device that has accepted a
// stream of frames to its address and from its QP's peer (which it then
// checks by a compare) still drops a frame to another destination, or
// from another source, counting it and sending nothing.
func TestWrongAddressAfterAcceptedFrames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*wire.Frame)
	}{
		{"wrong-destination-IP", func(f *wire.Frame) { f.Dst = netip.MustParseAddr("10.0.0.7") }},
		{"wrong-source-IP", func(f *wire.Frame) { f.Src = netip.MustParseAddr("10.0.0.9") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{sqpsnA: 40})
			src, _, mra := p.a.buf(8<<10, 1)
			dst, _, mrb := p.b.buf(8<<10, 0)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 8 << 10, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey()})
			p.settle()
			wantWC(t, "WRITE", poll(p.a.scq), emu.WCSuccess)
			p.b.rec.take(t)
			rcvd, dropped := p.b.counter("rcvd_pkts"), p.b.counter("softroce_dropped_pkts")
			p.b.postRecv(c.qb, emu.RecvWR{WRID: 2, SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}})
			p.inject(t, p.rawFrame(t, c, wire.RCSendOnly, 48, []byte("hello"), tc.mutate))
			if resp := p.b.rec.take(t); len(resp) > 0 {
				t.Errorf("responses %v to a frame to drop", ops(resp))
			}
			if got := p.b.counter("rcvd_pkts"); got != rcvd {
				t.Errorf("rcvd_pkts %d, want %d", got, rcvd)
			}
			if got := p.b.counter("softroce_dropped_pkts"); got != dropped+1 {
				t.Errorf("dropped %d, want %d", got, dropped+1)
			}
		})
	}
}

// TestUDToAnotherAddressAfterAcceptedFrames: a UD QP, whose packets'
// addresses no QP path checks, still gets no frame to another destination
// IP after the device has accepted frames to its own.
func TestUDToAnotherAddressAfterAcceptedFrames(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 1500})
	qa := p.a.udQP(qpstate.TypeUD, nil)
	qb := p.b.udQP(qpstate.TypeUD, nil)
	ah := p.a.ah(p.b.ip, p.b.mac)
	src, _, mra := p.a.buf(64, 7)
	dst, _, mrb := p.b.buf(200, 0)
	for i := range 3 {
		p.b.postRecv(qb, emu.RecvWR{WRID: uint64(i), SGList: []emu.SGE{{Addr: dst, Length: 200, LKey: mrb.LKey()}}})
	}
	p.a.postSend(qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, AH: ah,
		RemoteQPN: qb.QPNum(), RemoteQKey: 0x11111111, SGList: []emu.SGE{{Addr: src, Length: 64, LKey: mra.LKey()}}})
	p.settle()
	wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
	req := p.a.rec.take(t)
	if len(req) != 1 {
		t.Fatalf("%d requests", len(req))
	}
	var f wire.Frame
	req[0].Fields(&f)
	f.Dst = netip.MustParseAddr("10.0.0.7")
	b := make([]byte, f.Len())
	if _, err := wire.Build(b, &f); err != nil {
		t.Fatal(err)
	}
	dropped := p.b.counter("softroce_dropped_pkts")
	p.inject(t, b)
	if wcs := poll(p.b.rcq); len(wcs) != 0 {
		t.Errorf("a frame to another address completed %+v", wcs)
	}
	if got := p.b.counter("softroce_dropped_pkts"); got != dropped+1 {
		t.Errorf("dropped %d, want %d", got, dropped+1)
	}
}
