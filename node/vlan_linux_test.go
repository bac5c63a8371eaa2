package node

import (
	"context"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/internal/testenv"
)

// TestVLANInterface: two nodes on the kernel's VLAN interfaces (VLAN 100)
// of the two ends of a veth pair, each through AF_PACKET, as softroce
// --iface IF.100 runs: their GIDs carry the VLAN and the VLAN interface's
// name (rdma_read_gid_l2_fields, ndev), and a SEND between them completes
// with IB_WC_WITH_VLAN and vlan_id 100 (rxe's do_complete for a packet
// that came in on a VLAN device). It skips on a kernel without VLAN
// devices.
func TestVLANInterface(t *testing.T) {
	ns := testenv.NewNetNS(t)
	ns.Run(t, "ip", "link", "add", "srvl0", "type", "veth", "peer", "name", "srvl1")
	if out, err := ns.Command("ip", "link", "add", "link", "srvl0", "name", "srvl0.100", "type", "vlan", "id", "100").CombinedOutput(); err != nil {
		t.Skipf("this kernel makes no VLAN devices (8021q): %v: %s", err, out)
	}
	ns.Run(t, "ip", "link", "add", "link", "srvl1", "name", "srvl1.100", "type", "vlan", "id", "100")
	ns.Run(t, "ip", "link", "set", "srvl0", "up")
	ns.Run(t, "ip", "link", "set", "srvl1", "up")
	ipA, ipB := netip.MustParsePrefix("10.80.0.2/24"), netip.MustParsePrefix("10.80.0.3/24")
	var a, b *Node
	if err := ns.Do(func() error {
		for _, x := range []struct {
			n    **Node
			ifc  string
			ip   netip.Prefix
			seed uint64
		}{{&a, "srvl0.100", ipA, 1}, {&b, "srvl1.100", ipB, 2}} {
			l, err := OpenPacket(x.ifc, "", 0)
			if err != nil {
				return err
			}
			if *x.n, err = New(context.Background(), Config{Name: "rxe" + x.ifc[4:5], Link: l, NoDAD: true, Addrs: []netip.Prefix{x.ip}, Seed: x.seed}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	for _, x := range []struct {
		n   *Node
		ifc string
	}{{a, "srvl0.100"}, {b, "srvl1.100"}} {
		for _, i := range []int{0, 1} {
			g, err := x.n.Device().QueryGID(1, i)
			if err != nil {
				t.Fatal(err)
			}
			if g.VLANID != 100 || g.NetDev != x.ifc {
				t.Errorf("%s GID %d: netdev %q VLAN %d, want %q 100", x.n.Name(), i, g.NetDev, g.VLANID, x.ifc)
			}
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

}
