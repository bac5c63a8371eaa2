package rdmacm

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/mad"
)

// ENOTSUPP is the kernel-internal errno 524 that rdma_join_multicast
// returns, through ucma, for an IPv6 group on a RoCEv2 port
// (cma_iboe_join_multicast); librdmacm's caller sees errno 524.
const ENOTSUPP = unix.Errno(524)

// McastJoin is what rdma_join_multicast on a RoCE port decides for a group
// (cma_iboe_join_multicast, cma_iboe_set_mgid, cma_make_mc_event): the
// multicast GID the consumer attaches its UD QP to, the Q_Key, QPN and
// address handle fields of the RDMA_CM_EVENT_MULTICAST_JOIN, and whether
// the node joins the group on its link.
type McastJoin struct {
	// MGID is the group's GID: for an IPv4 group a.b.c.d on a RoCEv2
	// port ::ffff:a.b.c.d, on a RoCE v1 port ff0e::ffff:a.b.c.d; for an
	// IPv6 group the address itself.
	MGID emu.GID
	// QKey is the Q_Key of the event: RDMA_UDP_QKEY (mad.RDMAUDPQKey)
	// for RDMA_PS_UDP and RDMA_PS_IB, otherwise the id's Q_Key (0 for a
	// new id of another port space).
	QKey uint32
	// QPN is the QPN to send to: 0xFFFFFF.
	QPN uint32
	// HopLimit is the AH's hop limit: 64 (IPV6_DEFAULT_HOPLIMIT) for
	// an IPv4 group on RoCEv2, 1 otherwise.
	HopLimit uint8
	// MTU is the group's MTU from the netdev's (iboe_get_mtu).
	MTU ib.MTU
	// JoinLink says the node joins the IP group on its link
	// (node.Node.JoinMulticast, as cma_igmp_send's ip_mc_inc_group): an
	// IPv4 group on RoCEv2 that is not a send-only join.
	JoinLink bool
}

// McastJoinFor derives the McastJoin of rdma_join_multicast for group on
// an id of port space ps whose port has GID type gidType and whose netdev
// has MTU netdevMTU bytes; qkey is the id's Q_Key so far (0 for none).
// sendOnly is the SENDONLY_FULLMEMBER join state (no link join). Errors
// are the kernel's: EINVAL for the unspecified address, a netdev MTU too
// small for a 256-byte IB MTU, or a Q_Key that differs from the id's
// (cma_set_qkey); ENOTSUPP for an IPv6 group on RoCEv2.
func McastJoinFor(group netip.Addr, ps uint16, gidType ib.GIDType, netdevMTU int, qkey uint32, sendOnly bool) (McastJoin, error) {
	j := McastJoin{QPN: emu.MulticastQPN, HopLimit: 1}
	if !group.IsValid() || group.Unmap().IsUnspecified() {
		return j, fmt.Errorf("rdmacm: join %v: zero address: %w", group, unix.EINVAL)
	}
	g := group.Unmap()
	if g.Is6() {
		if gidType == ib.GIDTypeRoCEv2 {
			return j, fmt.Errorf("rdmacm: join %v: IPv6 groups on a RoCEv2 port: %w", g, ENOTSUPP)
		}
		j.MGID = emu.GID(g.As16())
	} else {
		j.MGID = emu.GIDFromAddr(g)
		if gidType == ib.GIDTypeRoCEv2 {
			j.HopLimit = 64
			j.JoinLink = !sendOnly
		} else {
			j.MGID[0], j.MGID[1] = 0xff, 0x0e
		}
	}
	if j.MTU = iboeMTU(netdevMTU); j.MTU == 0 {
		return j, fmt.Errorf("rdmacm: join %v: netdev MTU %d: %w", g, netdevMTU, unix.EINVAL)
	}
	// cma_set_qkey with the record's Q_Key: RDMA_UDP_QKEY for
	// RDMA_PS_UDP, else 0, which keeps the id's or takes the port
	// space's default.
	var rec uint32
	if ps == mad.PortSpaceUDP {
		rec = mad.RDMAUDPQKey
	}
	switch {
	case qkey != 0 && rec != 0 && qkey != rec:
		return j, fmt.Errorf("rdmacm: join %v: Q_Key %#x of the group, %#x of the id: %w", g, rec, qkey, unix.EINVAL)
	case qkey != 0:
		j.QKey = qkey
	case rec != 0:
		j.QKey = rec
	case ps == mad.PortSpaceIB:
		j.QKey = mad.RDMAUDPQKey
	}
	return j, nil
}

// iboeMTU is iboe_get_mtu: the largest IB MTU that fits a netdev MTU
// after the RoCE headers (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28,
// ICRC 4); 0 if not even 256 bytes do.
func iboeMTU(netdevMTU int) ib.MTU {
	n := netdevMTU - (40 + 8 + 12 + 4 + 28 + 4)
	if n < 256 {
		return 0
	}
	return ib.MTUFromBytes(n)
}
