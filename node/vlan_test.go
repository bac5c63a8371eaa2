package node

import (
	"context"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/link"
)

// TestVLANLink: two nodes on VLAN 100 of the two ends of a pipe
// (link.VLAN, what softroce --vlan 100 puts on its TAP or interface): the
// GIDs carry the VLAN, a SEND between them completes with
// IB_WC_WITH_VLAN and vlan_id 100; a node without a VLAN has GIDs
// without one.
func TestVLANLink(t *testing.T) {
	pa, pb := link.NewPipe(&link.PipeConfig{MTU: 1500})
	va, err := link.NewVLAN(pa, 100)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := link.NewVLAN(pb, 100)
	if err != nil {
		t.Fatal(err)
	}
	ipA, ipB := netip.MustParsePrefix("10.81.0.2/24"), netip.MustParsePrefix("10.81.0.3/24")
	a, err := New(context.Background(), Config{Name: "rxea", Link: va, NoDAD: true, Addrs: []netip.Prefix{ipA}, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(context.Background(), Config{Name: "rxeb", Link: vb, NoDAD: true, Addrs: []netip.Prefix{ipB}, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, n := range []*Node{a, b} {
		g, err := n.Device().QueryGID(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if g.VLANID != 100 {
			t.Errorf("%s GID 1: VLAN %d, want 100", n.Name(), g.VLANID)
		}
	}
	ea, eb := connectRC(t, a, b, ipA.Addr(), ipB.Addr())
	if _, err := eb.qp.PostRecv([]emu.RecvWR{{WRID: 1, SGList: []emu.SGE{{Addr: eb.addr, Length: bufSize, LKey: eb.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ea.qp.PostSend([]emu.SendWR{{WRID: 2, Opcode: emu.WRSend, SGList: []emu.SGE{{Addr: ea.addr, Length: 3000, LKey: ea.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	ea.wait(t, 1)
	wc := eb.wait(t, 1)[0]
	if wc.WCFlags&emu.WCWithVLAN == 0 || wc.VLANID != 100 {
		t.Errorf("receive completion flags %v VLAN %d, want IB_WC_WITH_VLAN and 100", wc.WCFlags, wc.VLANID)
	}

	// Without a VLAN the same devices report none.
	pc, pd := link.NewPipe(&link.PipeConfig{MTU: 1500})
	c, err := New(context.Background(), Config{Name: "rxec", Link: pc, NoDAD: true, Addrs: []netip.Prefix{ipA}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer pd.Close()
	if g, err := c.Device().QueryGID(1, 1); err != nil || g.VLANID != 0 {
		t.Errorf("GID 1 without a VLAN: %+v %v", g, err)
	}
}
