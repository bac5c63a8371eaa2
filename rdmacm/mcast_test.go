package rdmacm

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
)

// TestMcastJoinFor: the group GID, Q_Key, hop limit, MTU and link join
// rdma_join_multicast gives on RoCE, and its refusals.
func TestMcastJoinFor(t *testing.T) {
	v4 := netip.MustParseAddr("239.1.2.3")
	v4GID := emu.GIDFromAddr(v4)
	v1GID := v4GID
	v1GID[0], v1GID[1] = 0xff, 0x0e
	v6 := netip.MustParseAddr("ff0e::4791")
	for _, c := range []struct {
		name     string
		group    netip.Addr
		ps       uint16
		typ      ib.GIDType
		mtu      int
		qkey     uint32
		sendOnly bool
		want     McastJoin
		err      error
	}{
		{"mckey: UDP, IPv4, RoCEv2", v4, mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 1500, 0, false,
			McastJoin{MGID: v4GID, QKey: 0x01234567, QPN: 0xffffff, HopLimit: 64, MTU: ib.MTU1024, JoinLink: true}, nil},
		{"IPv4-mapped group", netip.AddrFrom16(v4.As16()), mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 9000, 0, false,
			McastJoin{MGID: v4GID, QKey: 0x01234567, QPN: 0xffffff, HopLimit: 64, MTU: ib.MTU4096, JoinLink: true}, nil},
		{"send-only", v4, mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 1500, 0, true,
			McastJoin{MGID: v4GID, QKey: 0x01234567, QPN: 0xffffff, HopLimit: 64, MTU: ib.MTU1024}, nil},
		{"RDMA_PS_IB takes the default Q_Key", v4, mad.PortSpaceIB, ib.GIDTypeRoCEv2, 1500, 0, false,
			McastJoin{MGID: v4GID, QKey: 0x01234567, QPN: 0xffffff, HopLimit: 64, MTU: ib.MTU1024, JoinLink: true}, nil},
		{"RDMA_PS_TCP keeps the id's Q_Key", v4, mad.PortSpaceTCP, ib.GIDTypeRoCEv2, 1500, 0x42, false,
			McastJoin{MGID: v4GID, QKey: 0x42, QPN: 0xffffff, HopLimit: 64, MTU: ib.MTU1024, JoinLink: true}, nil},
		{"RoCE v1", v4, mad.PortSpaceUDP, ib.GIDTypeRoCE, 1500, 0, false,
			McastJoin{MGID: v1GID, QKey: 0x01234567, QPN: 0xffffff, HopLimit: 1, MTU: ib.MTU1024}, nil},
		{"IPv6 on RoCE v1", v6, mad.PortSpaceUDP, ib.GIDTypeRoCE, 1500, 0, false,
			McastJoin{MGID: emu.GID(v6.As16()), QKey: 0x01234567, QPN: 0xffffff, HopLimit: 1, MTU: ib.MTU1024}, nil},
		{"IPv6 on RoCEv2", v6, mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 1500, 0, false, McastJoin{}, ENOTSUPP},
		{"zero address", netip.IPv4Unspecified(), mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 1500, 0, false, McastJoin{}, unix.EINVAL},
		{"tiny MTU", v4, mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 300, 0, false, McastJoin{}, unix.EINVAL},
		{"Q_Key conflict", v4, mad.PortSpaceUDP, ib.GIDTypeRoCEv2, 1500, 0x99, false, McastJoin{}, unix.EINVAL},
	} {
		got, err := McastJoinFor(c.group, c.ps, c.typ, c.mtu, c.qkey, c.sendOnly)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
	if !emu.GID(v4GID).IsMulticast() || emu.MulticastMAC(v4GID) != [6]byte{0x01, 0, 0x5e, 1, 2, 3} {
		t.Errorf("GID %v is not multicast or maps to %x", v4GID, emu.MulticastMAC(v4GID))
	}
}
