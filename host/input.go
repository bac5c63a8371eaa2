package host

import (
	"net"
	"net/netip"
	"slices"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/softroce/softroce/ib"
)

// Input processes one received frame: it answers ARP, neighbour
// solicitations and echo requests for the Host, learns neighbours, hands
// RoCEv2 frames to Config.RoCE and counts the rest. It never retains
// frame and never panics, whatever frame holds. Run calls it for every
// frame read; tests and fuzzers may call it directly.
func (h *Host) Input(frame []byte) {
	h.stats.rx.Add(1)
	h.inMu.Lock()
	defer h.inMu.Unlock()
	if len(frame) < 14 {
		h.stats.malformed.Add(1)
		return
	}
	// Filter on the destination MAC before decoding anything, as a NIC's
	// address filter does.
	if !h.acceptsMAC(net.HardwareAddr(frame[0:6])) {
		h.stats.notForUs.Add(1)
		return
	}
	h.parsed = h.parsed[:0]
	err := h.dec.DecodeLayers(frame, &h.parsed)
	if err != nil || len(h.parsed) < 2 {
		if err != nil {
			h.stats.malformed.Add(1)
		} else {
			h.stats.unhandled.Add(1) // e.g. a VLAN-tagged frame or another EtherType
		}
		return
	}
	switch h.parsed[1] {
	case layers.LayerTypeARP:
		h.inputARP()
	case layers.LayerTypeIPv4:
		h.inputIPv4(frame)
	case layers.LayerTypeIPv6:
		h.inputIPv6(frame)
	default:
		h.stats.unhandled.Add(1)
	}
}

func (h *Host) layerAt(i int) gopacket.LayerType {
	if i < len(h.parsed) {
		return h.parsed[i]
	}
	return gopacket.LayerTypeZero
}

// inputARP mirrors the kernel's arp_process: it replies to requests for
// the Host's addresses (learning the requester) and updates entries it
// already has, or is resolving, from any request or reply.
func (h *Host) inputARP() {
	a := &h.arp
	if a.AddrType != layers.LinkTypeEthernet || a.Protocol != layers.EthernetTypeIPv4 ||
		a.HwAddressSize != 6 || a.ProtAddressSize != 4 ||
		len(a.SourceHwAddress) != 6 || len(a.SourceProtAddress) != 4 || len(a.DstProtAddress) != 4 ||
		a.SourceHwAddress[0]&1 != 0 {
		h.stats.malformed.Add(1)
		return
	}
	sender := netip.AddrFrom4([4]byte(a.SourceProtAddress))
	target := netip.AddrFrom4([4]byte(a.DstProtAddress))
	senderMAC := slices.Clone(net.HardwareAddr(a.SourceHwAddress))
	forUs := h.HasAddr(target)
	if sender.IsUnspecified() || h.HasAddr(sender) {
		// An ARP probe (RFC 5227) or someone using our address: nothing
		// to learn. A probe for our address is still answered below.
		senderMAC = nil
	}
	if senderMAC != nil {
		h.learn(sender, senderMAC, forUs)
	}
	if a.Operation != layers.ARPRequest {
		if !forUs {
			h.stats.notForUs.Add(1)
		}
		return
	}
	if !forUs {
		h.stats.notForUs.Add(1)
		return
	}
	dst := net.HardwareAddr(a.SourceHwAddress)
	if err := h.sendARP(layers.ARPReply, slices.Clone(dst), target, slices.Clone(dst), sender); err == nil {
		h.stats.arpReplies.Add(1)
	}
}

func (h *Host) inputIPv4(frame []byte) {
	ip := &h.ip4
	dst, _ := netip.AddrFromSlice(ip.DstIP)
	src, _ := netip.AddrFromSlice(ip.SrcIP)
	if ip.Version != 4 || ip.IHL < 5 || !h.acceptsIP(dst) {
		h.stats.notForUs.Add(1)
		return
	}
	if !validIPv4Checksum(ip.Contents) {
		h.stats.malformed.Add(1)
		return
	}
	if ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0 {
		h.stats.unhandled.Add(1) // no reassembly
		return
	}
	switch h.layerAt(2) {
	case layers.LayerTypeUDP:
		h.inputUDP(frame, src, dst, ip.Payload)
	case layers.LayerTypeTCP:
		h.inputTCP(src, dst, ip.Payload)
	case layers.LayerTypeICMPv4:
		// icmp_echo: reply to unicast echo requests (broadcast and
		// multicast echo are ignored, icmp_echo_ignore_broadcasts=1).
		if h.icmp4.TypeCode.Type() != layers.ICMPv4TypeEchoRequest || dst.IsMulticast() {
			h.stats.unhandled.Add(1)
			return
		}
		if src.IsMulticast() || src.IsUnspecified() {
			h.stats.malformed.Add(1)
			return
		}
		err := h.serialize(
			&layers.Ethernet{SrcMAC: h.mac, DstMAC: slices.Clone(h.eth.SrcMAC), EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4,
				Flags: layers.IPv4DontFragment, SrcIP: dst.AsSlice(), DstIP: src.AsSlice()},
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoReply, 0),
				Id: h.icmp4.Id, Seq: h.icmp4.Seq},
			gopacket.Payload(slices.Clone(h.icmp4.Payload)))
		if err == nil {
			h.stats.echoReplies.Add(1)
		}
	default:
		if ip.Protocol == layers.IPProtocolIGMP {
			h.inputIGMP(ip.Payload)
			return
		}
		h.stats.unhandled.Add(1)
		if !knownProto4(ip.Protocol) {
			h.sendUnreach4(frame, layers.ICMPv4CodeProtocol, src, dst)
		}
	}
}

// validIPv4Checksum checks the IPv4 header checksum (RFC 1071), as
// ip_rcv_core drops headers whose checksum is wrong.
func validIPv4Checksum(hdr []byte) bool {
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		sum += uint32(hdr[i])<<8 | uint32(hdr[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum == 0xffff
}

func (h *Host) inputIPv6(frame []byte) {
	ip := &h.ip6
	dst, _ := netip.AddrFromSlice(ip.DstIP)
	src, _ := netip.AddrFromSlice(ip.SrcIP)
	if ip.Version != 6 || !h.acceptsIP(dst) {
		h.stats.notForUs.Add(1)
		return
	}
	switch h.layerAt(2) {
	case layers.LayerTypeUDP:
		h.inputUDP(frame, src, dst, ip.Payload)
	case layers.LayerTypeTCP:
		h.inputTCP(src, dst, ip.Payload)
	case layers.LayerTypeICMPv6:
		h.inputICMPv6(src, dst)
	default:
		h.stats.unhandled.Add(1)
		next, ptr := ip.NextHeader, uint32(6)
		if ip.HopByHop != nil {
			next, ptr = ip.HopByHop.NextHeader, 40
		}
		if !knownProto6(next) {
			// ip6_input_finish: parameter problem, unrecognized next
			// header, pointing at the offending next header field.
			h.sendError6(frame, uint8(layers.ICMPv6TypeParameterProblem), layers.ICMPv6CodeUnrecognizedNextHeader, ptr, src, dst)
		}
	}
}

// inputUDP hands RoCEv2 datagrams to Config.RoCE. A datagram to another
// port of one of the Host's unicast addresses, with a valid checksum, gets
// port unreachable, as __udp4_lib_rcv and __udp6_lib_rcv answer when no
// socket is bound; ipPayload is the IP packet's payload.
func (h *Host) inputUDP(frame []byte, src, dst netip.Addr, ipPayload []byte) {
	if h.udp.DstPort != ib.RoCEv2UDPPort {
		h.stats.unhandled.Add(1)
		n := int(h.udp.Length)
		if n < 8 || n > len(ipPayload) || !l4ChecksumOK(src, dst, layers.IPProtocolUDP, ipPayload[:n]) ||
			src.Is6() && h.udp.Checksum == 0 {
			return // udp_lib_checksum_complete, or a zero checksum over IPv6: dropped
		}
		if src.Is4() {
			h.sendUnreach4(frame, layers.ICMPv4CodePort, src, dst)
		} else {
			h.sendError6(frame, uint8(layers.ICMPv6TypeDestinationUnreachable), layers.ICMPv6CodePortUnreachable, 0, src, dst)
		}
		return
	}
	h.stats.roce.Add(1)
	if h.roce != nil {
		h.roce(frame)
	}
}

// inputTCP answers a TCP segment with a valid checksum with a reset:
// softroce listens on no TCP port.
func (h *Host) inputTCP(src, dst netip.Addr, ipPayload []byte) {
	h.stats.unhandled.Add(1)
	if !l4ChecksumOK(src, dst, layers.IPProtocolTCP, ipPayload) {
		return
	}
	h.sendReset(src, dst)
}

func (h *Host) inputICMPv6(src, dst netip.Addr) {
	if h.icmp6.TypeCode.Type() == icmpv6MLDQuery {
		h.inputMLDQuery(src)
		return
	}
	switch h.layerAt(3) {
	case layers.LayerTypeICMPv6Echo:
		if h.icmp6.TypeCode.Type() != layers.ICMPv6TypeEchoRequest {
			h.stats.unhandled.Add(1)
			return
		}
		if dst.IsMulticast() || src.IsMulticast() || src.IsUnspecified() {
			h.stats.unhandled.Add(1)
			return
		}
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoReply, 0)}
		ip := ipv6Header(dst, src, 64)
		icmp.SetNetworkLayerForChecksum(ip)
		err := h.serialize(
			&layers.Ethernet{SrcMAC: h.mac, DstMAC: slices.Clone(h.eth.SrcMAC), EthernetType: layers.EthernetTypeIPv6},
			ip, icmp,
			&layers.ICMPv6Echo{Identifier: h.echo6.Identifier, SeqNumber: h.echo6.SeqNumber},
			// gopacket v1.1.19's ICMPv6Echo does not record its payload:
			// the echo data follows the 4 identifier and sequence bytes.
			gopacket.Payload(slices.Clone(h.icmp6.Payload[4:])))
		if err == nil {
			h.stats.echoReplies.Add(1)
		}
	case layers.LayerTypeICMPv6NeighborSolicitation:
		h.inputNS(src, dst)
	case layers.LayerTypeICMPv6NeighborAdvertisement:
		h.inputNA(dst)
	default:
		h.stats.unhandled.Add(1)
	}
}

// linkAddrOption returns the link-layer address in an ND option of type
// t, or nil.
func linkAddrOption(opts layers.ICMPv6Options, t layers.ICMPv6Opt) net.HardwareAddr {
	for _, o := range opts {
		if o.Type == t && len(o.Data) >= 6 {
			return slices.Clone(net.HardwareAddr(o.Data[:6]))
		}
	}
	return nil
}

// inputNS mirrors ndisc_recv_ns: validate (RFC 4861 §7.1.1), learn the
// solicitor from its source link-layer address option, and advertise the
// target if it is ours — solicited and unicast to the solicitor, or to
// all nodes for a duplicate address detection probe (source ::).
func (h *Host) inputNS(src, dst netip.Addr) {
	ns := &h.ns
	target, ok := netip.AddrFromSlice(ns.TargetAddress)
	sll := linkAddrOption(ns.Options, layers.ICMPv6OptSourceAddress)
	if !ok || h.ip6.HopLimit != 255 || h.icmp6.TypeCode.Code() != 0 || target.IsMulticast() ||
		src.IsUnspecified() && (sll != nil || !isSolicitedNode(dst)) {
		h.stats.malformed.Add(1)
		return
	}
	// A tentative address answers nothing; another node's probe for it
	// means both want it (RFC 4862 §5.4.3).
	var nonce []byte
	for _, o := range ns.Options {
		if o.Type == ndOptNonce {
			nonce = o.Data
		}
	}
	if src.IsUnspecified() && h.dadConflict(target, true, nonce, h.eth.SrcMAC) {
		return
	}
	if !h.HasAddr(target) {
		h.stats.notForUs.Add(1)
		return
	}
	if src.IsUnspecified() {
		if err := h.sendNA(target, allNodes, MulticastMAC(allNodes), false); err == nil {
			h.stats.adverts.Add(1)
		}
		return
	}
	if sll == nil {
		sll = slices.Clone(h.eth.SrcMAC)
	} else {
		h.learn(src, sll, true)
	}
	if err := h.sendNA(target, src, sll, true); err == nil {
		h.stats.adverts.Add(1)
	}
}

func isSolicitedNode(a netip.Addr) bool {
	b := a.As16()
	return a.Is6() && b[0] == 0xff && b[1] == 0x02 && b[11] == 0x01 && b[12] == 0xff &&
		[9]byte(b[2:11]) == [9]byte{}
}

// inputNA mirrors ndisc_recv_na: validate, then update an entry the Host
// has or is resolving (unsolicited advertisements for unknown targets
// create nothing).
func (h *Host) inputNA(dst netip.Addr) {
	na := &h.na
	target, ok := netip.AddrFromSlice(na.TargetAddress)
	if !ok || h.ip6.HopLimit != 255 || h.icmp6.TypeCode.Code() != 0 || target.IsMulticast() ||
		dst.IsMulticast() && na.Solicited() {
		h.stats.malformed.Add(1)
		return
	}
	if h.dadConflict(target, false, nil, h.eth.SrcMAC) {
		return // RFC 4862 §5.4.4: our tentative address is in use
	}
	if h.HasAddr(target) {
		return // someone else claims our address; nothing to learn
	}
	mac := linkAddrOption(na.Options, layers.ICMPv6OptTargetAddress)
	if mac == nil {
		mac = slices.Clone(h.eth.SrcMAC)
	}
	if mac[0]&1 != 0 {
		h.stats.malformed.Add(1)
		return
	}
	h.learn(target, mac, false)
}
