package host

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Defaults of the ICMP error rate limits, the kernel's.
const (
	// DefaultICMPRateLimit is the per-destination interval between ICMP
	// errors (net.ipv4.icmp_ratelimit, net.ipv6.icmp.ratelimit: 1000 ms).
	DefaultICMPRateLimit = time.Second
	// DefaultICMPMsgsPerSec is the rate of the global ICMP error budget
	// (net.ipv4.icmp_msgs_per_sec).
	DefaultICMPMsgsPerSec = 1000
	// DefaultICMPMsgsBurst is the size of the global budget
	// (net.ipv4.icmp_msgs_burst).
	DefaultICMPMsgsBurst = 50
)

// rateBurstFactor is how many intervals of credit a destination may save
// up: the kernel's XRLIM_BURST_FACTOR, so a quiet destination gets 6
// errors at once, then one per interval.
const rateBurstFactor = 6

// maxRatePeers bounds the per-destination table; beyond it, entries whose
// bucket has refilled (indistinguishable from new ones) are forgotten, as
// the kernel's inetpeer garbage collection does.
const maxRatePeers = 4096

// Quote limits of ICMP errors: an IPv4 error is at most 576 bytes long
// (icmp_send: 576 - IP header - ICMP header of the offending datagram),
// an IPv6 error fits the minimum MTU of 1280 (icmp6_send).
const (
	maxQuote4 = 576 - 20 - 8
	maxQuote6 = 1280 - 40 - 8
)

// rateLimiter is the kernel's ICMP error rate limit: a global token
// bucket (icmp_global_allow: icmp_msgs_burst tokens refilled at
// icmp_msgs_per_sec) and a per-destination one (inet_peer_xrlim_allow:
// one error per icmp_ratelimit, bursts of rateBurstFactor).
type rateLimiter struct {
	mu       sync.Mutex
	interval time.Duration // per destination; <0 disables
	perSec   int           // global rate; <0 disables the global budget
	burst    int
	credit   float64
	stamp    time.Time
	peers    map[netip.Addr]*ratePeer
}

type ratePeer struct {
	tokens time.Duration
	last   time.Time
}

func (r *rateLimiter) init(interval time.Duration, perSec, burst int, now time.Time) {
	if interval == 0 {
		interval = DefaultICMPRateLimit
	}
	if perSec == 0 {
		perSec = DefaultICMPMsgsPerSec
	}
	if burst <= 0 {
		burst = DefaultICMPMsgsBurst
	}
	r.interval, r.perSec, r.burst = interval, perSec, burst
	r.credit, r.stamp = float64(burst), now
	r.peers = make(map[netip.Addr]*ratePeer)
}

// allow reports whether an ICMP error to dst may go out now and, if so,
// spends its tokens. shift scales the per-destination interval down, as
// icmpv6_xrlim_allow does for destinations on routes shorter than /128.
func (r *rateLimiter) allow(dst netip.Addr, shift int, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.perSec > 0 {
		r.credit = min(r.credit+now.Sub(r.stamp).Seconds()*float64(r.perSec), float64(r.burst))
		r.stamp = now
		if r.credit < 1 {
			return false
		}
	}
	if r.interval > 0 {
		tmo := r.interval >> shift
		p := r.peers[dst]
		if p == nil {
			if len(r.peers) >= maxRatePeers {
				for a, q := range r.peers {
					if now.Sub(q.last)+q.tokens >= rateBurstFactor*tmo {
						delete(r.peers, a)
					}
				}
				if len(r.peers) >= maxRatePeers {
					return false
				}
			}
			// A new peer starts with a full bucket (inet_getpeer sets
			// rate_last 60 s in the past).
			p = &ratePeer{tokens: rateBurstFactor * tmo, last: now}
			r.peers[dst] = p
		}
		tokens := min(p.tokens+now.Sub(p.last), rateBurstFactor*tmo)
		p.last = now
		if tokens < tmo {
			p.tokens = tokens
			return false
		}
		p.tokens = tokens - tmo
	}
	if r.perSec > 0 {
		r.credit--
	}
	return true
}

// l4ChecksumOK verifies a UDP or TCP checksum over seg with the IP
// pseudo-header (RFC 768, RFC 793, RFC 8200 §8.1). A zero UDP checksum
// over IPv4 means none was computed.
func l4ChecksumOK(src, dst netip.Addr, proto layers.IPProtocol, seg []byte) bool {
	if proto == layers.IPProtocolUDP && src.Is4() && len(seg) >= 8 && seg[6] == 0 && seg[7] == 0 {
		return true
	}
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	sum += uint32(proto) + uint32(len(seg))>>16 + uint32(len(seg))&0xffff
	add(seg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum == 0xffff
}

// ipPacket returns the IP packet of the frame being processed (its
// Ethernet padding cut off).
func (h *Host) ipPacket(frame []byte) []byte {
	n := 14
	if h.layerAt(1) == layers.LayerTypeIPv4 {
		n += len(h.ip4.Contents) + len(h.ip4.Payload)
	} else {
		n += len(h.ip6.Contents) + int(h.ip6.Length)
	}
	return frame[14:min(n, len(frame))]
}

// errorAllowed applies icmp_send's and icmp6_send's rules to the packet
// being processed: never about a packet that was not unicast to the Host
// (a broadcast or multicast MAC or IP destination), from an unspecified,
// multicast or broadcast source, and within the rate limit.
func (h *Host) errorAllowed(src, dst netip.Addr) bool {
	if h.eth.DstMAC[0]&1 != 0 || dst.IsMulticast() || src.IsMulticast() || src.IsUnspecified() ||
		src.Is4() && (src == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || src.IsLoopback()) {
		return false
	}
	shift := 0
	if src.Is6() {
		// icmpv6_xrlim_allow: the interval shrinks with the prefix length
		// of the route to the destination (here: the on-link prefix that
		// holds it, else the default route, /0).
		plen := 0
		h.addrMu.RLock()
		for _, p := range h.addrs {
			if p.Addr().Is6() && p.Masked().Contains(src) {
				plen = max(plen, p.Bits())
			}
		}
		h.addrMu.RUnlock()
		shift = (128 - plen) >> 5
	}
	if !h.limit.allow(src, shift, h.clk.Now()) {
		h.stats.rateLimited.Add(1)
		return false
	}
	return true
}

// sendUnreach4 answers the IPv4 packet being processed with ICMP
// destination unreachable (type 3) of code, from the address it was sent
// to, quoting as much of it as fits in 576 bytes (icmp_send).
func (h *Host) sendUnreach4(frame []byte, code uint8, src, dst netip.Addr) {
	if !h.errorAllowed(src, dst) {
		return
	}
	quote := h.ipPacket(frame)
	quote = quote[:min(len(quote), maxQuote4)]
	err := h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: slices.Clone(h.eth.SrcMAC), EthernetType: layers.EthernetTypeIPv4},
		// icmp_send: TOS keeps the offender's TOS bits and sets precedence
		// "internetwork control"; ICMP sockets do not set DF.
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, TOS: h.ip4.TOS&0x1e | 0xc0, Protocol: layers.IPProtocolICMPv4,
			SrcIP: dst.AsSlice(), DstIP: src.AsSlice()},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, code)},
		gopacket.Payload(slices.Clone(quote)))
	if err == nil {
		h.stats.unreach.Add(1)
	}
}

// sendError6 answers the IPv6 packet being processed with an ICMPv6 error
// of type and code whose 4-byte parameter is param, from the address it
// was sent to, quoting as much of it as fits in 1280 bytes (icmp6_send).
func (h *Host) sendError6(frame []byte, typ, code uint8, param uint32, src, dst netip.Addr) {
	if !h.errorAllowed(src, dst) {
		return
	}
	quote := h.ipPacket(frame)
	quote = quote[:min(len(quote), maxQuote6)]
	body := make([]byte, 4+len(quote))
	binary.BigEndian.PutUint32(body, param)
	copy(body[4:], quote)
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}
	ip := ipv6Header(dst, src, 64)
	icmp.SetNetworkLayerForChecksum(ip)
	err := h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: slices.Clone(h.eth.SrcMAC), EthernetType: layers.EthernetTypeIPv6},
		ip, icmp, gopacket.Payload(body))
	if err == nil {
		h.stats.unreach.Add(1)
	}
}

// sendReset answers the TCP segment being processed, to a port nobody
// listens on, with a RST as tcp_v4_send_reset and tcp_v6_send_reset do
// (RFC 793 "Reset Generation"): never for a RST; for a segment with ACK,
// a bare RST whose sequence number is the acknowledged one; otherwise a
// RST|ACK with sequence 0 acknowledging everything the segment occupied.
// Unicast destinations only; not rate limited.
func (h *Host) sendReset(src, dst netip.Addr) {
	t := &h.tcp
	if t.RST || h.eth.DstMAC[0]&1 != 0 || dst.IsMulticast() || src.IsMulticast() || src.IsUnspecified() {
		return
	}
	rst := &layers.TCP{SrcPort: t.DstPort, DstPort: t.SrcPort, RST: true}
	if t.ACK {
		rst.Seq = t.Ack
	} else {
		rst.ACK = true
		rst.Ack = t.Seq + uint32(len(t.Payload))
		if t.SYN {
			rst.Ack++
		}
		if t.FIN {
			rst.Ack++
		}
	}
	eth := &layers.Ethernet{SrcMAC: h.mac, DstMAC: slices.Clone(h.eth.SrcMAC)}
	var ip gopacket.NetworkLayer
	if src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP,
			SrcIP: dst.AsSlice(), DstIP: src.AsSlice()}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolTCP, HopLimit: 64, SrcIP: dst.AsSlice(), DstIP: src.AsSlice()}
	}
	rst.SetNetworkLayerForChecksum(ip)
	if err := h.serialize(eth, ip.(gopacket.SerializableLayer), rst); err == nil {
		h.stats.resets.Add(1)
	}
}

// knownProto4 and knownProto6 are the protocols a Linux host handles
// without extra modules (inet_protos, inet6_protos: the kernel's built-in
// ones). Softroce serves ICMP, UDP and TCP (by RST); the others (IGMP,
// UDP-Lite, IPv6 extension headers softroce does not parse) it drops
// silently rather than claim they are unknown. Anything else gets
// protocol unreachable, as ip_local_deliver_finish and ip6_input_finish
// answer when no handler exists.
func knownProto4(p layers.IPProtocol) bool {
	switch p {
	case layers.IPProtocolICMPv4, layers.IPProtocolIGMP, layers.IPProtocolTCP, layers.IPProtocolUDP, layers.IPProtocolUDPLite:
		return true
	}
	return false
}

func knownProto6(p layers.IPProtocol) bool {
	switch p {
	case layers.IPProtocolIPv6HopByHop, layers.IPProtocolTCP, layers.IPProtocolUDP, layers.IPProtocolIPv6Routing,
		layers.IPProtocolIPv6Fragment, layers.IPProtocolICMPv6, layers.IPProtocolNoNextHeader,
		layers.IPProtocolIPv6Destination, layers.IPProtocolUDPLite:
		return true
	}
	return false
}
