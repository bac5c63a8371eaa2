package node

import (
	"errors"
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
//     The kernel's IP layer would still drop a group's packets until the
//     host joined it at the IP level (ip_route_input_mc, ip6_mc_input), so
//     attach-only receive on the kernel's rxe needs a join as well;
//     softroce delivers on the attach alone, from the link and from the
//     node's own senders (the kernel's multicast loopback).
//   - JoinMulticast makes the node a member of the IP group on its link,
//     what the kernel's rdma_cm does for rdma_join_multicast on RoCEv2
//     (cma_igmp_send → ip_mc_inc_group): an IGMP report that switches and
//     bridges with IGMP snooping need before they forward the group's
//     traffic to the node, and answers to their queries.
//
// On a UDP link the kernel is the IP host: both levels are a membership
// of the link's wildcard socket (IP_ADD_MEMBERSHIP), which the kernel
// reports; a link bound to its addresses receives no multicast.

// mcastFilter is the device's McastFilter: the host's MAC filter; on a
// UDP link, a membership of the link's socket (a socket receives no
// multicast otherwise). A UDP link bound to its addresses cannot receive
// multicast at all: the attach still succeeds, as it did on such a link
// before, and nothing arrives.
func (n *Node) mcastFilter(gid emu.GID, add bool) error {
	g := gid.Addr()
	if n.host == nil {
		if err := n.udp.member(g, add); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
		return nil
	}
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
// is not multicast. On a UDP link the link's socket joins the group and
// the kernel, the IP host there, reports it; a UDP link bound to its
// addresses cannot join (EOPNOTSUPP).
func (n *Node) JoinMulticast(g netip.Addr) error {
	if n.host == nil {
		if !g.Unmap().IsMulticast() {
			return fmt.Errorf("node %s: join %v: not a multicast address: %w", n.name, g, unix.EINVAL)
		}
		if err := n.udp.member(g, true); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		return nil
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
		if err := n.udp.member(g, false); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		return nil
	}
	if err := n.host.LeaveIPGroup(g); err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	return nil
}
