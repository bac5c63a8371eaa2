// Package host makes softroce an IP host of its own on an Ethernet link.
//
// An emulated RoCEv2 HCA sits on a segment next to real machines, and
// those machines find it the way they find any host: the kernel rxe peer
// resolves softroce's GID (an IP address) with ARP or IPv6 neighbour
// discovery, and people check it is there with ping and arping. So a Host
// has its own MAC and IP addresses — distinct from anything the kernel
// holds on its side of a TAP — and:
//
//   - answers ARP requests and IPv6 neighbour solicitations for its
//     addresses (as the kernel's arp_process and ndisc_recv_ns), and
//     announces an address when it is added (gratuitous ARP, unsolicited
//     neighbour advertisement, as the kernel after DAD);
//   - runs duplicate address detection on each new IPv6 address (RFC 4862
//     §5.4, as the kernel with accept_dad=1, dad_transmits=1, enhanced DAD
//     nonces): the address stays tentative — not a source, not answered
//     for, not reported to OnAddrChange, so no GID — until a probe from ::
//     to its solicited-node group, sent after a random delay below 1 s,
//     went unanswered for RetransTime; an advertisement for it or another
//     node's probe for it drops it and reports EADDRINUSE (Config.NoDAD
//     turns this off, like `ip addr add ... nodad`);
//   - speaks MLDv2 for the solicited-node group of each IPv6 address
//     (RFC 3810, as the kernel's mcast.c): a state-change report joins the
//     group when the address is added (before its DAD probe) and leaves it
//     when the last address using it goes; general and group-specific
//     queries (MLDv1 or MLDv2) get a current-state report after a random
//     delay below their maximum response delay, drawn from Config.Seed on
//     the injected clock. Reports go out once (no robustness
//     retransmissions) and always as MLDv2 (no MLDv1 compatibility mode);
//   - joins IP multicast groups on the link (JoinIPGroup, as the kernel's
//     ip_mc_inc_group and ipv6_dev_mc_inc): an IGMPv3 (or, configured,
//     IGMPv2) report for an IPv4 group, an MLDv2 report for an IPv6 one,
//     the matching leave when the last membership goes, and answers to
//     IGMP and MLD queries for the joined groups; JoinGroup alone only
//     opens the MAC filter, as a driver's dev_mc_add;
//   - answers ICMP and ICMPv6 echo requests (icmp_echo, icmpv6_echo_reply);
//   - answers a UDP datagram to a port other than 4791 with ICMP port
//     unreachable, an IP protocol it does not know with protocol
//     unreachable (IPv6: parameter problem, unrecognized next header) and
//     a TCP segment with a reset, as a Linux host with no socket bound
//     does (__udp4_lib_rcv, ip_local_deliver_finish, tcp_v4_send_reset);
//     the ICMP errors quote the offending packet as the kernel does (up
//     to 576 bytes in all for IPv4, 1280 for IPv6), never answer a
//     broadcast or multicast packet, and are rate limited per destination
//     and globally on the injected clock (icmp_ratelimit,
//     icmp_msgs_per_sec). IPv4 fragments are not reassembled: they are
//     dropped without an answer;
//   - resolves peers' MACs with a neighbour cache whose retransmissions and
//     expiry run on an injected clock (the kernel's neigh_timer_handler:
//     retrans_time 1 s, mcast_solicit 3, base_reachable_time 30 s), failing
//     with EHOSTUNREACH when nobody answers;
//   - learns neighbours from the ARP and ND messages it receives;
//   - ignores frames that are not for it: other unicast MACs, multicast
//     groups it has not joined, IP packets to addresses it does not hold;
//   - hands RoCEv2 frames (UDP destination port 4791 to one of its
//     addresses) to the emulator's receive function, and sends the frames
//     the emulator builds.
//
// Frames are decoded and built with gopacket's layers. The Host's address
// set is the source of the device's GID table: Config.OnAddrChange reports
// every change so the table can follow (IBV_EVENT_GID_CHANGE).
package host

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
)

// Defaults of the neighbour cache, the kernel's (net.ipv4.neigh.default.*).
const (
	// DefaultRetransTime is the time between solicitations (retrans_time_ms).
	DefaultRetransTime = time.Second
	// DefaultSolicitations is how many solicitations go out before a
	// resolution fails (mcast_solicit).
	DefaultSolicitations = 3
	// DefaultReachableTime is how long a learnt entry is used before it is
	// resolved again (base_reachable_time_ms).
	DefaultReachableTime = 30 * time.Second
)

// AddrChange is one change of a Host's address set.
type AddrChange struct {
	// Prefix is the address and its prefix length.
	Prefix netip.Prefix
	// Added is true for an added address, false for a removed one.
	Added bool
}

// Config configures New. Its zero value is not usable: MAC is required.
type Config struct {
	// MAC is the Host's Ethernet address; it must be a unicast address.
	MAC net.HardwareAddr
	// Addrs are the Host's initial addresses, IPv4 or IPv6 (an
	// IPv4-mapped IPv6 address counts as IPv4).
	Addrs []netip.Prefix
	// NoLinkLocal stops New from adding the IPv6 link-local address
	// derived from MAC (fe80::/64 with a modified EUI-64 interface
	// identifier, as the kernel's addrgenmode eui64). With it false, the
	// default, the link-local address comes first, as in rxe's GID table.
	NoLinkLocal bool
	// Clock drives neighbour retransmission and expiry; nil means
	// clock.Real.
	Clock clock.Clock
	// RetransTime is the interval between solicitations; zero means
	// DefaultRetransTime.
	RetransTime time.Duration
	// Solicitations is how many solicitations Resolve sends before it fails
	// with EHOSTUNREACH; zero means DefaultSolicitations.
	Solicitations int
	// ReachableTime is how long a resolved or learnt neighbour is used;
	// zero means DefaultReachableTime.
	ReachableTime time.Duration
	// ICMPRateLimit is the minimum interval between ICMP errors to one
	// destination, with bursts of 6 after a quiet spell
	// (net.ipv4.icmp_ratelimit; for IPv6, net.ipv6.icmp.ratelimit, which
	// the kernel divides by 2^((128-plen)/32) for a destination on a /plen
	// route). Zero means DefaultICMPRateLimit; negative means no
	// per-destination limit.
	ICMPRateLimit time.Duration
	// ICMPMsgsPerSec and ICMPMsgsBurst are the global ICMP error budget
	// (net.ipv4.icmp_msgs_per_sec and icmp_msgs_burst). Zero means
	// DefaultICMPMsgsPerSec and DefaultICMPMsgsBurst; a negative
	// ICMPMsgsPerSec means no global budget.
	ICMPMsgsPerSec, ICMPMsgsBurst int
	// NoDAD turns duplicate address detection off, as the kernel's nodad
	// flag (`ip addr add ... nodad`) or accept_dad=0: IPv6 addresses are
	// usable as soon as they are added. With it false, the default, a new
	// IPv6 address is tentative until DADTransmits probes went unanswered
	// (RFC 4862 §5.4, the kernel with accept_dad=1).
	NoDAD bool
	// DADTransmits is the number of DAD probes; zero means 1
	// (dad_transmits).
	DADTransmits int
	// Seed seeds the Host's randomness: DAD delays and nonces, MLD report
	// delays.
	Seed uint64
	// OnDADFailure, if set, is called when an IPv6 address turns out to
	// be a duplicate and is dropped; err wraps EADDRINUSE. It is called
	// outside the Host's locks.
	OnDADFailure func(p netip.Prefix, err error)
	// RoCE receives every RoCEv2 frame for the Host: IPv4 or IPv6 (no
	// fragments, no extension headers) to one of its addresses or to a
	// multicast group it joined, UDP destination port 4791. It is called
	// from Input; frame is valid only during the call. Nil drops them.
	RoCE func(frame []byte)
	// OnAddrChange, if set, is called after each address change, in
	// order, outside the Host's locks.
	OnAddrChange func(AddrChange)
	// IGMPVersion is the IGMP version of the reports JoinIPGroup and
	// query answers send: 3 (and 0, the default) as the kernel with
	// force_igmp_version=0 and no older querier heard, or 2.
	IGMPVersion int
}

// Stats counts what a Host did with the frames it received.
type Stats struct {
	// RxFrames counts frames given to Input.
	RxFrames uint64
	// NotForUs counts frames for another MAC, an unjoined multicast group
	// or an address the Host does not hold.
	NotForUs uint64
	// Malformed counts frames gopacket could not decode, and ARP and ND
	// messages that fail validation (e.g. ND with a hop limit below 255).
	Malformed uint64
	// Unhandled counts frames for the Host of a protocol it does not serve
	// (TCP, UDP to a port other than 4791, other ICMP types, other IP
	// protocols, fragments), whether or not they were answered with an
	// ICMP error or a TCP reset.
	Unhandled uint64
	// RoCE counts frames delivered to Config.RoCE.
	RoCE uint64
	// ARPReplies, NeighborAdverts and EchoReplies count answers sent.
	ARPReplies, NeighborAdverts, EchoReplies uint64
	// DestUnreachables counts ICMP errors sent: port unreachable, protocol
	// unreachable and (IPv6) unrecognized next header.
	DestUnreachables uint64
	// TCPResets counts TCP RST segments sent for closed ports.
	TCPResets uint64
	// ICMPRateLimited counts ICMP errors the rate limit suppressed.
	ICMPRateLimited uint64
	// DADProbes counts duplicate address detection probes sent;
	// DADFailures counts addresses found to be duplicates.
	DADProbes, DADFailures uint64
	// MLDReports counts MLDv2 reports sent; MLDQueries counts the
	// multicast listener queries answered (or already being answered).
	MLDReports, MLDQueries uint64
	// IGMPReports counts IGMP reports and leaves sent; IGMPQueries
	// counts the membership queries answered (or already being
	// answered).
	IGMPReports, IGMPQueries uint64
	// Solicitations counts ARP requests and neighbour solicitations sent
	// to resolve peers.
	Solicitations uint64
	// TxErrors counts frames the link refused.
	TxErrors uint64
}

// Host is softroce's IP host on one Link. It is safe for concurrent use.
type Host struct {
	l        link.Link
	mac      net.HardwareAddr
	clk      clock.Clock
	retrans  time.Duration
	tries    int
	reach    time.Duration
	roce     func([]byte)
	onChange func(AddrChange)
	limit    rateLimiter

	noDAD        bool
	dadTransmits int
	onDADFailure func(netip.Prefix, error)
	rndMu        sync.Mutex
	rnd          *rand.Rand

	addrMu sync.RWMutex
	addrs  []netip.Prefix
	groups []netip.Addr // joined multicast groups (the MAC filter)
	// ipGroups counts the JoinIPGroup memberships of each group.
	ipGroups    map[netip.Addr]int
	igmpVersion int
	// igmpPending holds the IGMP query responses waiting for their
	// delay, by group (0.0.0.0 for a general query).
	igmpPending map[netip.Addr]*mldResponse
	// tentative holds the IPv6 addresses under duplicate address
	// detection; dadFailed the last detection error of each address.
	tentative []*dadState
	dadFailed map[netip.Addr]error
	// mldPending holds the query responses waiting for their delay, by
	// group (:: for a general query).
	mldPending map[netip.Addr]*mldResponse

	neighMu sync.Mutex
	neigh   map[netip.Addr]*neighbor

	inMu   sync.Mutex // the decoder's layers are reused
	dec    *gopacket.DecodingLayerParser
	eth    layers.Ethernet
	arp    layers.ARP
	ip4    layers.IPv4
	ip6    layers.IPv6
	udp    layers.UDP
	tcp    layers.TCP
	icmp4  layers.ICMPv4
	icmp6  layers.ICMPv6
	echo6  layers.ICMPv6Echo
	ns     layers.ICMPv6NeighborSolicitation
	na     layers.ICMPv6NeighborAdvertisement
	pay    gopacket.Payload
	parsed []gopacket.LayerType

	stats struct {
		rx, notForUs, malformed, unhandled, roce   atomic.Uint64
		arpReplies, adverts, echoReplies, solicits atomic.Uint64
		txErrors                                   atomic.Uint64
		unreach, resets, rateLimited               atomic.Uint64
		dadProbes, dadFailures                     atomic.Uint64
		mldReports, mldQueries                     atomic.Uint64
		igmpReports, igmpQueries                   atomic.Uint64
	}
}

// neighbor is one neighbour cache entry: resolving (done open) or
// resolved (mac set, valid until expires) or failed (err set).
type neighbor struct {
	mac     net.HardwareAddr
	expires time.Time
	static  bool
	done    chan struct{} // closed when resolution ends; nil once resolved from learning
	err     error
	sent    int
	timer   clock.Timer
}

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodes     = netip.MustParseAddr("ff02::1")
)

// New returns a Host on l configured by cfg. It fails with EINVAL for a
// missing or multicast MAC and with the errors of AddAddr for a bad
// address. New neither reads from l nor announces the addresses: call
// Run (or feed frames to Input) and Announce.
func New(l link.Link, cfg Config) (*Host, error) {
	if len(cfg.MAC) != 6 || cfg.MAC[0]&1 != 0 {
		return nil, fmt.Errorf("host: MAC %q is not a unicast Ethernet address: %w", cfg.MAC, syscall.EINVAL)
	}
	h := &Host{
		l:        l,
		mac:      slices.Clone(cfg.MAC),
		clk:      cfg.Clock,
		retrans:  cfg.RetransTime,
		tries:    cfg.Solicitations,
		reach:    cfg.ReachableTime,
		roce:     cfg.RoCE,
		onChange: cfg.OnAddrChange,
		neigh:    make(map[netip.Addr]*neighbor),
		groups:   []netip.Addr{allNodes, allHosts},

		noDAD:        cfg.NoDAD,
		dadTransmits: cfg.DADTransmits,
		onDADFailure: cfg.OnDADFailure,
		rnd:          rand.New(rand.NewPCG(cfg.Seed, 0x686f7374)),
		dadFailed:    make(map[netip.Addr]error),
		mldPending:   make(map[netip.Addr]*mldResponse),
		ipGroups:     make(map[netip.Addr]int),
		igmpPending:  make(map[netip.Addr]*mldResponse),
		igmpVersion:  cfg.IGMPVersion,
	}
	if h.igmpVersion != 0 && h.igmpVersion != 2 && h.igmpVersion != 3 {
		return nil, fmt.Errorf("host: IGMP version %d, want 2 or 3: %w", cfg.IGMPVersion, syscall.EINVAL)
	}
	if h.dadTransmits <= 0 {
		h.dadTransmits = 1
	}
	if h.clk == nil {
		h.clk = clock.Real{}
	}
	if h.retrans <= 0 {
		h.retrans = DefaultRetransTime
	}
	if h.tries <= 0 {
		h.tries = DefaultSolicitations
	}
	if h.reach <= 0 {
		h.reach = DefaultReachableTime
	}
	h.limit.init(cfg.ICMPRateLimit, cfg.ICMPMsgsPerSec, cfg.ICMPMsgsBurst, h.clk.Now())
	h.dec = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet,
		&h.eth, &h.arp, &h.ip4, &h.ip6, &h.udp, &h.tcp, &h.icmp4, &h.icmp6, &h.echo6, &h.ns, &h.na, &h.pay)
	h.dec.IgnoreUnsupported = true
	if !cfg.NoLinkLocal {
		if _, err := h.addAddr(netip.PrefixFrom(LinkLocal(h.mac), 64), false); err != nil {
			return nil, err
		}
	}
	for _, p := range cfg.Addrs {
		if _, err := h.addAddr(p, false); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// LinkLocal returns the IPv6 link-local address of mac: fe80::/64 with the
// modified EUI-64 interface identifier of RFC 4291 appendix A (the
// universal/local bit inverted, ff:fe in the middle), as the kernel's
// addrconf_ifid_eui48.
func LinkLocal(mac net.HardwareAddr) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	a[8], a[9], a[10] = mac[0]^0x02, mac[1], mac[2]
	a[11], a[12] = 0xff, 0xfe
	a[13], a[14], a[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(a)
}

// RandomMAC returns a locally administered unicast MAC drawn from r, as
// the kernel's eth_random_addr.
func RandomMAC(r *rand.Rand) net.HardwareAddr {
	m := make(net.HardwareAddr, 6)
	for i := range m {
		m[i] = byte(r.UintN(256))
	}
	m[0] = m[0]&^0x01 | 0x02
	return m
}

// MAC returns the Host's Ethernet address.
func (h *Host) MAC() net.HardwareAddr { return slices.Clone(h.mac) }

// Link returns the link the Host is on.
func (h *Host) Link() link.Link { return h.l }

// Addrs returns the Host's addresses in the order they were added.
func (h *Host) Addrs() []netip.Prefix {
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	return slices.Clone(h.addrs)
}

// HasAddr reports whether a is one of the Host's addresses.
func (h *Host) HasAddr(a netip.Addr) bool {
	a = a.Unmap()
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	return h.hasAddrLocked(a)
}

func (h *Host) hasAddrLocked(a netip.Addr) bool {
	for _, p := range h.addrs {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// AddAddr adds an address, joins its IPv6 solicited-node group, reports
// the change to Config.OnAddrChange and announces the address (Announce).
// It fails with EINVAL for an invalid, unspecified, multicast or
// zone-scoped address and with EEXIST for one the Host already holds or
// is checking, as `ip addr add` does.
//
// Unless Config.NoDAD is set, an IPv6 address is first tentative
// (Tentative lists it): AddAddr starts duplicate address detection and
// returns; the address joins Addrs, reaches OnAddrChange and is announced
// once DADTransmits probes went unanswered for RetransTime each, or is
// dropped (OnDADFailure) when another node claims it. WaitDAD waits for
// the outcome; AddAddrWait does both.
func (h *Host) AddAddr(p netip.Prefix) error {
	st, err := h.addAddr(p, true)
	if err != nil {
		return err
	}
	if a := p.Addr().Unmap(); a.Is6() {
		g := solicitedNode(a)
		h.addrMu.RLock()
		first := h.groupUsersLocked(g) == 1
		h.addrMu.RUnlock()
		if first {
			h.mldJoined(g) // before the DAD probe, as the kernel
		}
	}
	if st != nil {
		h.startDAD(st)
		return nil
	}
	h.announce(p.Addr().Unmap())
	return nil
}

func (h *Host) addAddr(p netip.Prefix, notify bool) (*dadState, error) {
	a := p.Addr()
	bits := p.Bits()
	if a.Is4In6() {
		a = a.Unmap()
		if bits >= 96 {
			bits -= 96
		}
	}
	if !p.IsValid() || !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" || bits > a.BitLen() || bits < 0 {
		return nil, fmt.Errorf("host: add address %v: %w", p, syscall.EINVAL)
	}
	p = netip.PrefixFrom(a, bits)
	h.addrMu.Lock()
	if h.hasAddrLocked(a) || h.tentativeLocked(a) != nil {
		h.addrMu.Unlock()
		return nil, fmt.Errorf("host: add address %v: %w", p, syscall.EEXIST)
	}
	delete(h.dadFailed, a)
	if a.Is6() {
		h.groups = append(h.groups, solicitedNode(a))
		if !h.noDAD {
			st := &dadState{p: p, done: make(chan struct{})}
			h.tentative = append(h.tentative, st)
			h.addrMu.Unlock()
			return st, nil
		}
	}
	h.addrs = append(h.addrs, p)
	h.addrMu.Unlock()
	if notify && h.onChange != nil {
		h.onChange(AddrChange{Prefix: p, Added: true})
	}
	return nil, nil
}

// RemoveAddr removes an address and reports the change to
// Config.OnAddrChange. It fails with EADDRNOTAVAIL if the Host does not
// hold a. Removing a tentative address ends its detection (WaitDAD then
// fails with EADDRNOTAVAIL) and reports nothing.
func (h *Host) RemoveAddr(a netip.Addr) error {
	a = a.Unmap()
	h.addrMu.Lock()
	if st := h.tentativeLocked(a); st != nil {
		h.failDADLocked(st, fmt.Errorf("host: DAD of %v: address removed: %w", st.p, syscall.EADDRNOTAVAIL), false)
		h.addrMu.Unlock()
		h.mldLeft(solicitedNode(a))
		return nil
	}
	i := slices.IndexFunc(h.addrs, func(p netip.Prefix) bool { return p.Addr() == a })
	if i < 0 {
		h.addrMu.Unlock()
		return fmt.Errorf("host: remove address %v: %w", a, syscall.EADDRNOTAVAIL)
	}
	p := h.addrs[i]
	h.addrs = slices.Delete(h.addrs, i, i+1)
	if a.Is6() {
		if j := slices.Index(h.groups, solicitedNode(a)); j >= 0 {
			h.groups = slices.Delete(h.groups, j, j+1)
		}
	}
	h.addrMu.Unlock()
	if a.Is6() {
		h.mldLeft(solicitedNode(a))
	}
	if h.onChange != nil {
		h.onChange(AddrChange{Prefix: p, Added: false})
	}
	return nil
}

// JoinGroup makes the Host accept frames for the IPv4 or IPv6 multicast
// group g (its multicast MAC), as RoCE multicast attach needs. Joining
// twice is allowed and needs two LeaveGroup calls.
func (h *Host) JoinGroup(g netip.Addr) error {
	g = g.Unmap()
	if !g.IsMulticast() {
		return fmt.Errorf("host: join %v: not a multicast address: %w", g, syscall.EINVAL)
	}
	h.addrMu.Lock()
	h.groups = append(h.groups, g)
	h.addrMu.Unlock()
	return nil
}

// LeaveGroup undoes one JoinGroup; it fails with EADDRNOTAVAIL if g was
// not joined.
func (h *Host) LeaveGroup(g netip.Addr) error {
	g = g.Unmap()
	h.addrMu.Lock()
	defer h.addrMu.Unlock()
	i := slices.Index(h.groups, g)
	if i < 0 || (g == allNodes || g == allHosts) && slices.Index(h.groups[i+1:], g) < 0 {
		return fmt.Errorf("host: leave %v: %w", g, syscall.EADDRNOTAVAIL)
	}
	h.groups = slices.Delete(h.groups, i, i+1)
	return nil
}

// solicitedNode returns the solicited-node multicast group of a
// (ff02::1:ffXX:XXXX, RFC 4291 §2.7.1).
func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// MulticastMAC returns the Ethernet group address of an IP multicast
// group: 01:00:5e plus the low 23 bits for IPv4 (RFC 1112 §6.4), 33:33
// plus the low 32 bits for IPv6 (RFC 2464 §7), as the kernel's
// ip_eth_mc_map and ipv6_eth_mc_map. It returns nil for a unicast address.
func MulticastMAC(g netip.Addr) net.HardwareAddr {
	g = g.Unmap()
	switch {
	case !g.IsMulticast():
		return nil
	case g.Is4():
		b := g.As4()
		return net.HardwareAddr{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
	default:
		b := g.As16()
		return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
	}
}

// acceptsMAC reports whether a frame to dst is for the Host.
func (h *Host) acceptsMAC(dst net.HardwareAddr) bool {
	if slices.Equal(dst, h.mac) || slices.Equal(dst, broadcastMAC) {
		return true
	}
	if len(dst) != 6 || dst[0]&1 == 0 {
		return false
	}
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	for _, g := range h.groups {
		if slices.Equal(MulticastMAC(g), dst) {
			return true
		}
	}
	return false
}

// acceptsIP reports whether an IP packet to dst is for the Host: one of
// its addresses or a joined group.
func (h *Host) acceptsIP(dst netip.Addr) bool {
	dst = dst.Unmap()
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	if dst.IsMulticast() {
		return slices.Contains(h.groups, dst)
	}
	return h.hasAddrLocked(dst)
}

// sourceFor picks the Host's address to send from to reach dst: one whose
// prefix holds dst, else the first of dst's family (for IPv6 the
// link-local address if it has one).
func (h *Host) sourceFor(dst netip.Addr) (netip.Addr, bool) {
	dst = dst.Unmap()
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	var first netip.Addr
	for _, p := range h.addrs {
		if p.Addr().Is4() != dst.Is4() {
			continue
		}
		if p.Masked().Contains(dst) {
			return p.Addr(), true
		}
		if !first.IsValid() || dst.Is6() && p.Addr().IsLinkLocalUnicast() && !first.IsLinkLocalUnicast() {
			first = p.Addr()
		}
	}
	return first, first.IsValid()
}

// Run reads frames from the link and passes each to Input until the link
// is closed or fails. It returns nil when the link was closed (its error
// wraps net.ErrClosed) and the link's error otherwise.
func (h *Host) Run() error {
	n := max(h.l.BatchSize(), 1)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, link.MaxFrameSize(h.l.MTU()))
	}
	sizes := make([]int, n)
	for {
		k, err := h.l.ReadPackets(bufs, sizes)
		for i := range k {
			h.Input(bufs[i][:sizes[i]])
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
	}
}

// Close closes the link (ending Run) and fails pending resolutions with
// an error wrapping net.ErrClosed.
func (h *Host) Close() error {
	h.neighMu.Lock()
	for ip, n := range h.neigh {
		if n.done != nil && n.err == nil && n.mac == nil {
			if n.timer != nil {
				n.timer.Stop()
			}
			n.err = fmt.Errorf("host: resolve %v: %w", ip, net.ErrClosed)
			close(n.done)
			delete(h.neigh, ip)
		}
	}
	h.neighMu.Unlock()
	h.addrMu.Lock()
	for len(h.tentative) > 0 {
		st := h.tentative[0]
		h.failDADLocked(st, fmt.Errorf("host: DAD of %v: %w", st.p, net.ErrClosed), false)
	}
	for g, pend := range h.mldPending {
		pend.timer.Stop()
		delete(h.mldPending, g)
	}
	for g, pend := range h.igmpPending {
		pend.timer.Stop()
		delete(h.igmpPending, g)
	}
	h.addrMu.Unlock()
	return h.l.Close()
}

// Send writes one frame to the link.
func (h *Host) Send(frame []byte) error {
	n, err := h.l.WritePackets([][]byte{frame})
	if err == nil && n != 1 {
		err = fmt.Errorf("host: link wrote %d of 1 frames", n)
	}
	if err != nil {
		h.stats.txErrors.Add(1)
	}
	return err
}

// Stats returns the counters.
func (h *Host) Stats() Stats {
	s := &h.stats
	return Stats{
		RxFrames: s.rx.Load(), NotForUs: s.notForUs.Load(), Malformed: s.malformed.Load(),
		Unhandled: s.unhandled.Load(), RoCE: s.roce.Load(),
		ARPReplies: s.arpReplies.Load(), NeighborAdverts: s.adverts.Load(), EchoReplies: s.echoReplies.Load(),
		Solicitations: s.solicits.Load(), TxErrors: s.txErrors.Load(),
		DestUnreachables: s.unreach.Load(), TCPResets: s.resets.Load(), ICMPRateLimited: s.rateLimited.Load(),
		DADProbes: s.dadProbes.Load(), DADFailures: s.dadFailures.Load(),
		MLDReports: s.mldReports.Load(), MLDQueries: s.mldQueries.Load(),
		IGMPReports: s.igmpReports.Load(), IGMPQueries: s.igmpQueries.Load(),
	}
}

// serialize builds a frame from layers and sends it.
func (h *Host) serialize(ls ...gopacket.SerializableLayer) error {
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return fmt.Errorf("host: building frame: %w", err)
	}
	return h.Send(buf.Bytes())
}

// ipv6Header returns an IPv6 header for an ICMPv6 message; ND messages
// carry hop limit 255 (RFC 4861 §7.1).
func ipv6Header(src, dst netip.Addr, hopLimit uint8) *layers.IPv6 {
	return &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: hopLimit,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
}

// Announce sends a gratuitous ARP request for each IPv4 address and an
// unsolicited neighbour advertisement (override set, to all nodes) for
// each IPv6 address, so neighbours that already know the address update
// their caches (RFC 5227 §3, RFC 4861 §7.2.6). It starts duplicate
// address detection of the tentative addresses New was given (an address
// is announced when its detection succeeds), after an MLDv2 report
// joining the solicited-node groups of its IPv6 addresses.
func (h *Host) Announce() {
	for _, p := range h.Addrs() {
		h.announce(p.Addr())
	}
	h.addrMu.RLock()
	ts := slices.Clone(h.tentative)
	gs := h.reportedLocked()
	h.addrMu.RUnlock()
	h.sendMLDReport(mldChangeToExclude, gs...)
	for _, st := range ts {
		h.startDAD(st)
	}
}

func (h *Host) announce(a netip.Addr) {
	if a.Is4() {
		h.sendARP(layers.ARPRequest, broadcastMAC, a, net.HardwareAddr{0, 0, 0, 0, 0, 0}, a)
		return
	}
	h.sendNA(a, allNodes, MulticastMAC(allNodes), false)
}

func (h *Host) sendARP(op uint16, dstMAC net.HardwareAddr, src netip.Addr, targetMAC net.HardwareAddr, target netip.Addr) error {
	return h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: dstMAC, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
			SourceHwAddress: h.mac, SourceProtAddress: src.AsSlice(),
			DstHwAddress: targetMAC, DstProtAddress: target.AsSlice()})
}

// sendNA advertises target (one of the Host's addresses) to dst.
func (h *Host) sendNA(target, dst netip.Addr, dstMAC net.HardwareAddr, solicited bool) error {
	flags := uint8(0x20) // override
	if solicited {
		flags |= 0x40
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	ip := ipv6Header(target, dst, 255)
	icmp.SetNetworkLayerForChecksum(ip)
	return h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv6},
		ip, icmp,
		&layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: target.AsSlice(),
			Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: h.mac}}})
}
