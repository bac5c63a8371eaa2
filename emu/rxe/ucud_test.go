package rxe

import (
	"bytes"
	"context"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/qpstate"
	"github.com/softroce/softroce/wire"
	"golang.org/x/sys/unix"
)

// TestUCSendWrite: UC SEND and WRITE move data with no ACKs and A=0.
func TestUCSendWrite(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{typ: qpstate.TypeUC})
	data, got := p.sendN(c, 2500, 4096, 0)
	src, wdata, mra := p.a.buf(3000, 4)
	dst, wgot, mrb := p.b.buf(3000, 0)
	p.a.postSend(c.qa, emu.SendWR{WRID: 3, Opcode: emu.WRRDMAWrite, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 3000, LKey: mra.LKey()}}, RemoteAddr: dst, RKey: mrb.RKey()})
	p.settle()
	req := p.a.rec.take(t)
	wantOps(t, "requests", req, wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendLast,
		wire.UCRDMAWriteFirst, wire.UCRDMAWriteMiddle, wire.UCRDMAWriteLast)
	for i := range req {
		if req[i].BTH().AckReq() {
			t.Errorf("packet %d has A=1", i)
		}
	}
	if resp := p.b.rec.take(t); len(resp) != 0 {
		t.Errorf("UC responses %v", ops(resp))
	}
	if !bytes.Equal(got[:2500], data) || !bytes.Equal(wgot, wdata) {
		t.Error("data differs")
	}
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess)
	wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
}

// TestUCLostMiddle: a UC message loses its MIDDLE; rxe also loses the
// next message, IBTA (UCResyncIBTA) accepts it.
func TestUCLostMiddle(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    Quirks
		want []int // which of messages 2 and 3 arrive, in the order of receive completions
	}{{"rxe", Quirks{}, []int{3}}, {"ibta", Quirks{UCResyncIBTA: true}, []int{2, 3}}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksB: tc.q})
			c := p.connect(qpOpts{typ: qpstate.TypeUC})
			flt := link.NewFaults(p.a.rec.Link, link.FaultConfig{Schedule: link.ByIndex(map[uint64]link.Action{1: link.Drop})})
			p.a.rec.Link = flt
			var dsts [][]byte
			for i := range 3 {
				dst, got, mrb := p.b.buf(4096, 0)
				dsts = append(dsts, got)
				p.b.postRecv(c.qb, emu.RecvWR{WRID: uint64(10 + i), SGList: []emu.SGE{{Addr: dst, Length: 4096, LKey: mrb.LKey()}}})
			}
			var datas [][]byte
			for i := range 3 {
				src, data, mra := p.a.buf(2500, byte(16*i+1))
				datas = append(datas, data)
				p.a.postSend(c.qa, emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend,
					SGList: []emu.SGE{{Addr: src, Length: 2500, LKey: mra.LKey()}}})
			}
			p.settle()
			wcs := poll(p.b.rcq)
			if len(wcs) != len(tc.want) {
				t.Fatalf("%d receive completions, want %d", len(wcs), len(tc.want))
			}
			for i, m := range tc.want {
				if wcs[i].Status != emu.WCSuccess || wcs[i].WRID != uint64(10+i) || !bytes.Equal(dsts[i][:2500], datas[m-1]) {
					t.Errorf("completion %d: %+v; buffer %d should hold message %d", i, wcs[i], i, m)
				}
			}
		})
	}
}

// TestUD covers UD sends: the 40-byte GRH area of the receive buffer, a
// send larger than the MTU (rxe's silent success, or LOC_LEN_ERR with
// Quirks.UDOversizeError), a wrong Q_Key (dropped and counted) and too small
// a receive buffer (dropped, or REM_INV_REQ_ERR with an SRQ).
func TestUD(t *testing.T) {
	setup := func(t *testing.T, q Quirks, srq bool) (*pair, *emu.QP, *emu.QP, *emu.AH, *emu.SRQ) {
		p := newPair(t, pairOpts{quirksA: q, mtu: 1500})
		qa := p.a.udQP(qpstate.TypeUD, nil)
		var s *emu.SRQ
		if srq {
			var err error
			s, err = p.b.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 16, MaxSGE: 4}})
			if err != nil {
				t.Fatal(err)
			}
		}
		qb := p.b.udQP(qpstate.TypeUD, s)
		return p, qa, qb, p.a.ah(p.b.ip, p.b.mac), s
	}
	send := func(p *pair, qa, qb *emu.QP, ah *emu.AH, n int, qkey uint32) []byte {
		src, data, mra := p.a.buf(n, 7)
		p.a.postSend(qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, AH: ah,
			RemoteQPN: qb.QPNum(), RemoteQKey: qkey, SGList: []emu.SGE{{Addr: src, Length: uint32(n), LKey: mra.LKey()}}})
		p.settle()
		return data
	}
	t.Run("grh-area", func(t *testing.T) {
		p, qa, qb, ah, _ := setup(t, Quirks{}, false)
		dst, got, mrb := p.b.buf(200, 0)
		p.b.postRecv(qb, emu.RecvWR{WRID: 5, SGList: []emu.SGE{{Addr: dst, Length: 200, LKey: mrb.LKey()}}})
		data := send(p, qa, qb, ah, 80, 0x11111111)
		req := p.a.rec.take(t)
		wantOps(t, "requests", req, wire.UDSendOnly)
		if d := req[0].DETH(); d.QKey() != 0x11111111 || d.SrcQP() != qa.QPNum() || req[0].BTH().AckReq() {
			t.Errorf("DETH %+v A %v", d.Fields(), req[0].BTH().AckReq())
		}
		wcs := poll(p.b.rcq)
		wantWC(t, "recv", wcs, emu.WCSuccess)
		if wcs[0].ByteLen != 120 || wcs[0].SrcQP != qa.QPNum() || wcs[0].NetworkHdrType != emu.NetworkIPv4 {
			t.Errorf("recv WC %+v", wcs[0])
		}
		if !bytes.Equal(got[:20], make([]byte, 20)) || !bytes.Equal(got[20:40], req[0].IPHeader()) || !bytes.Equal(got[40:120], data) {
			t.Errorf("buffer: %x", got[:120])
		}
		wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
	})
	for _, tc := range []struct {
		name string
		q    Quirks
		st   emu.WCStatus
	}{{"oversize-rxe", Quirks{}, emu.WCSuccess}, {"oversize-ibta", Quirks{UDOversizeError: true}, emu.WCLocLenErr}} {
		t.Run(tc.name, func(t *testing.T) {
			p, qa, qb, ah, _ := setup(t, tc.q, false)
			send(p, qa, qb, ah, 2000, 0x11111111)
			if req := p.a.rec.take(t); len(req) != 0 {
				t.Errorf("packets %v, want none", ops(req))
			}
			wantWC(t, "send", poll(p.a.scq), tc.st)
		})
	}
	t.Run("qkey", func(t *testing.T) {
		p, qa, qb, ah, _ := setup(t, Quirks{}, false)
		dst, _, mrb := p.b.buf(200, 0)
		p.b.postRecv(qb, emu.RecvWR{WRID: 5, SGList: []emu.SGE{{Addr: dst, Length: 200, LKey: mrb.LKey()}}})
		send(p, qa, qb, ah, 10, 0x22222222)
		wantWC(t, "recv", poll(p.b.rcq))
		pa, err := p.b.dev.QueryPort(1)
		if err != nil || pa.QKeyViolCntr != 1 {
			t.Errorf("qkey_viol_cntr %d (%v)", pa.QKeyViolCntr, err)
		}
	})
	for _, srq := range []bool{false, true} {
		t.Run("small-buffer-srq="+map[bool]string{false: "no", true: "yes"}[srq], func(t *testing.T) {
			p, qa, qb, ah, s := setup(t, Quirks{}, srq)
			dst, _, mrb := p.b.buf(100, 0)
			wr := emu.RecvWR{WRID: 5, SGList: []emu.SGE{{Addr: dst, Length: 100, LKey: mrb.LKey()}}}
			if srq {
				if _, err := s.PostRecv([]emu.RecvWR{wr}); err != nil {
					t.Fatal(err)
				}
			} else {
				p.b.postRecv(qb, wr)
			}
			send(p, qa, qb, ah, 80, 0x11111111)
			if srq {
				wantWC(t, "recv", poll(p.b.rcq), emu.WCRemInvReqErr)
				return
			}
			wantWC(t, "recv", poll(p.b.rcq))
			send(p, qa, qb, ah, 60, 0x11111111) // fits: the WQE is still there
			wantWC(t, "recv", poll(p.b.rcq), emu.WCSuccess)
		})
	}
}

// TestUDPSourcePort: RC QPs use GetUDPSport of their QPN pair on both sides,
// UD QPs their creation port; the IPv4 header has DF,
// TTL from the AV's hop limit, TOS from its traffic class, UDP checksum 0.
func TestUDPSourcePort(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	p.sendN(c, 8, 8, 0)
	p.settle()
	want := wire.GetUDPSport(0, c.qa.QPNum(), c.qb.QPNum())
	if c.qa.QPNum() == 17 && c.qb.QPNum() == 17 && want != 0xC121 {
		t.Errorf("port for (17,17) %#x, want 0xC121", want)
	}
	for _, pk := range append(p.a.rec.take(t), p.b.rec.take(t)...) {
		if pk.UDPSrcPort() != want {
			t.Errorf("%v from port %#x, want %#x", pk.Opcode(), pk.UDPSrcPort(), want)
		}
		ip := pk.IPHeader()
		if !pk.DontFragment() || pk.HopLimit() != 64 || ip[9] != 17 || pk.UDPChecksum() != 0 ||
			pk.UDPPayload() == nil || ip[12] != 10 {
			t.Errorf("%v: IPv4 header %x", pk.Opcode(), ip)
		}
	}
	ud := p.a.udQP(qpstate.TypeUD, nil)
	if sp, _ := p.a.r.UDPSport(ud.QPNum()); sp != wire.RXEInitialUDPSport(ud.QPNum()) {
		t.Errorf("UD port %#x", sp)
	}
}

// TestUDMulticast: a UD send to a group reaches every member with the
// right Q_Key.
func TestUDMulticast(t *testing.T) {
	p := newPair(t, pairOpts{mtu: 1500})
	qa := p.a.udQP(qpstate.TypeUD, nil)
	group := netip.MustParseAddr("239.1.2.3")
	var members []*emu.QP
	for i := range 3 {
		q := p.b.udQP(qpstate.TypeUD, nil)
		if i == 2 {
			a := qpstate.Attr{QKey: 0x999}
			if err := q.Modify(&a, qpstate.AttrQKey); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.AttachMcast(emu.GIDFromAddr(group), 0); err != nil {
			t.Fatal(err)
		}
		dst, _, mrb := p.b.buf(200, 0)
		p.b.postRecv(q, emu.RecvWR{WRID: uint64(i), SGList: []emu.SGE{{Addr: dst, Length: 200, LKey: mrb.LKey()}}})
		members = append(members, q)
	}
	ah := p.a.ah(group, emu.MulticastMAC(emu.GIDFromAddr(group)))
	src, _, mra := p.a.buf(16, 1)
	p.a.postSend(qa, emu.SendWR{WRID: 1, Opcode: emu.WRSend, AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: 0x11111111,
		SGList: []emu.SGE{{Addr: src, Length: 16, LKey: mra.LKey()}}})
	p.settle()
	req := p.a.rec.take(t)
	if len(req) != 1 || req[0].BTH().DestQP() != 0xFFFFFF {
		t.Fatalf("requests %v", ops(req))
	}
	wcs := poll(p.b.rcq)
	if len(wcs) != 2 || wcs[0].QP != members[0] || wcs[1].QP != members[1] {
		t.Errorf("multicast completions %+v", wcs)
	}
	for _, q := range members {
		q.DetachMcast(emu.GIDFromAddr(group), 0)
	}
}

// TestGSIHeaders: QP1 sends with Q_Key 0x80010000, SrcQP 1 and A=1 (rxe) or
// A=0 (NoGSIAckReq).
func TestGSIHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    Quirks
		a    bool
	}{{"rxe", Quirks{}, true}, {"ibta", Quirks{NoGSIAckReq: true}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{quirksA: tc.q, noMAD: true, mtu: 1500})
			gsi := p.a.udQP(qpstate.TypeGSI, nil)
			ah := p.a.ah(p.b.ip, p.b.mac)
			src, _, mra := p.a.buf(256, 1)
			p.a.postSend(gsi, emu.SendWR{WRID: 1, Opcode: emu.WRSend, AH: ah, RemoteQPN: 1, RemoteQKey: 0x1234,
				SGList: []emu.SGE{{Addr: src, Length: 256, LKey: mra.LKey()}}})
			p.settle()
			req := p.a.rec.take(t)
			wantOps(t, "requests", req, wire.UDSendOnly)
			d := req[0].DETH()
			if d.QKey() != 0x80010000 || d.SrcQP() != 1 || req[0].BTH().AckReq() != tc.a {
				t.Errorf("DETH %+v A %v", d.Fields(), req[0].BTH().AckReq())
			}
			if req[0].UDPSrcPort() != 0xD872 {
				t.Errorf("GSI source port %#x, want 0xD872", req[0].UDPSrcPort())
			}
		})
	}
}

// TestIPv6Headers: over IPv6 the flow label on the wire is 0 whatever the AV
// says, the traffic class is the AV's, the UDP checksum 0, and the source
// port comes from the AV's flow label.
func TestIPv6Headers(t *testing.T) {
	p := newPair(t, pairOpts{ipv6: true, flowLabel: 0x12345, trafficClass: 0x28})
	c := p.connect(qpOpts{})
	data, got := p.sendN(c, 100, 128, 0)
	p.settle()
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess)
	rw := poll(p.b.rcq)
	wantWC(t, "recv", rw, emu.WCSuccess)
	if rw[0].NetworkHdrType != emu.NetworkIPv6 || !bytes.Equal(got[:100], data) {
		t.Errorf("recv WC %+v", rw[0])
	}
	for _, pk := range append(p.a.rec.take(t), p.b.rec.take(t)...) {
		if !pk.IsIPv6() || pk.FlowLabel() != 0 || pk.TrafficClass() != 0x28 || pk.UDPChecksum() != 0 ||
			pk.UDPSrcPort() != 0xE341 || pk.HopLimit() != 64 {
			t.Errorf("%v: v6 %v flow %#x tc %#x csum %#x sport %#x", pk.Opcode(), pk.IsIPv6(), pk.FlowLabel(),
				pk.TrafficClass(), pk.UDPChecksum(), pk.UDPSrcPort())
		}
	}
}

// TestSRQ: receives through an SRQ, with the limit event when the queue
// falls below the armed limit.
func TestSRQ(t *testing.T) {
	p := newPair(t, pairOpts{})
	var events []emu.EventType
	s, err := p.b.pd.CreateSRQ(&emu.SRQInitAttr{Attr: emu.SRQAttr{MaxWR: 16, MaxSGE: 2, SRQLimit: 2},
		EventHandler: func(ev emu.Event) { events = append(events, ev.Type) }})
	if err != nil {
		t.Fatal(err)
	}
	c := p.connect(qpOpts{srqB: s})
	var bufs [][]byte
	for i := range 3 {
		dst, got, mrb := p.b.buf(64, 0)
		bufs = append(bufs, got)
		if _, err := s.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		src, _, mra := p.a.buf(10, byte(i+1))
		p.a.postSend(c.qa, emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend, SendFlags: emu.SendSignaled | emu.SendSolicited,
			SGList: []emu.SGE{{Addr: src, Length: 10, LKey: mra.LKey()}}})
	}
	p.settle()
	wantWC(t, "send", poll(p.a.scq), emu.WCSuccess, emu.WCSuccess)
	rw := poll(p.b.rcq)
	wantWC(t, "recv", rw, emu.WCSuccess, emu.WCSuccess)
	if rw[0].WRID != 0 || rw[1].WRID != 1 || bufs[0][0] != 1 || bufs[1][0] != 2 {
		t.Errorf("SRQ order: %+v", rw)
	}
	if len(events) != 1 || events[0] != emu.EventSRQLimitReached {
		t.Errorf("events %v, want one SRQ_LIMIT_REACHED", events)
	}
}

// TestSolicitedNotify: a CQ armed for solicited completions calls its
// handler only for a SEND with the SE bit (the receive side of a solicited SEND).
func TestSolicitedNotify(t *testing.T) {
	p := newPair(t, pairOpts{})
	calls := 0
	cq, err := p.b.dev.CreateCQ(emu.CQInitAttr{CQE: 16, CompHandler: func(*emu.CQ) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	p.b.rcq = cq
	c := p.connect(qpOpts{})
	cq.ReqNotify(emu.CQSolicited)
	p.sendN(c, 8, 8, 0)
	p.settle()
	if calls != 0 {
		t.Fatalf("handler called for an unsolicited SEND")
	}
	p.sendN(c, 8, 8, emu.SendSolicited)
	p.settle()
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
}

// TestNeighbor: a Config.Neighbor answer replaces the AV's DMAC on the
// wire.
func TestNeighbor(t *testing.T) {
	p := newPair(t, pairOpts{})
	want := [6]byte{2, 0xAA, 0, 0, 0, 2}
	p.a.r.cfg.Neighbor = emu.ResolverFunc(func(ctx context.Context, ip netip.Addr) ([6]byte, error) {
		if ctx.Err() == nil {
			t.Errorf("the driver waits on its per-packet neighbour lookup")
		}
		if ip != p.b.ip {
			return [6]byte{}, unix.EHOSTUNREACH
		}
		return want, nil
	})
	c := p.connect(qpOpts{})
	p.sendN(c, 8, 8, 0)
	p.a.r.Poll()
	for _, pk := range p.a.rec.take(t) {
		if pk.EthDst() != want {
			t.Errorf("destination MAC %x, want %x", pk.EthDst(), want)
		}
	}
}
