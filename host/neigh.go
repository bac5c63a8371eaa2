package host

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/google/gopacket/layers"
)

// Neighbor is a snapshot of one resolved neighbour cache entry.
type Neighbor struct {
	// IP is the neighbour's address.
	IP netip.Addr
	// MAC is its link-layer address.
	MAC net.HardwareAddr
	// Static entries came from SetNeighbor and never expire.
	Static bool
}

// Neighbors returns the resolved, unexpired entries, sorted by address.
func (h *Host) Neighbors() []Neighbor {
	now := h.clk.Now()
	h.neighMu.Lock()
	defer h.neighMu.Unlock()
	var out []Neighbor
	for ip, n := range h.neigh {
		if n.mac != nil && (n.static || now.Before(n.expires)) {
			out = append(out, Neighbor{IP: ip, MAC: slices.Clone(n.mac), Static: n.static})
		}
	}
	slices.SortFunc(out, func(a, b Neighbor) int { return a.IP.Compare(b.IP) })
	return out
}

// SetNeighbor adds a permanent entry (as `ip neigh replace IP lladdr MAC
// nud permanent`), completing any resolution of ip in progress.
func (h *Host) SetNeighbor(ip netip.Addr, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("host: neighbour %v: MAC %q is not an Ethernet address: %w", ip, mac, syscall.EINVAL)
	}
	h.neighMu.Lock()
	defer h.neighMu.Unlock()
	h.resolvedLocked(ip.Unmap(), slices.Clone(mac), true)
	return nil
}

// learn records ip at mac. create says whether a new entry may be made
// (the packet was addressed to us, as neigh_event_ns); otherwise only an
// existing or pending entry is updated.
func (h *Host) learn(ip netip.Addr, mac net.HardwareAddr, create bool) {
	h.neighMu.Lock()
	defer h.neighMu.Unlock()
	n := h.neigh[ip]
	if n == nil && !create || n != nil && n.static {
		return
	}
	h.resolvedLocked(ip, mac, false)
}

// resolvedLocked stores a resolved entry and releases its waiters.
func (h *Host) resolvedLocked(ip netip.Addr, mac net.HardwareAddr, static bool) {
	n := h.neigh[ip]
	if n == nil {
		n = &neighbor{}
		h.neigh[ip] = n
	}
	if n.timer != nil {
		n.timer.Stop()
		n.timer = nil
	}
	n.mac, n.static, n.err = mac, static, nil
	n.expires = h.clk.Now().Add(h.reach)
	if n.done != nil {
		close(n.done)
		n.done = nil
	}
}

// Resolve returns the link-layer address of ip, as the kernel's neighbour
// layer (neigh_resolve_output) does before it sends to a peer. Multicast
// and broadcast addresses map directly, the Host's own addresses give its
// own MAC, and a cached entry younger than ReachableTime is used at once.
// Otherwise Resolve sends an ARP request (IPv4) or a neighbour
// solicitation to the solicited-node group (IPv6), repeats it every
// RetransTime, and returns once a reply arrives — or fails with an error
// wrapping EHOSTUNREACH after Solicitations unanswered tries, or with
// ctx's error. Concurrent calls for one address share one resolution.
// Resolve needs Run (or Input) to process the replies, so it must not be
// called from Config.RoCE.
func (h *Host) Resolve(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return nil, fmt.Errorf("host: resolve %v: %w", ip, syscall.EINVAL)
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return slices.Clone(broadcastMAC), nil
	case ip.IsMulticast():
		return MulticastMAC(ip), nil
	case h.HasAddr(ip):
		return h.MAC(), nil
	}
	src, ok := h.sourceFor(ip)
	if !ok {
		return nil, fmt.Errorf("host: resolve %v: no local address of its family: %w", ip, syscall.ENETUNREACH)
	}
	now := h.clk.Now()
	h.neighMu.Lock()
	n := h.neigh[ip]
	if n != nil && n.mac != nil && (n.static || now.Before(n.expires)) {
		mac := slices.Clone(n.mac)
		h.neighMu.Unlock()
		return mac, nil
	}
	start := false
	if n == nil || n.done == nil {
		n = &neighbor{done: make(chan struct{})}
		h.neigh[ip] = n
		start = true
	}
	done := n.done
	if start {
		n.sent = 1
		n.timer = h.clk.AfterFunc(h.retrans, func() { h.retransmit(ip, src, n) })
	}
	h.neighMu.Unlock()
	if start {
		h.solicit(ip, src)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("host: resolve %v: %w", ip, ctx.Err())
	}
	h.neighMu.Lock()
	defer h.neighMu.Unlock()
	if n.err != nil {
		return nil, n.err
	}
	return slices.Clone(n.mac), nil
}

// retransmit runs when a solicitation went unanswered for RetransTime:
// it solicits again or, after the last try, fails the resolution (the
// kernel's NUD_INCOMPLETE → NUD_FAILED).
func (h *Host) retransmit(ip, src netip.Addr, n *neighbor) {
	h.neighMu.Lock()
	if h.neigh[ip] != n || n.done == nil {
		h.neighMu.Unlock()
		return
	}
	if n.sent >= h.tries {
		n.err = fmt.Errorf("host: resolve %v: no reply to %d solicitations: %w", ip, n.sent, syscall.EHOSTUNREACH)
		n.timer = nil
		close(n.done)
		n.done = nil
		delete(h.neigh, ip)
		h.neighMu.Unlock()
		return
	}
	n.sent++
	n.timer = h.clk.AfterFunc(h.retrans, func() { h.retransmit(ip, src, n) })
	h.neighMu.Unlock()
	h.solicit(ip, src)
}

// solicit sends one ARP request or neighbour solicitation for ip from src.
func (h *Host) solicit(ip, src netip.Addr) {
	var err error
	if ip.Is4() {
		err = h.sendARP(layers.ARPRequest, broadcastMAC, src, net.HardwareAddr{0, 0, 0, 0, 0, 0}, ip)
	} else {
		group := solicitedNode(ip)
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
		hdr := ipv6Header(src, group, 255)
		icmp.SetNetworkLayerForChecksum(hdr)
		err = h.serialize(
			&layers.Ethernet{SrcMAC: h.mac, DstMAC: MulticastMAC(group), EthernetType: layers.EthernetTypeIPv6},
			hdr, icmp,
			&layers.ICMPv6NeighborSolicitation{TargetAddress: ip.AsSlice(),
				Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: h.mac}}})
	}
	if err == nil {
		h.stats.solicits.Add(1)
	}
}
