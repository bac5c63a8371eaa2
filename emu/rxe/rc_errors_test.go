package rxe

import (
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
)

// TestRemoteAccessNAKs: NAK codes and completions for bad requests: an unknown
// rkey (NAK 0x62), a READ without REMOTE_READ (NAK 0x61, or 0x62 with
// Quirks.AccessNAK62), no responder resources (0x61), a zero-length WRITE
// with rkey 0 (accepted without a key check).
func TestRemoteAccessNAKs(t *testing.T) {
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
		{"write-unknown-rkey", Quirks{}, allAccess, 0, emu.WRRDMAWrite, true, 8, 0x62, emu.WCRemAccessErr},
		{"read-no-remote-read", Quirks{}, ib.AccessRemoteWrite, 0, emu.WRRDMARead, false, 8, 0x61, emu.WCRemInvReqErr},
		{"read-no-remote-read-ibta", Quirks{AccessNAK62: true}, ib.AccessRemoteWrite, 0, emu.WRRDMARead, false, 8, 0x62, emu.WCRemAccessErr},
		{"no-responder-resources", Quirks{}, allAccess, 255, emu.WRRDMARead, false, 8, 0x61, emu.WCRemInvReqErr},
		{"write-beyond-the-MR", Quirks{}, allAccess, 0, emu.WRRDMAWrite, false, 72, 0x62, emu.WCRemAccessErr},
		{"zero-length-write-rkey-0", Quirks{}, allAccess, 0, emu.WRRDMAWrite, true, 0, 0x1F, emu.WCSuccess},
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

// TestMiddleWithoutFirstNAK: SEND_MIDDLE at the expected PSN: NAK 0x61.
func TestMiddleWithoutFirstNAK(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 40})
	p.inject(t, p.rawFrame(t, c, wire.RCSendMiddle, 40, make([]byte, 1024), nil))
	resp := p.b.rec.take(t)
	wantOps(t, "responses", resp, wire.RCAcknowledge)
	if resp[0].AETH().Syndrome() != 0x61 || p.b.state(c.qb) != qpstate.StateErr {
		t.Errorf("syndrome %v state %v", resp[0].AETH().Syndrome(), p.b.state(c.qb))
	}
}

// TestReceiveOverflow: 200 bytes into a 100-byte buffer: rxe's
// LOC_QP_OP_ERR and NAK 0x63, or with Quirks.RecvOverflowIBTA LOC_LEN_ERR
// and NAK 0x61.
func TestReceiveOverflow(t *testing.T) {
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

// TestSendWithInvalidateUnknownRKey: an unknown IETH rkey is ACKed (rxe) or NAKed
// (InvalidateNAK); a valid one invalidates a fast-reg MR.
func TestSendWithInvalidateUnknownRKey(t *testing.T) {
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

// TestLocalErrors: requester-side errors (rxe_req.c and rxe_comp.c):
// a bad send
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

// TestResponseErrors: how the completer (rxe_completer) answers responses
// to an outstanding SEND: NAK codes, a READ response for a SEND
// (IB_WC_FATAL_ERR), reserved syndromes
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
		{"read-response-for-send", wire.RCRDMAReadResponseOnly, 0x1F, emu.WCFatalErr},
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
