package rxe

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/wire"
)

// TestSendOnlyACK: RC SEND of 5 bytes: one SEND_ONLY with PadCnt
// 3 and AckReq, one ACK with MSN 1 at the request's PSN, both completions.
func TestSendOnlyACK(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{sqpsnA: 100, sqpsnB: 500})
	src, data, mra := p.a.buf(5, 1)
	dst, got, mrb := p.b.buf(64, 0)
	p.b.postRecv(c.qb, emu.RecvWR{WRID: 7, SGList: []emu.SGE{{Addr: dst, Length: 64, LKey: mrb.LKey()}}})
	p.a.postSend(c.qa, emu.SendWR{WRID: 9, Opcode: emu.WRSend, SendFlags: emu.SendSignaled,
		SGList: []emu.SGE{{Addr: src, Length: 5, LKey: mra.LKey()}}})
	p.settle()
	req := p.a.rec.take(t)
	if len(req) != 1 || req[0].Opcode() != wire.RCSendOnly {
		t.Fatalf("requests %v, want one RC_SEND_ONLY", ops(req))
	}
	b := req[0].BTH()
	if b.PadCnt() != 3 || !b.AckReq() || b.PSN() != 100 || b.DestQP() != c.qb.QPNum() {
		t.Errorf("SEND_ONLY BTH %+v", b.Fields())
	}
	resp := p.b.rec.take(t)
	if len(resp) != 1 || resp[0].Opcode() != wire.RCAcknowledge {
		t.Fatalf("responses %v, want one ACKNOWLEDGE", ops(resp))
	}
	if a := resp[0].AETH(); a.Syndrome() != 0x1F || a.MSN() != 1 || resp[0].BTH().PSN() != 100 {
		t.Errorf("ACK %+v PSN %d", a.Fields(), resp[0].BTH().PSN())
	}
	sw := poll(p.a.scq)
	if len(sw) != 1 || sw[0].Status != emu.WCSuccess || sw[0].ByteLen != 5 || sw[0].WRID != 9 || sw[0].Opcode != emu.WCSend {
		t.Errorf("send WCs %+v", sw)
	}
	rw := poll(p.b.rcq)
	if len(rw) != 1 || rw[0].Status != emu.WCSuccess || rw[0].ByteLen != 5 || rw[0].WRID != 7 || rw[0].Opcode != emu.WCRecv ||
		rw[0].WCFlags&emu.WCGRH == 0 {
		t.Errorf("recv WCs %+v", rw)
	}
	if !bytes.Equal(got[:5], data) {
		t.Errorf("received %x, want %x", got[:5], data)
	}
	if n := p.a.counter("rdma_sends"); n != 1 {
		t.Errorf("rdma_sends %d", n)
	}
	if n := p.b.counter("rdma_recvs"); n != 1 {
		t.Errorf("rdma_recvs %d", n)
	}
	for _, c := range []struct {
		n    *node
		name string
		want uint64
	}{{p.a, "sent_pkts", 1}, {p.b, "sent_pkts", 1}, {p.a, "rcvd_pkts", 1}, {p.b, "rcvd_pkts", 1},
		{p.a, "ack_deferred", 0}, {p.b, "ack_deferred", 0}} {
		if got := c.n.counter(c.name); got != c.want {
			t.Errorf("%s %s = %d, want %d", c.n.dev.Name(), c.name, got, c.want)
		}
	}
}

// TestInlineSend: inline data is copied at post time: changing the buffer
// afterwards does not change what arrives.
func TestInlineSend(t *testing.T) {
	p := newPair(t, pairOpts{})
	c := p.connect(qpOpts{})
	src, data, _ := p.a.buf(100, 1)
	want := bytes.Clone(data)
	dst, got, mrb := p.b.buf(128, 0)
	p.b.postRecv(c.qb, emu.RecvWR{WRID: 7, SGList: []emu.SGE{{Addr: dst, Length: 128, LKey: mrb.LKey()}}})
	p.a.postSend(c.qa, emu.SendWR{WRID: 9, Opcode: emu.WRSendWithImm, ImmData: 0xAABBCCDD,
		SendFlags: emu.SendSignaled | emu.SendInline, SGList: []emu.SGE{{Addr: src, Length: 100}}})
	clear(data)
	p.settle()
	rw := poll(p.b.rcq)
	wantWCs := []emu.WCStatus{emu.WCSuccess}
	if len(rw) != 1 || rw[0].Status != wantWCs[0] || rw[0].ImmData != 0xAABBCCDD || rw[0].WCFlags&emu.WCWithImm == 0 {
		t.Fatalf("recv WCs %+v", rw)
	}
	if !bytes.Equal(got[:100], want) {
		t.Error("inline data differs")
	}
}

// TestAddrBytes: an address's addrBytes matches exactly the bytes a frame
// holds for that address (4 for IPv4, 16 for IPv6, an IPv4-mapped one
// included), and a zoned or invalid address matches none.
func TestAddrBytes(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("::ffff:10.0.0.1")}
	for _, a := range addrs {
		k := addrBytesOf(a)
		for _, b := range addrs {
			if got := k.is(b.AsSlice()); got != (a == b) {
				t.Errorf("addrBytesOf(%v).is(% x) = %v", a, b.AsSlice(), got)
			}
		}
		if z := addrBytesOf(a.WithZone("eth0")); a.Is6() && z.is(a.AsSlice()) {
			t.Errorf("zoned %v matches its bytes", a)
		}
	}
	var zero addrBytes
	if addrBytesOf(netip.Addr{}) != zero || zero.is(nil) || zero.is([]byte{10, 0, 0, 1}) {
		t.Error("the invalid address's bytes")
	}
}
