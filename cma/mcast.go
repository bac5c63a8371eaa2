package cma

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
	"golang.org/x/sys/unix"
)

// ENOTSUPP is the kernel-internal errno 524 that rdma_join_multicast
// returns for an IPv6 group on a RoCEv2 port (cma_iboe_join_multicast).
const ENOTSUPP = unix.Errno(524)

// Multicast is a group an ID joined (struct cma_multicast).
type Multicast struct {
	id       *ID
	group    netip.Addr
	mgid     emu.GID
	qkey     uint32
	sendOnly bool
	cookie   any
	left     bool
	linked   bool // joined on the link (Config.Groups)
}

// Group returns the group's IP address.
func (m *Multicast) Group() netip.Addr { return m.group }

// Cookie returns the consumer's value given at the join.
func (m *Multicast) Cookie() any { return m.cookie }

// JoinMulticast is rdma_join_multicast on a RoCE port: a UD ID bound to a
// local address or resolved joins group (sendOnly: as a send-only full
// member); MULTICAST_JOIN follows with the group's GID (for an IPv4 group
// ::ffff:a.b.c.d), QPN 0xFFFFFF and the port space's Q_Key, the address
// handle's fields for the consumer's sends and its attach. cookie comes
// back in Event.Multicast.
func (id *ID) JoinMulticast(group netip.Addr, sendOnly bool, cookie any) (*Multicast, error) {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if !id.hasDev || (id.state != StateAddrBound && id.state != StateAddrResolved) {
		return nil, fmt.Errorf("cma: join in %v: %w", id.state, unix.EINVAL)
	}
	if id.qpType != qpTypeUD {
		return nil, fmt.Errorf("cma: join on a %v ID: %w", id.qpType, unix.EINVAL)
	}
	g := group.Unmap()
	if !g.IsValid() || g.IsUnspecified() {
		return nil, fmt.Errorf("cma: join %v: %w", group, unix.EINVAL)
	}
	if g.Is6() {
		return nil, fmt.Errorf("cma: join %v: IPv6 groups on a RoCEv2 port: %w", g, ENOTSUPP)
	}
	m := &Multicast{id: id, group: g, mgid: emu.GIDFromAddr(g), sendOnly: sendOnly, cookie: cookie}
	if id.ps == PSUDP || id.ps == PSIB {
		m.qkey = UDPQKey
	}
	if !sendOnly && c.cfg.Groups != nil {
		// cma_iboe_join_multicast: a full member of an IPv4 group on
		// RoCEv2 joins it on the link (IGMP).
		// A link whose memberships the kernel keeps (EOPNOTSUPP: a
		// UDP link) needs none from us.
		switch err := c.cfg.Groups.JoinMulticast(g); {
		case err == nil:
			m.linked = true
		case !errors.Is(err, unix.EOPNOTSUPP):
			return nil, fmt.Errorf("cma: join %v on the link: %w", g, err)
		}
	}
	id.mcs = append(id.mcs, m)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if m.left || id.destroyed {
			return
		}
		ah := ib.AHAttr{Type: ib.AHAttrTypeRoCE, PortNum: 1, AHFlags: ib.AHGRH,
			GRH: ib.GlobalRoute{DGID: m.mgid, SGIDIndex: uint8(id.gidIdx), HopLimit: defaultHopLimit, TrafficClass: id.tos}}
		id.event(Event{Type: EventMulticastJoin, Multicast: m,
			UD: UDParam{AH: ah, QPNum: emu.MulticastQPN, QKey: m.qkey}})
	}()
	return m, nil
}

// LeaveMulticast is rdma_leave_multicast: no event of m comes any more.
func (id *ID) LeaveMulticast(m *Multicast) error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range id.mcs {
		if x == m {
			id.mcs = append(id.mcs[:i], id.mcs[i+1:]...)
			m.leaveLocked()
			return nil
		}
	}
	return fmt.Errorf("cma: leave %v: not joined: %w", m.group, unix.EADDRNOTAVAIL)
}

// leaveLocked ends the membership: no more events, and the link leave of
// a linked join.
func (m *Multicast) leaveLocked() {
	m.left = true
	if m.linked {
		m.linked = false
		m.id.cm.cfg.Groups.LeaveMulticast(m.group)
	}
}
