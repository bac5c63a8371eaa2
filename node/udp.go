package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/emu/rxe"
	"github.com/softroce/softroce/link"
	"github.com/softroce/softroce/link/udp"
)

// OpenUDP opens a UDP link (package link/udp) for Config.Link: one socket
// on port 4791 per address of addrs, or on the wildcard addresses when
// addrs is empty, with MTU mtu (0 means 1500). It needs no privilege. It
// fails with an error wrapping EADDRINUSE when the port is taken (the
// kernel's rxe, another softroce).
//
// A node on a UDP link has no host stack: the kernel does IP, ARP and ND
// and routing. Its GID table holds the default GID (from the MAC) and
// one RoCEv2 GID per bound address, or, bound to the wildcard addresses,
// per address of the host (loopback addresses excepted, as rxe sits on
// a netdev and not on lo, and IPv6 link-local ones, which need a scope a
// GID cannot carry), following `ip addr add` and `ip addr del`
// as rxe follows its netdev's. Node.Host is nil and Node.AddAddr fails
// with EOPNOTSUPP: the kernel owns the addresses.
func OpenUDP(addrs []netip.Addr, mtu int) (link.Link, error) {
	return OpenUDPLink(&udp.Config{Addrs: addrs, MTU: mtu})
}

// OpenUDPLink is OpenUDP with the link's whole configuration (UDP GSO,
// the port, the batch size).
func OpenUDPLink(cfg *udp.Config) (link.Link, error) {
	l, err := udp.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return l, nil
}

// udpNode is the part of a Node that sits on a UDP link.
type udpNode struct {
	link *udp.Link
	mac  net.HardwareAddr
	stop func() // ends the address watch; nil without one

	mu     sync.Mutex
	addrs  []netip.Addr       // the GID addresses, in the order they came
	groups map[netip.Addr]int // multicast memberships of the link's socket, counted
}

// member joins (or leaves) the IP multicast group g on the UDP link's
// socket, counting joins so that the first takes the membership and the
// last drops it: the kernel, being the IP host, then reports it.
func (u *udpNode) member(g netip.Addr, join bool) error {
	g = g.Unmap()
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.groups[g]
	switch {
	case join && n == 0:
		if err := u.link.JoinGroup(g); err != nil {
			return err
		}
		if u.groups == nil {
			u.groups = map[netip.Addr]int{}
		}
		u.groups[g] = 1
	case join:
		u.groups[g] = n + 1
	case n == 0:
		return fmt.Errorf("leave %v: %w", g, unix.EADDRNOTAVAIL)
	case n == 1:
		delete(u.groups, g)
		return u.link.LeaveGroup(g)
	default:
		u.groups[g] = n - 1
	}
	return nil
}

// current returns the addresses the GIDs follow.
func (u *udpNode) current() []netip.Addr {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.addrs)
}

// update adds or removes one host address and reports whether the set
// changed.
func (u *udpNode) update(a netip.Addr, add bool) bool {
	a = a.Unmap()
	if a.IsLinkLocalUnicast() && a.Is6() || a.IsLoopback() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	i := slices.Index(u.addrs, a)
	switch {
	case add && i < 0:
		u.addrs = append(u.addrs, a)
	case !add && i >= 0:
		u.addrs = slices.Delete(u.addrs, i, i+1)
	default:
		return false
	}
	return true
}

// startUDP finishes New for a node on a UDP link l (the UDP link itself,
// or the capture around it): the device gets the link directly, with
// placeholder MACs, and its GIDs from the link's addresses.
func (n *Node) startUDP(cfg *Config, l link.Link, mac net.HardwareAddr) (*Node, error) {
	u := n.udp
	u.mac = mac
	bound := u.link.Addrs()
	for _, p := range cfg.Addrs {
		if len(bound) > 0 && !slices.Contains(bound, p.Addr().Unmap()) {
			return nil, fmt.Errorf("node: address %v is not one the UDP link binds (%v): %w", p.Addr(), bound, unix.EINVAL)
		}
	}
	if len(bound) > 0 {
		u.addrs = bound
	} else {
		stop, err := watchAddrs(u, n.rescan)
		if err != nil {
			return nil, fmt.Errorf("node: following the host's addresses: %w", err)
		}
		u.stop = stop
	}
	rc := rxe.Config{}
	if cfg.Rxe != nil {
		cfg.Rxe(&rc)
	}
	rc.Seed = cfg.Seed
	rc.Link = l
	if cfg.DeviceLink != nil {
		rc.Link = cfg.DeviceLink(l)
	}
	// Every packet goes to the placeholder MAC; AHs and modifies check
	// that the kernel has a route (rdma_addr_find_l2_eth_by_grh fails with
	// ENETUNREACH without one).
	rc.Neighbor = emu.ResolverFunc(func(context.Context, netip.Addr) ([6]byte, error) { return udp.PeerMAC, nil })
	rc.Device = emu.Config{Name: n.name, Clock: n.clk, Resolver: emu.ResolverFunc(n.resolveUDP), Recorder: rc.Device.Recorder,
		NetDev: emu.NetDev{Name: "udp", MAC: mac, MTU: l.MTU(), Addrs: u.current()}}
	n.mu.Lock()
	dev, err := rxe.New(rc)
	if err != nil {
		n.mu.Unlock()
		if u.stop != nil {
			u.stop()
		}
		return nil, fmt.Errorf("node: %w", err)
	}
	n.dev, n.created = dev, true
	n.mu.Unlock()
	n.rescan() // addresses that came while the device was made
	return n, nil
}

// rescan gives the device the current addresses.
func (n *Node) rescan() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.created || n.closed {
		return
	}
	n.dev.SetNetDevAddrs(n.udp.current())
}

// resolveUDP is Node.Resolve on a UDP link.
func (n *Node) resolveUDP(_ context.Context, ip netip.Addr) ([6]byte, error) {
	if err := routeTo(ip.Unmap()); err != nil {
		return [6]byte{}, fmt.Errorf("node %s: %w", n.name, err)
	}
	return udp.PeerMAC, nil
}
