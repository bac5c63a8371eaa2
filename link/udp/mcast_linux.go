package udp

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// JoinGroup makes the link receive datagrams to the IP multicast group g
// on its port: the wildcard socket of g's family joins the group
// (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP) on the interface the kernel routes
// g through, and the kernel sends the IGMP or MLD report. A group is
// joined once per link (a second join is EADDRINUSE, as the socket
// option's); LeaveGroup undoes it. A link bound to specific addresses has
// no socket that multicast reaches: EOPNOTSUPP.
func (l *Link) JoinGroup(g netip.Addr) error { return l.membership(g, true) }

// LeaveGroup drops the membership JoinGroup took (IP_DROP_MEMBERSHIP,
// IPV6_LEAVE_GROUP); the kernel sends the leave. A group not joined is
// EADDRNOTAVAIL.
func (l *Link) LeaveGroup(g netip.Addr) error { return l.membership(g, false) }

func (l *Link) membership(g netip.Addr, join bool) error {
	g = g.Unmap()
	op := map[bool]string{true: "join", false: "leave"}[join]
	if !g.IsMulticast() {
		return fmt.Errorf("udp: %s %v: not a multicast address: %w", op, g, unix.EINVAL)
	}
	var s *sock
	for _, c := range l.socks {
		if c.wild && c.v6 == g.Is6() {
			s = c
		}
	}
	if s == nil {
		return fmt.Errorf("udp: %s %v: the link is bound to its addresses, which multicast datagrams do not reach: %w", op, g, unix.EOPNOTSUPP)
	}
	var serr error
	err := s.rc.Control(func(fd uintptr) {
		if g.Is4() {
			opt := unix.IP_ADD_MEMBERSHIP
			if !join {
				opt = unix.IP_DROP_MEMBERSHIP
			}
			serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, opt, &unix.IPMreqn{Multiaddr: g.As4()})
			return
		}
		opt := unix.IPV6_JOIN_GROUP
		if !join {
			opt = unix.IPV6_LEAVE_GROUP
		}
		serr = unix.SetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IPV6, opt, &unix.IPv6Mreq{Multiaddr: g.As16()})
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("udp: %s %v: %w", op, g, err)
	}
	return nil
}
