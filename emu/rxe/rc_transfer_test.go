package rxe

import (
	"bytes"
	"slices"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/dma"
	"github.com/softroce/softroce/emu/kverbs"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/wire"
)

// sendN posts a SEND of n pattern bytes from a and a receive of rlen on b.
func (p *pair) sendN(c conn, n, rlen int, flags emu.SendFlags) ([]byte, []byte) {
	src, data, mra := p.a.buf(n, 3)
	dst, got, mrb := p.b.buf(rlen, 0)
	p.b.postRecv(c.qb, emu.RecvWR{WRID: 1, SGList: []emu.SGE{{Addr: dst, Length: uint32(rlen), LKey: mrb.LKey()}}})
	p.a.postSend(c.qa, emu.SendWR{WRID: 2, Opcode: emu.WRSend, SendFlags: emu.SendSignaled | flags,
		SGList: []emu.SGE{{Addr: src, Length: uint32(n), LKey: mra.LKey()}}})
	return data, got
}

func wantOps(t *testing.T, what string, ps []wire.Packet, want ...wire.Opcode) {
	t.Helper()
	var w []string
	for _, o := range want {
		w = append(w, o.String())
	}
	if !slices.Equal(ops(ps), w) {
		t.Fatalf("%s: %v, want %v", what, ops(ps), w)
	}
}

// wantSyndrome checks that the responses are one ACKNOWLEDGE with
// syndrome syn.
func wantSyndrome(t *testing.T, resp []wire.Packet, syn wire.Syndrome) {
	t.Helper()
	wantOps(t, "responses", resp, wire.RCAcknowledge)
	if got := resp[0].AETH().Syndrome(); got != syn {
		t.Errorf("syndrome %v, want %v", got, syn)
	}
}

func wantWC(t *testing.T, what string, wcs []emu.WC, st ...emu.WCStatus) {
	t.Helper()
	var got []emu.WCStatus
	for _, w := range wcs {
		got = append(got, w.Status)
	}
	if !slices.Equal(got, st) {
		t.Fatalf("%s: statuses %v, want %v", what, got, st)
	}
}

// TestSendSegmentation: 3000 bytes at MTU 1024 go out as FIRST 1024,
// MIDDLE 1024, LAST 952 with AckReq only on LAST, one ACK for the LAST PSN;
// a solicited SEND carries SE only on its last packet.
func TestSendSegmentation(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	data, got := p.sendN(c, 3000, 4096, emu.SendSolicited)
	p.settle()
	req := p.a.rec.take(t)
	wantOps(t, "requests", req, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast)
	for i, n := range []int{1024, 1024, 952} {
		b := req[i].BTH()
		if req[i].PayloadLen() != n || b.AckReq() != (i == 2) || b.SE() != (i == 2) || b.PadCnt() != 0 {
			t.Errorf("packet %d: len %d A %v SE %v", i, req[i].PayloadLen(), b.AckReq(), b.SE())
		}
	}
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCAcknowledge)
	if resp[0].BTH().PSN() != req[2].BTH().PSN() {
		t.Errorf("ACK PSN %d, want LAST's %d", resp[0].BTH().PSN(), req[2].BTH().PSN())
	}
	if !bytes.Equal(got[:3000], data) {
		t.Error("data differs")
	}
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
	wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
}

// TestWriteAckReqEvery66: a 200-packet WRITE: RETH only in FIRST, A on 66, 132,
// 198 and the LAST; exactly those four ACKed.
func TestWriteAckReqEvery66(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval int
		want     []int
	}{{"rxe", 0, []int{66, 132, 198, 200}}, {"interval10", 10, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksA: Quirks{AckReqInterval: tc.interval}})
			c := p.connect(qpOpts{})
			const n = 204800
			src, data, mra := p.a.buf(n, 5)
			dst, got, mrb := p.b.buf(n, 0)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: n, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey()})
			p.settle()
			req := p.a.rec.take(t)
			if len(req) != 200 {
				t.Fatalf("%d packets", len(req))
			}
			var acked []int
			for i := range req {
				if (req[i].RETH() != nil) != (i == 0) {
					t.Errorf("packet %d RETH %v", i+1, req[i].RETH() != nil)
				}
				if req[i].BTH().AckReq() {
					acked = append(acked, i+1)
				}
			}
			if i := req[0].RETH(); i.DMALen() != n {
				t.Errorf("RETH length %d", i.DMALen())
			}
			want := tc.want
			if want == nil {
				for i := 11; i < 200; i += 11 {
					want = append(want, i)
				}
				want = append(want, 200)
			}
			if !slices.Equal(acked, want) {
				t.Errorf("A on %v, want %v", acked, want)
			}
			resp := p.b.rec.take(t)
			var ackPSN []int
			for i := range resp {
				ackPSN = append(ackPSN, int(resp[i].BTH().PSN()-req[0].BTH().PSN())+1)
			}
			if !slices.Equal(ackPSN, want) {
				t.Errorf("ACKs for packets %v, want %v", ackPSN, want)
			}
			if !bytes.Equal(got, data) {
				t.Error("data differs")
			}
			wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
		})
	}
}

// TestReadResponses: READ 5000 bytes at MTU 1024 (responses FIRST, MIDDLE
// x3, LAST, the next request PSN after them) and a zero-length READ (one
// READ_RESPONSE_ONLY with an empty payload).
func TestReadResponses(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 10})
	rsrc, data, mrb := p.b.buf(5000, 9)
	dst, got, mra := p.a.buf(5000, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: dst, Length: 5000, LKey: mra.LKey()}}, RemoteAddr: rsrc, RKey: mrb.RKey()},
		emu.SendWR{WRID: 2, Opcode: emu.WRRDMARead, SendFlags: emu.SendSignaled, RemoteAddr: rsrc, RKey: mrb.RKey()})
	p.settle()
	req := p.a.rec.take(t)
	wantOps(t, "requests", req, wire.RCRDMAReadRequest, wire.RCRDMAReadRequest)
	if req[0].BTH().PSN() != 10 || req[1].BTH().PSN() != 15 {
		t.Errorf("read PSNs %d, %d; want 10, 15", req[0].BTH().PSN(), req[1].BTH().PSN())
	}
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle,
		wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast,
		wire.RCRDMAReadResponseOnly)
	for i, n := range []int{1024, 1024, 1024, 1024, 904, 0} {
		if resp[i].PayloadLen() != n || resp[i].BTH().PSN() != uint32(10+i) {
			t.Errorf("response %d: %d bytes PSN %d", i, resp[i].PayloadLen(), resp[i].BTH().PSN())
		}
		if hasAETH := resp[i].AETH() != nil; hasAETH == (i >= 1 && i <= 3) {
			t.Errorf("response %d AETH %v", i, hasAETH)
		}
	}
	if !bytes.Equal(got, data) {
		t.Error("data differs")
	}
	wcs := poll(p.a.scq)
	wantWC(t, "send", wcs, emu.WCSuccess, emu.WCSuccess)
	if wcs[0].Opcode != emu.WCRDMARead || wcs[0].ByteLen != 5000 {
		t.Errorf("read WC %+v", wcs[0])
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
