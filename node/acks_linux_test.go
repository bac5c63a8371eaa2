package node

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
)

// TestOneAckPerSendOnABridge: two softroce nodes on TAPs of one bridge,
// as two hosts running ib_send_bw -s 4096 -m 1024 -n 100: A posts 100
// SENDs of 4 packets at once, B's CQ wakes a handler at each receive (a
// waiting application), and B answers each message's last packet
// (AckReq) with an ACK of its own, as rxe does: 100 ACKs, none held or
// merged (rxe.Config.CoalesceACKs is off).
func TestOneAckPerSendOnABridge(t *testing.T) {
	ns := bridgeNS(t)
	a := bridgeNode(t, ns, "softroce0", "sra0", macA, []netip.Addr{brA}, "")
	b := bridgeNode(t, ns, "softroce1", "sra1", macB, []netip.Addr{brB}, "")
	const msgs, size = 100, 4096
	ea := newEnd(t, a, brA)
	eb := newEndCQ(t, b, brB, emu.CQInitAttr{CQE: 1024, CompHandler: func(cq *emu.CQ) { cq.ReqNotify(emu.CQNextComp) }})
	eb.cq.ReqNotify(emu.CQNextComp)
	ea.connect(t, eb)
	eb.connect(t, ea)
	recvs := make([]emu.RecvWR, msgs)
	sends := make([]emu.SendWR, msgs)
	for i := range msgs {
		off := uint64(i%(bufSize/size)) * size
		recvs[i] = emu.RecvWR{WRID: uint64(i), SGList: []emu.SGE{{Addr: eb.addr + off, Length: size, LKey: eb.mr.LKey()}}}
		sends[i] = emu.SendWR{WRID: uint64(i), Opcode: emu.WRSend,
			SGList: []emu.SGE{{Addr: ea.addr + off, Length: size, LKey: ea.mr.LKey()}}}
	}
	if _, err := eb.qp.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	sentB, rcvdA := counters(t, b)["sent_pkts"], counters(t, a)["rcvd_pkts"]
	if _, err := ea.qp.PostSend(sends); err != nil {
		t.Fatal(err)
	}
	ea.wait(t, msgs)
	eb.wait(t, msgs)
	syncWith(t, ea, eb)
	cb, ca := counters(t, b), counters(t, a)
	if n, m := cb["sent_pkts"]-sentB, ca["rcvd_pkts"]-rcvdA; n != msgs || m != msgs {
		t.Errorf("B sent %d ACKs and A received %d for %d SENDs, want %d", n, m, msgs, msgs)
	}
	for _, c := range []string{"duplicate_request", "completer_retry_err"} {
		if ca[c]+cb[c] != 0 {
			t.Errorf("%s: A %d, B %d: a retry changed the count", c, ca[c], cb[c])
		}
	}
}
