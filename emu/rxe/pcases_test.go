package rxe

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
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

// TestP2SendSegmented: 3000 bytes at MTU 1024 (P2), SE only on LAST (P4).
func TestP2SendSegmented(t *testing.T) {
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

// TestP3WriteAckReq: a 200-packet WRITE: RETH only in FIRST, A on 66, 132,
// 198 and the LAST; exactly those four ACKed.
func TestP3WriteAckReq(t *testing.T) {
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

// TestP12Read: READ 5000 bytes at MTU 1024 (P12) and a zero-length READ
// (P13).
func TestP12Read(t *testing.T) {
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

// TestAtomics: CMP_SWAP and FETCH_ADD; duplicate FETCH_ADD replays the saved
// value (P16).
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
	// P16: replay the FETCH_ADD frame itself.
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

// TestP5SequenceNAK: the responder sees N+1 then N+2 after N was lost: one
// NAK, the requester goes back to N.
func TestP5SequenceNAK(t *testing.T) {
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

// TestP6DuplicateSend: a duplicate SEND_ONLY is re-ACKed, not delivered.
func TestP6DuplicateSend(t *testing.T) {
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

// TestP7RNR: an empty RQ gets RNR NAK 0x2C; rnr_retry 0 fails, 7 retries
// until a receive is posted (P7, P8).
func TestP7RNR(t *testing.T) {
	for _, tc := range []struct {
		name string
		rnr  uint8
	}{{"rnr7", 7}, {"rnr0", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			c := p.connect(qpOpts{rnr: tc.rnr, sqpsnA: 5})
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			p.settle()
			resp := p.b.rec.take(t)
			wantOps(t, "responses", resp, wire.RCAcknowledge)
			if resp[0].AETH().Syndrome() != 0x2C || resp[0].BTH().PSN() != 5 {
				t.Fatalf("RNR NAK %v PSN %d", resp[0].AETH().Syndrome(), resp[0].BTH().PSN())
			}
			if p.b.counter("send_rnr_err") != 1 || p.a.counter("rcvd_rnr_err") != 1 {
				t.Error("RNR counters")
			}
			if tc.rnr == 0 {
				wantWC(t, "send", poll(p.a.scq), emu.WCRNRRetryExcErr)
				if p.a.state(c.qa) != qpstate.StateErr {
					t.Error("QP not in ERR")
				}
				return
			}
			p.a.rec.take(t)
			p.run(639 * time.Microsecond)
			if n := len(p.a.rec.take(t)); n != 0 {
				t.Fatalf("%d packets before the 0.64 ms RNR delay", n)
			}
			p.run(time.Microsecond)
			if n := len(p.a.rec.take(t)); n != 1 {
				t.Fatalf("%d packets at the RNR delay, want 1 retransmission", n)
			}
			dst, _, mrb := p.b.buf(8, 0)
			p.b.postRecv(c.qb, emu.RecvWR{WRID: 2, SGList: []emu.SGE{{Addr: dst, Length: 8, LKey: mrb.LKey()}}})
			p.run(time.Millisecond)
			wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
			wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
		})
	}
}

// TestP9RemoteErrors: NAK codes and completions for bad requests (P9, P10,
// P11, P14, quirk 17 in both settings).
func TestP9RemoteErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		q       Quirks
		accessB ib.AccessFlags
		destAt  uint8
		op      emu.WROpcode
		badKey  bool
		length  int
		syn     wire.Syndrome
		st      emu.WCStatus
	}{
		{"P9-write-unknown-rkey", Quirks{}, allAccess, 0, emu.WRRDMAWrite, true, 8, 0x62, emu.WCRemAccessErr},
		{"P10-read-no-remote-read", Quirks{}, ib.AccessRemoteWrite, 0, emu.WRRDMARead, false, 8, 0x61, emu.WCRemInvReqErr},
		{"P10-quirk17-ibta", Quirks{AccessNAK62: true}, ib.AccessRemoteWrite, 0, emu.WRRDMARead, false, 8, 0x62, emu.WCRemAccessErr},
		{"P11-no-responder-resources", Quirks{}, allAccess, 255, emu.WRRDMARead, false, 8, 0x61, emu.WCRemInvReqErr},
		{"write-beyond-the-MR", Quirks{}, allAccess, 0, emu.WRRDMAWrite, false, 72, 0x62, emu.WCRemAccessErr},
		{"P14-zero-length-write-rkey-0", Quirks{}, allAccess, 0, emu.WRRDMAWrite, true, 0, 0x1F, emu.WCSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksB: tc.q})
			o := qpOpts{accessB: tc.accessB}
			if tc.destAt == 255 {
				o.destAtom = 1
			}
			c := p.connect(o)
			if tc.destAt == 255 {
				a := qpstate.Attr{MaxDestRdAtomic: 0}
				if err := c.qb.Modify(&a, qpstate.AttrMaxDestRdAtomic); err != nil {
					t.Fatal(err)
				}
			}
			loc, _, mra := p.a.buf(128, 0)
			rem, _, mrb := p.b.buf(64, 0)
			rkey := mrb.RKey()
			if tc.badKey {
				rkey = 0
			}
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: tc.op, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: loc, Length: uint32(tc.length), LKey: mra.LKey()}}, RemoteAddr: rem, RKey: rkey})
			p.settle()
			wantSyndrome(t, p.b.rec.take(t), tc.syn)
			wantWC(t, "send", poll(p.a.scq), tc.st)
			wantErr := tc.st != emu.WCSuccess
			if (p.a.state(c.qa) == qpstate.StateErr) != wantErr || (p.b.state(c.qb) == qpstate.StateErr) != wantErr {
				t.Errorf("states %v %v", p.a.state(c.qa), p.b.state(c.qb))
			}
		})
	}
}

// TestP17RetryExhausted: a silent peer: transmissions timeout apart, then
// RETRY_EXC_ERR (P17, P18, quirk 5).
func TestP17RetryExhausted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout uint8
		retry   uint8
		q       Quirks
		sends   int // transmissions within 1 s; -1: forever (checked over 100 periods)
		fail    bool
	}{
		{"P17-retry2", 14, 2, Quirks{}, 3, true},
		{"P18-retry0", 14, 0, Quirks{}, 1, true},
		{"P18-timeout0", 0, 2, Quirks{}, 1, false},
		{"P18-retry7-rxe", 14, 7, Quirks{}, -1, false},
		{"P18-retry7-ibta", 14, 7, Quirks{RetryCnt7Finite: true}, 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksA: tc.q})
			c := p.connect(qpOpts{timeout: tc.timeout, retry: tc.retry})
			p.b.r.Close() // silent peer
			src, _, mra := p.a.buf(8, 1)
			p.a.postSend(c.qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
				SGList: []emu.SGE{{Addr: src, Length: 8, LKey: mra.LKey()}}})
			start := p.clk.Now()
			var times []time.Duration
			period := 4096 * time.Nanosecond << tc.timeout
			horizon := time.Second
			if tc.sends < 0 {
				horizon = 100 * period
			}
			for p.clk.Now().Sub(start) < horizon {
				for range p.a.rec.take(t) {
					times = append(times, p.clk.Now().Sub(start))
				}
				if !p.clk.AdvanceToNext() {
					break
				}
			}
			times = append(times, make([]time.Duration, len(p.a.rec.take(t)))...)
			want := tc.sends
			if want < 0 {
				if len(times) < 100 {
					t.Errorf("%d transmissions in 100 periods, want one per period", len(times))
				}
			} else if len(times) != want {
				t.Errorf("%d transmissions at %v, want %d", len(times), times, want)
			}
			if tc.timeout != 0 && len(times) > 1 && times[1] != period {
				t.Errorf("retransmission at %v, want %v", times[1], period)
			}
			wcs := poll(p.a.scq)
			if tc.fail {
				wantWC(t, "send", wcs, emu.WCRetryExcErr)
				if p.a.counter("retry_exceeded_err") != 1 {
					t.Error("retry_exceeded_err")
				}
			} else {
				wantWC(t, "send", wcs)
			}
		})
	}
}
