package node

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
)

// Multicast on the node's link. Two levels, as on a Linux host with rxe:
//
//   - a UD QP attached to a multicast GID (emu.QP.AttachMcast,
//     ibv_attach_mcast) opens the link's MAC filter for the group (rxe's
//     dev_mc_add), so that UD multicast frames arriving on the link reach
//     every QP attached to the group. The filter takes the group's own
//     mapping, 01:00:5e plus 23 bits for an IPv4 group (a GID
//     ::ffff:a.b.c.d), 33:33 plus 32 bits for an IPv6 one; the kernel's
//     rxe programs the 33:33 form for both (ipv6_eth_mc_map of the GID),
//     which a software netdev never filters on.
//   - JoinMulticast makes the node a member of the IP group on its link,
//     what the kernel's rdma_cm does for rdma_join_multicast on RoCEv2
//     (cma_igmp_send → ip_mc_inc_group): an IGMP report that switches and
//     bridges with IGMP snooping need before they forward the group's
//     traffic to the node, and answers to their queries.

// mcastFilter is the device's McastFilter: the host's MAC filter.
func (n *Node) mcastFilter(gid emu.GID, add bool) error {
	if n.host == nil {
		return nil // a UDP link: the kernel's socket receives what it receives
	}
	g := gid.Addr()
	if add {
		return n.host.JoinGroup(g)
	}
	return n.host.LeaveGroup(g)
}

// JoinMulticast makes the node a member of the IPv4 or IPv6 multicast
// group g on its link (IPv4-mapped addresses count as IPv4), as the
// kernel's ip_mc_inc_group and ipv6_dev_mc_inc: the link's MAC filter
// opens and the first join sends an IGMPv3 report (IPv4) or an MLDv2
// report (IPv6); group queries are answered while it lasts. Joins count:
// each needs a LeaveMulticast. It fails with EINVAL for an address that
// is not multicast and EOPNOTSUPP on a UDP link, where the kernel is the
// IP host.
func (n *Node) JoinMulticast(g netip.Addr) error {
	if n.host == nil {
		return fmt.Errorf("node %s: join %v: the kernel owns the multicast memberships of a UDP link: %w", n.name, g, unix.EOPNOTSUPP)
	}
	if err := n.host.JoinIPGroup(g); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	return nil
}

// LeaveMulticast undoes one JoinMulticast; the last one sends the IGMP or
// MLD leave. It fails with EADDRNOTAVAIL for a group not joined.
func (n *Node) LeaveMulticast(g netip.Addr) error {
	if n.host == nil {
		return fmt.Errorf("node %s: leave %v: %w", n.name, g, unix.EOPNOTSUPP)
	}
	if err := n.host.LeaveIPGroup(g); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	return nil
}
