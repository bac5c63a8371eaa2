package node

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/qpstate"
)

const mcastQKey = 0x01234567 // RDMA_UDP_QKEY, what rdma_cm gives multicast groups

// udEnd is a UD QP on a node with a registered buffer: 16 receive slots of
// 256 bytes (40 of GRH, then the message) and a send slot after them.
type udEnd struct {
	n    *Node
	pd   *emu.PD
	cq   *emu.CQ
	qp   *emu.QP
	addr uint64
	buf  []byte
	mr   *emu.MR
}

func newUDEnd(t *testing.T, n *Node, qkey uint32) *udEnd {
	t.Helper()
	e := &udEnd{n: n}
	d := n.Device()
	var err error
	if e.pd, err = d.AllocPD(0); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(emu.CQInitAttr{CQE: 64}); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&emu.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: qpstate.TypeUD, SQSigType: emu.SignalAllWR,
		PortNum: 1, Cap: qpstate.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a qpstate.Attr
		m qpstate.AttrMask
	}{
		{qpstate.Attr{QPState: qpstate.StateInit, PortNum: 1, QKey: qkey}, qpstate.AttrState | qpstate.AttrPKeyIndex | qpstate.AttrPort | qpstate.AttrQKey},
		{qpstate.Attr{QPState: qpstate.StateRTR}, qpstate.AttrState},
		{qpstate.Attr{QPState: qpstate.StateRTS}, qpstate.AttrState | qpstate.AttrSQPSN},
	} {
		if err := e.qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	e.addr, e.buf = d.Memory().Alloc(17 * 256)
	if e.mr, err = e.pd.RegUserMR(e.addr, 17*256, e.addr, ib.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if _, err := e.qp.PostRecv([]emu.RecvWR{{WRID: uint64(i), SGList: []emu.SGE{{Addr: e.addr + uint64(i*256), Length: 256, LKey: e.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// sendMcast sends msg as a UD SEND to QPN 0xFFFFFF of group from the
// node's GID of src.
func (e *udEnd) sendMcast(t *testing.T, src, group netip.Addr, msg []byte) {
	t.Helper()
	sidx, err := e.n.GID(src)
	if err != nil {
		t.Fatal(err)
	}
	gid := emu.GIDFromAddr(group)
	ah, err := e.pd.CreateAH(&ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH, DMAC: emu.MulticastMAC(gid),
		GRH: ib.GlobalRoute{DGID: gid, SGIDIndex: uint8(sidx), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	off := 16 * 256
	copy(e.buf[off:], msg)
	if _, err := e.qp.PostSend([]emu.SendWR{{WRID: 100, Opcode: emu.WRSend, SendFlags: emu.SendSignaled, AH: ah,
		RemoteQPN: emu.MulticastQPN, RemoteQKey: mcastQKey,
		SGList: []emu.SGE{{Addr: e.addr + uint64(off), Length: uint32(len(msg)), LKey: e.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	wc := e.waitWC(t, time.Second)
	if len(wc) != 1 || wc[0].Status != emu.WCSuccess || wc[0].Opcode&emu.WCRecv != 0 {
		t.Fatalf("send completion %+v", wc)
	}
	ah.Destroy()
}

// waitWC polls the CQ until a completion comes or d passes, then returns
// what it has.
func (e *udEnd) waitWC(t *testing.T, d time.Duration) []emu.WC {
	t.Helper()
	var out []emu.WC
	wc := make([]emu.WC, 8)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n := e.cq.Poll(wc); n > 0 {
			out = append(out, wc[:n]...)
			return out
		}
	}
	return out
}

// received checks that e got msg (after the 40-byte GRH room) with a
// successful receive completion from srcQP.
func (e *udEnd) received(t *testing.T, msg []byte, srcQP uint32) {
	t.Helper()
	wc := e.waitWC(t, 2*time.Second)
	if len(wc) != 1 || wc[0].Status != emu.WCSuccess || wc[0].Opcode != emu.WCRecv || wc[0].SrcQP != srcQP ||
		int(wc[0].ByteLen) != emu.GRHSize+len(msg) {
		t.Fatalf("QP %#x: completions %+v, want one receive of %d bytes from QP %#x", e.qp.QPNum(), wc, len(msg), srcQP)
	}
	slot := int(wc[0].WRID) * 256
	if got := e.buf[slot+emu.GRHSize : slot+emu.GRHSize+len(msg)]; !bytes.Equal(got, msg) {
		t.Errorf("QP %#x received %q, want %q", e.qp.QPNum(), got, msg)
	}
}

// TestMulticastOverPipe: a UD multicast SEND from one node reaches every
// QP of the other node attached to the group, and none that is not
// (another Q_Key, or detached); before any attach the node's MAC filter
// drops the frame, as a NIC does, and the attach alone opens it (rxe's
// dev_mc_add); so does it after the last detach. JoinMulticast puts an
// IGMPv3 or MLDv2 join on the link (in the capture) and LeaveMulticast
// the leave.
func TestMulticastOverPipe(t *testing.T) {
	for _, group := range []netip.Addr{netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("ff0e::4791")} {
		t.Run(group.String(), func(t *testing.T) {
			a, b, _, pb := pipePair(t)
			src := ipA
			if group.Is6() {
				src = ip6A
			}
			sender := newUDEnd(t, a, mcastQKey)
			m1, m2 := newUDEnd(t, b, mcastQKey), newUDEnd(t, b, mcastQKey)
			other := newUDEnd(t, b, 0x999)      // attached, another Q_Key
			lonely := newUDEnd(t, b, mcastQKey) // not attached
			gid := emu.GIDFromAddr(group)

			notForUs := b.Stats().Host.NotForUs
			sender.sendMcast(t, src, group, []byte("before the attach"))
			time.Sleep(20 * time.Millisecond)
			for _, e := range []*udEnd{m1, m2, other, lonely} {
				if wc := e.waitWC(t, 0); len(wc) != 0 {
					t.Fatalf("a frame to an unattached group completed %+v", wc)
				}
			}
			if b.Stats().Host.NotForUs == notForUs {
				t.Error("the node's MAC filter did not count the unattached group's frame")
			}

			for _, e := range []*udEnd{m1, m2, other} {
				if err := e.qp.AttachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			// The attach alone opens the filter (rxe's dev_mc_add).
			sender.sendMcast(t, src, group, []byte("to the group"))
			m1.received(t, []byte("to the group"), sender.qp.QPNum())
			m2.received(t, []byte("to the group"), sender.qp.QPNum())
			for _, e := range []*udEnd{other, lonely} {
				if wc := e.waitWC(t, 50*time.Millisecond); len(wc) != 0 {
					t.Errorf("QP %#x got %+v", e.qp.QPNum(), wc)
				}
			}
			if err := b.JoinMulticast(group); err != nil {
				t.Fatal(err)
			}
			if err := m1.qp.DetachMcast(gid, 0); err != nil {
				t.Fatal(err)
			}
			sender.sendMcast(t, src, group, []byte("after a detach"))
			m2.received(t, []byte("after a detach"), sender.qp.QPNum())
			if wc := m1.waitWC(t, 50*time.Millisecond); len(wc) != 0 {
				t.Errorf("the detached QP got %+v", wc)
			}
			for _, e := range []*udEnd{m2, other} {
				if err := e.qp.DetachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.LeaveMulticast(group); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(b.Host().IPGroups(), group) {
				t.Error("still a member after the leave")
			}
			notForUs = b.Stats().Host.NotForUs
			sender.sendMcast(t, src, group, []byte("after the last detach and the leave"))
			time.Sleep(20 * time.Millisecond)
			if b.Stats().Host.NotForUs == notForUs {
				t.Error("the filter is still open after the last detach and the leave")
			}
			checkJoinLeave(t, pb.Bytes(), group, emu.MulticastMAC(gid))
		})
	}
}

// checkJoinLeave finds, in a node's capture, the multicast SENDs it
// received (to the group's MAC) and its join and leave of group: IGMPv3
// TO_EX then TO_IN for IPv4, MLDv2 for IPv6.
func checkJoinLeave(t *testing.T, capture []byte, group netip.Addr, mac [6]byte) {
	t.Helper()
	var reports []uint8
	roce := 0
	for _, f := range testutil.ReadPcap(t, bytes.NewReader(capture)) {
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && u.DstPort == 4791 && bytes.Equal(eth.DstMAC, mac[:]) {
			roce++
		}
		if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok && ip.Protocol == layers.IPProtocolIGMP && len(ip.Payload) >= 16 {
			if netip.AddrFrom4([4]byte(ip.Payload[12:16])) == group {
				reports = append(reports, ip.Payload[8])
			}
		}
		if icmp, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok && icmp.TypeCode.Type() == 143 && len(icmp.Payload) >= 24 {
			if netip.AddrFrom16([16]byte(icmp.Payload[8:24])) == group {
				reports = append(reports, icmp.Payload[4])
			}
		}
	}
	if !slices.Equal(reports, []uint8{4, 3}) {
		t.Errorf("membership records for %v in the capture: %v, want a join (4, TO_EX) and a leave (3, TO_IN)", group, reports)
	}
	if roce < 4 {
		t.Errorf("%d multicast SENDs to %x in the capture, want 4", roce, mac)
	}
}
