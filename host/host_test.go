package host

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
)

var (
	hostMAC  = net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x02}
	peerMAC  = net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x01}
	otherMAC = net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x03}
	hostIP4  = netip.MustParseAddr("10.77.0.2")
	peerIP4  = netip.MustParseAddr("10.77.0.1")
	hostIP6  = netip.MustParseAddr("fd77::2")
	peerIP6  = netip.MustParseAddr("fd77::1")
	peerLL   = LinkLocal(peerMAC)
	epoch    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// rig is a Host on one end of a Pipe; the test plays the peer on the
// other end.
type rig struct {
	h       *Host
	hostEnd *link.PipeEnd
	peer    *link.PipeEnd
	clk     *clock.Manual
	mu      sync.Mutex
	roce    [][]byte
	changes []AddrChange
	read    uint64 // frames recv returned
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	r := &rig{clk: clock.NewManual(epoch)}
	r.hostEnd, r.peer = link.Pipe()
	cfg := Config{
		MAC:   hostMAC,
		Addrs: []netip.Prefix{netip.PrefixFrom(hostIP4, 24), netip.PrefixFrom(hostIP6, 64)},
		Clock: r.clk,
		NoDAD: true, // DAD has its own tests
		RoCE: func(f []byte) {
			r.mu.Lock()
			r.roce = append(r.roce, bytes.Clone(f))
			r.mu.Unlock()
		},
		OnAddrChange: func(c AddrChange) { r.changes = append(r.changes, c) },
	}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(r.hostEnd, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	t.Cleanup(func() { h.Close(); r.peer.Close() })
	return r
}

// sent returns how many frames the Host has written.
func (r *rig) sent() uint64 { return r.hostEnd.Stats().TxFrames }

// recv reads the next frame the Host sent and decodes it.
func (r *rig) recv(t *testing.T) gopacket.Packet {
	t.Helper()
	bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
	if _, err := r.peer.ReadPackets(bufs, sizes); err != nil {
		t.Fatal(err)
	}
	r.read++
	p := gopacket.NewPacket(bufs[0][:sizes[0]], layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("the Host sent a frame gopacket cannot decode: %v\n%s", el.Error(), p.Dump())
	}
	return p
}

// build serializes layers into a frame, fixing lengths and checksums.
func build(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	for i, l := range ls {
		if c, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok && i > 0 {
			c.SetNetworkLayerForChecksum(ls[i-1].(gopacket.NetworkLayer))
		}
		if c, ok := l.(*layers.ICMPv6); ok && i > 0 {
			c.SetNetworkLayerForChecksum(ls[i-1].(gopacket.NetworkLayer))
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func arpFrame(t testing.TB, op uint16, dstMAC, srcMAC net.HardwareAddr, sender, target netip.Addr, targetMAC net.HardwareAddr) []byte {
	return build(t,
		&layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: srcMAC, SourceProtAddress: sender.AsSlice(),
			DstHwAddress: targetMAC, DstProtAddress: target.AsSlice()})
}

func nsFrame(t testing.TB, src, dst, target netip.Addr, dstMAC net.HardwareAddr, hopLimit uint8, sll bool) []byte {
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
	if sll {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: peerMAC}}
	}
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: hopLimit, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)},
		ns)
}

func naFrame(t testing.TB, src, dst, target netip.Addr, dstMAC net.HardwareAddr, flags uint8) []byte {
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)},
		&layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: target.AsSlice(),
			Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: peerMAC}}})
}

func echo4Frame(t testing.TB, dstMAC net.HardwareAddr, dst netip.Addr, payload []byte) []byte {
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: peerIP4.AsSlice(), DstIP: dst.AsSlice()},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 0x1234, Seq: 7},
		gopacket.Payload(payload))
}

func echo6Frame(t testing.TB, dstMAC net.HardwareAddr, dst netip.Addr, payload []byte) []byte {
	return build(t,
		&layers.Ethernet{SrcMAC: peerMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 64, SrcIP: peerIP6.AsSlice(), DstIP: dst.AsSlice()},
		&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)},
		&layers.ICMPv6Echo{Identifier: 0x4321, SeqNumber: 9},
		gopacket.Payload(payload))
}

func udpFrame(t testing.TB, dstMAC net.HardwareAddr, src, dst netip.Addr, dport uint16, payload []byte) []byte {
	udp := &layers.UDP{SrcPort: 0xc001, DstPort: layers.UDPPort(dport)}
	eth := &layers.Ethernet{SrcMAC: peerMAC, DstMAC: dstMAC}
	if dst.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		return build(t, eth, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}, udp, gopacket.Payload(payload))
	}
	eth.EthernetType = layers.EthernetTypeIPv6
	return build(t, eth, &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}, udp, gopacket.Payload(payload))
}

// checksum16 is the RFC 1071 sum over b, used to verify what the Host sent.
func checksum16(b []byte, initial uint32) uint16 {
	sum := initial
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// checkICMPv6Checksum fails t if the packet's ICMPv6 checksum is wrong.
func checkICMPv6Checksum(t *testing.T, p gopacket.Packet) {
	t.Helper()
	ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	var pseudo []byte
	pseudo = append(pseudo, ip.SrcIP...)
	pseudo = append(pseudo, ip.DstIP...)
	pseudo = append(pseudo, 0, 0, byte(len(ip.Payload)>>8), byte(len(ip.Payload)), 0, 0, 0, 58)
	if s := checksum16(ip.Payload, uint32(checksum16(pseudo, 0))); s != 0xffff {
		t.Errorf("ICMPv6 checksum does not verify (sum %#x)", s)
	}
}

func TestARPReply(t *testing.T) {
	r := newRig(t, nil)
	r.h.Input(arpFrame(t, layers.ARPRequest, broadcastMAC, peerMAC, peerIP4, hostIP4, net.HardwareAddr{0, 0, 0, 0, 0, 0}))
	p := r.recv(t)
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if arp == nil {
		t.Fatalf("reply is not ARP:\n%s", p.Dump())
	}
	if !bytes.Equal(eth.DstMAC, peerMAC) || !bytes.Equal(eth.SrcMAC, hostMAC) || arp.Operation != layers.ARPReply ||
		!bytes.Equal(arp.SourceHwAddress, hostMAC) || !bytes.Equal(arp.SourceProtAddress, hostIP4.AsSlice()) ||
		!bytes.Equal(arp.DstHwAddress, peerMAC) || !bytes.Equal(arp.DstProtAddress, peerIP4.AsSlice()) {
		t.Errorf("ARP reply wrong:\n%s", p.Dump())
	}
	if len(p.Data()) < 60 {
		t.Errorf("reply is %d bytes, want padded to the 60-byte Ethernet minimum", len(p.Data()))
	}
	// The requester was learnt (arp_process creates an entry for a
	// request to us).
	if n := r.h.Neighbors(); len(n) != 1 || n[0].IP != peerIP4 || !bytes.Equal(n[0].MAC, peerMAC) {
		t.Errorf("Neighbors() = %v, want the requester", n)
	}
	if s := r.h.Stats(); s.ARPReplies != 1 {
		t.Errorf("ARPReplies = %d, want 1", s.ARPReplies)
	}
}

func TestNeighborAdvertisement(t *testing.T) {
	for _, tt := range []struct {
		name      string
		src, dst  netip.Addr
		dstMAC    net.HardwareAddr
		target    netip.Addr
		hop       uint8
		sll       bool
		wantTo    netip.Addr // zero: no reply
		wantMAC   net.HardwareAddr
		solicited bool
	}{
		{"solicited-node multicast", peerIP6, solicitedNode(hostIP6), MulticastMAC(solicitedNode(hostIP6)), hostIP6, 255, true, peerIP6, peerMAC, true},
		{"unicast", peerLL, LinkLocal(hostMAC), hostMAC, LinkLocal(hostMAC), 255, true, peerLL, peerMAC, true},
		{"no source link-layer option: reply to frame source", peerIP6, hostIP6, hostMAC, hostIP6, 255, false, peerIP6, peerMAC, true},
		{"duplicate address detection probe", netip.IPv6Unspecified(), solicitedNode(hostIP6), MulticastMAC(solicitedNode(hostIP6)), hostIP6, 255, false, allNodes, MulticastMAC(allNodes), false},
		{"hop limit below 255 is invalid", peerIP6, solicitedNode(hostIP6), MulticastMAC(solicitedNode(hostIP6)), hostIP6, 254, true, netip.Addr{}, nil, false},
		{"target not ours", peerIP6, solicitedNode(peerIP6), MulticastMAC(solicitedNode(peerIP6)), netip.MustParseAddr("fd77::9"), 255, true, netip.Addr{}, nil, false},
		{"unjoined solicited-node group", peerIP6, solicitedNode(peerIP6), MulticastMAC(solicitedNode(peerIP6)), hostIP6, 255, true, netip.Addr{}, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.h.Input(nsFrame(t, tt.src, tt.dst, tt.target, tt.dstMAC, tt.hop, tt.sll))
			if !tt.wantTo.IsValid() {
				if r.sent() != 0 {
					t.Fatalf("the Host answered: %s", r.recv(t).Dump())
				}
				return
			}
			p := r.recv(t)
			eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
			if ip == nil || na == nil {
				t.Fatalf("reply is not an NA:\n%s", p.Dump())
			}
			if !bytes.Equal(eth.DstMAC, tt.wantMAC) || !bytes.Equal(ip.DstIP, tt.wantTo.AsSlice()) ||
				!bytes.Equal(ip.SrcIP, tt.target.AsSlice()) || ip.HopLimit != 255 ||
				!bytes.Equal(na.TargetAddress, tt.target.AsSlice()) || na.Solicited() != tt.solicited || !na.Override() || na.Router() ||
				!bytes.Equal(linkAddrOption(na.Options, layers.ICMPv6OptTargetAddress), hostMAC) {
				t.Errorf("NA wrong:\n%s", p.Dump())
			}
			checkICMPv6Checksum(t, p)
		})
	}
}

func TestEchoReply(t *testing.T) {
	payload := []byte("softroce echo payload 0123456789")
	for _, tt := range []struct {
		name  string
		frame func(testing.TB) []byte
		to    netip.Addr
	}{
		{"ICMPv4", func(t testing.TB) []byte { return echo4Frame(t, hostMAC, hostIP4, payload) }, peerIP4},
		{"ICMPv6", func(t testing.TB) []byte { return echo6Frame(t, hostMAC, hostIP6, payload) }, peerIP6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.h.Input(tt.frame(t))
			p := r.recv(t)
			eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if !bytes.Equal(eth.DstMAC, peerMAC) || !bytes.Equal(eth.SrcMAC, hostMAC) {
				t.Errorf("reply MACs %v -> %v", eth.SrcMAC, eth.DstMAC)
			}
			if net := p.NetworkLayer(); net == nil || net.NetworkFlow().Dst().String() != tt.to.String() {
				t.Errorf("reply not to %v:\n%s", tt.to, p.Dump())
			}
			switch tt.name {
			case "ICMPv4":
				ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				icmp, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if icmp == nil || icmp.TypeCode.Type() != layers.ICMPv4TypeEchoReply || icmp.Id != 0x1234 || icmp.Seq != 7 || !bytes.Equal(icmp.Payload, payload) {
					t.Errorf("echo reply wrong:\n%s", p.Dump())
				}
				if !validIPv4Checksum(ip.Contents) || checksum16(ip.Payload, 0) != 0xffff {
					t.Error("IPv4 or ICMP checksum does not verify")
				}
			case "ICMPv6":
				echo, _ := p.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo)
				icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				// gopacket's ICMPv6Echo keeps no payload; it follows id and seq.
				if echo == nil || icmp.TypeCode.Type() != layers.ICMPv6TypeEchoReply || echo.Identifier != 0x4321 || echo.SeqNumber != 9 || !bytes.Equal(icmp.Payload[4:], payload) {
					t.Errorf("echo reply wrong:\n%s", p.Dump())
				}
				checkICMPv6Checksum(t, p)
			}
		})
	}
}

// TestIgnored feeds frames that are not for the Host: none gets an answer
// or reaches the RoCE handler.
func TestIgnored(t *testing.T) {
	group := netip.MustParseAddr("ff0e::77")
	bcast4 := netip.MustParseAddr("10.77.0.255")
	for _, tt := range []struct {
		name  string
		frame func(testing.TB) []byte
	}{
		{"ARP request to another MAC", func(t testing.TB) []byte {
			return arpFrame(t, layers.ARPRequest, otherMAC, peerMAC, peerIP4, hostIP4, net.HardwareAddr{0, 0, 0, 0, 0, 0})
		}},
		{"ARP request for another IP", func(t testing.TB) []byte {
			return arpFrame(t, layers.ARPRequest, broadcastMAC, peerMAC, peerIP4, netip.MustParseAddr("10.77.0.9"), net.HardwareAddr{0, 0, 0, 0, 0, 0})
		}},
		{"echo to another MAC", func(t testing.TB) []byte { return echo4Frame(t, otherMAC, hostIP4, nil) }},
		{"echo to another IP", func(t testing.TB) []byte { return echo4Frame(t, hostMAC, netip.MustParseAddr("10.77.0.9"), nil) }},
		{"echo to broadcast", func(t testing.TB) []byte { return echo4Frame(t, broadcastMAC, bcast4, nil) }},
		{"echo6 to another MAC", func(t testing.TB) []byte { return echo6Frame(t, otherMAC, hostIP6, nil) }},
		{"echo6 to an unjoined group", func(t testing.TB) []byte { return echo6Frame(t, MulticastMAC(group), group, nil) }},
		{"RoCE to another MAC", func(t testing.TB) []byte { return udpFrame(t, otherMAC, peerIP4, hostIP4, 4791, make([]byte, 32)) }},
		{"RoCE to another IP", func(t testing.TB) []byte {
			return udpFrame(t, hostMAC, peerIP4, netip.MustParseAddr("10.77.0.9"), 4791, make([]byte, 32))
		}},
		{"RoCE6 to an unjoined group", func(t testing.TB) []byte {
			return udpFrame(t, MulticastMAC(group), peerIP6, group, 4791, make([]byte, 32))
		}},
		{"runt", func(testing.TB) []byte { return hostMAC }},
		{"VLAN-tagged", func(t testing.TB) []byte {
			f := udpFrame(t, hostMAC, peerIP4, hostIP4, 4791, make([]byte, 32))
			return slices.Concat(f[:12], []byte{0x81, 0, 0, 5}, f[12:])
		}},
		{"bad IPv4 header checksum", func(t testing.TB) []byte {
			f := udpFrame(t, hostMAC, peerIP4, hostIP4, 4791, make([]byte, 32))
			f[14+10] ^= 0xff
			return f
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.h.Input(tt.frame(t))
			if r.sent() != 0 {
				t.Errorf("the Host answered: %s", r.recv(t).Dump())
			}
			if len(r.roce) != 0 {
				t.Error("the frame reached the RoCE handler")
			}
			if s := r.h.Stats(); s.RxFrames != 1 || s.NotForUs+s.Malformed+s.Unhandled != 1 {
				t.Errorf("Stats() = %+v; want the frame counted once as not for us, malformed or unhandled", s)
			}
		})
	}
}

func TestRoCEDelivered(t *testing.T) {
	group := netip.MustParseAddr("ff0e::4791")
	for _, tt := range []struct {
		name     string
		dstMAC   net.HardwareAddr
		src, dst netip.Addr
	}{
		{"IPv4", hostMAC, peerIP4, hostIP4},
		{"IPv6", hostMAC, peerIP6, hostIP6},
		{"IPv6 link-local", hostMAC, peerLL, LinkLocal(hostMAC)},
		{"joined IPv6 group", MulticastMAC(group), peerIP6, group},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			if err := r.h.JoinGroup(group); err != nil {
				t.Fatal(err)
			}
			f := udpFrame(t, tt.dstMAC, tt.src, tt.dst, 4791, []byte{0x64, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 1, 2, 3, 4})
			r.h.Input(f)
			if len(r.roce) != 1 || !bytes.Equal(r.roce[0], f) {
				t.Fatalf("RoCE handler got %d frames, want the frame", len(r.roce))
			}
			if r.sent() != 0 || r.h.Stats().RoCE != 1 {
				t.Errorf("sent %d, stats %+v", r.sent(), r.h.Stats())
			}
			if err := r.h.LeaveGroup(group); err != nil {
				t.Fatal(err)
			}
			if tt.dst == group {
				r.h.Input(f)
				if len(r.roce) != 1 {
					t.Error("a frame to a group the Host left was delivered")
				}
			}
		})
	}
}

// resolveAsync starts Resolve in a goroutine.
func resolveAsync(h *Host, ctx context.Context, ip netip.Addr) <-chan struct {
	mac net.HardwareAddr
	err error
} {
	ch := make(chan struct {
		mac net.HardwareAddr
		err error
	}, 1)
	go func() {
		mac, err := h.Resolve(ctx, ip)
		ch <- struct {
			mac net.HardwareAddr
			err error
		}{mac, err}
	}()
	return ch
}

// checkSolicitation fails t unless p solicits target from the Host.
func checkSolicitation(t *testing.T, p gopacket.Packet, target netip.Addr) {
	t.Helper()
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if target.Is4() {
		arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		if arp == nil || arp.Operation != layers.ARPRequest || !bytes.Equal(eth.DstMAC, broadcastMAC) ||
			!bytes.Equal(arp.DstProtAddress, target.AsSlice()) || !bytes.Equal(arp.SourceProtAddress, hostIP4.AsSlice()) ||
			!bytes.Equal(arp.SourceHwAddress, hostMAC) {
			t.Fatalf("not an ARP request for %v:\n%s", target, p.Dump())
		}
		return
	}
	ns, _ := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ns == nil || !bytes.Equal(ns.TargetAddress, target.AsSlice()) || !bytes.Equal(ip.DstIP, solicitedNode(target).AsSlice()) ||
		!bytes.Equal(eth.DstMAC, MulticastMAC(solicitedNode(target))) || ip.HopLimit != 255 ||
		!bytes.Equal(linkAddrOption(ns.Options, layers.ICMPv6OptSourceAddress), hostMAC) {
		t.Fatalf("not a neighbour solicitation for %v:\n%s", target, p.Dump())
	}
	checkICMPv6Checksum(t, p)
}

func TestResolve(t *testing.T) {
	for _, tt := range []struct {
		name   string
		target netip.Addr
		reply  func(testing.TB) []byte
	}{
		{"ARP", peerIP4, func(t testing.TB) []byte {
			return arpFrame(t, layers.ARPReply, hostMAC, peerMAC, peerIP4, hostIP4, hostMAC)
		}},
		{"ND", peerIP6, func(t testing.TB) []byte { return naFrame(t, peerIP6, hostIP6, peerIP6, hostMAC, 0x60) }},
		{"ND link-local", peerLL, func(t testing.TB) []byte {
			return naFrame(t, peerLL, LinkLocal(hostMAC), peerLL, hostMAC, 0x60)
		}},
	} {
		t.Run(tt.name+"/answered on the second try", func(t *testing.T) {
			r := newRig(t, nil)
			res := resolveAsync(r.h, context.Background(), tt.target)
			checkSolicitation(t, r.recv(t), tt.target)
			r.clk.Advance(DefaultRetransTime)
			checkSolicitation(t, r.recv(t), tt.target)
			r.h.Input(tt.reply(t))
			got := <-res
			if got.err != nil || !bytes.Equal(got.mac, peerMAC) {
				t.Fatalf("Resolve = %v, %v; want %v", got.mac, got.err, peerMAC)
			}
			// Cached: no new solicitation until ReachableTime passes.
			before := r.sent()
			if mac, err := r.h.Resolve(context.Background(), tt.target); err != nil || !bytes.Equal(mac, peerMAC) || r.sent() != before {
				t.Errorf("cached Resolve = %v, %v, sent %d frames", mac, err, r.sent()-before)
			}
			if r.clk.Pending() != 0 {
				t.Errorf("%d timers pending after resolution", r.clk.Pending())
			}
			r.clk.Advance(DefaultReachableTime)
			res = resolveAsync(r.h, context.Background(), tt.target)
			checkSolicitation(t, r.recv(t), tt.target)
			r.h.Input(tt.reply(t))
			if got := <-res; got.err != nil {
				t.Errorf("Resolve after expiry: %v", got.err)
			}
		})
		t.Run(tt.name+"/unanswered", func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Solicitations = 4; c.RetransTime = 250 * time.Millisecond })
			res := resolveAsync(r.h, context.Background(), tt.target)
			res2 := resolveAsync(r.h, context.Background(), tt.target) // shares the resolution
			for i := range 4 {
				checkSolicitation(t, r.recv(t), tt.target)
				if i < 3 {
					r.clk.Advance(250 * time.Millisecond)
				}
			}
			r.clk.Advance(249 * time.Millisecond)
			select {
			case got := <-res:
				t.Fatalf("Resolve returned %v before the last try timed out", got.err)
			case <-time.After(10 * time.Millisecond):
			}
			r.clk.Advance(time.Millisecond)
			for _, ch := range []<-chan struct {
				mac net.HardwareAddr
				err error
			}{res, res2} {
				if got := <-ch; !errors.Is(got.err, syscall.EHOSTUNREACH) {
					t.Errorf("Resolve = %v, %v; want EHOSTUNREACH", got.mac, got.err)
				}
			}
			if s := r.h.Stats(); s.Solicitations != 4 {
				t.Errorf("Solicitations = %d, want 4", s.Solicitations)
			}
			if r.clk.Pending() != 0 {
				t.Errorf("%d timers pending after failure", r.clk.Pending())
			}
		})
	}
}

func TestResolveImmediate(t *testing.T) {
	r := newRig(t, nil)
	for _, tt := range []struct {
		ip   netip.Addr
		want net.HardwareAddr
		err  error
	}{
		{netip.MustParseAddr("255.255.255.255"), broadcastMAC, nil},
		{netip.MustParseAddr("239.1.2.3"), net.HardwareAddr{1, 0, 0x5e, 1, 2, 3}, nil},
		{netip.MustParseAddr("ff02::1:ff00:1234"), net.HardwareAddr{0x33, 0x33, 0xff, 0, 0x12, 0x34}, nil},
		{hostIP4, hostMAC, nil},
		{netip.MustParseAddr("::ffff:10.77.0.2"), hostMAC, nil},
		{netip.IPv4Unspecified(), nil, syscall.EINVAL},
		{netip.Addr{}, nil, syscall.EINVAL},
	} {
		mac, err := r.h.Resolve(context.Background(), tt.ip)
		if !errors.Is(err, tt.err) || !bytes.Equal(mac, tt.want) {
			t.Errorf("Resolve(%v) = %v, %v; want %v, %v", tt.ip, mac, err, tt.want, tt.err)
		}
	}
	if r.sent() != 0 {
		t.Errorf("immediate resolutions sent %d frames", r.sent())
	}
	noV4 := newRig(t, func(c *Config) { c.Addrs = nil })
	if _, err := noV4.h.Resolve(context.Background(), peerIP4); !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("Resolve without an IPv4 address: %v, want ENETUNREACH", err)
	}
	if err := r.h.SetNeighbor(peerIP4, peerMAC); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(time.Hour)
	if mac, err := r.h.Resolve(context.Background(), peerIP4); err != nil || !bytes.Equal(mac, peerMAC) || r.sent() != 0 {
		t.Errorf("static neighbour: %v, %v", mac, err)
	}
}

func TestResolveContextAndClose(t *testing.T) {
	r := newRig(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	res := resolveAsync(r.h, ctx, peerIP4)
	r.recv(t)
	cancel()
	if got := <-res; !errors.Is(got.err, context.Canceled) {
		t.Errorf("Resolve after cancel: %v, want context.Canceled", got.err)
	}
	res = resolveAsync(r.h, context.Background(), peerIP4) // joins the resolution still running
	time.Sleep(10 * time.Millisecond)
	r.h.Close()
	if got := <-res; !errors.Is(got.err, net.ErrClosed) {
		t.Errorf("Resolve after Close: %v, want net.ErrClosed", got.err)
	}
}

// TestLearn checks which received messages create or update entries.
func TestLearn(t *testing.T) {
	r := newRig(t, nil)
	// A gratuitous ARP from an unknown host creates nothing (arp_accept=0).
	r.h.Input(arpFrame(t, layers.ARPRequest, broadcastMAC, peerMAC, peerIP4, peerIP4, net.HardwareAddr{0, 0, 0, 0, 0, 0}))
	// An unsolicited NA for an unknown target creates nothing.
	r.h.Input(naFrame(t, peerIP6, allNodes, peerIP6, MulticastMAC(allNodes), 0x20))
	if n := r.h.Neighbors(); len(n) != 0 {
		t.Errorf("unsolicited announcements created %v", n)
	}
	// An NS to us with a source link-layer option creates an entry.
	r.h.Input(nsFrame(t, peerIP6, solicitedNode(hostIP6), hostIP6, MulticastMAC(solicitedNode(hostIP6)), 255, true))
	r.recv(t)
	if n := r.h.Neighbors(); len(n) != 1 || n[0].IP != peerIP6 {
		t.Errorf("after NS: Neighbors() = %v", n)
	}
	// It expires after ReachableTime.
	r.clk.Advance(DefaultReachableTime)
	if n := r.h.Neighbors(); len(n) != 0 {
		t.Errorf("after ReachableTime: Neighbors() = %v", n)
	}
}

func TestAddrs(t *testing.T) {
	r := newRig(t, nil)
	want := []netip.Prefix{netip.PrefixFrom(LinkLocal(hostMAC), 64), netip.PrefixFrom(hostIP4, 24), netip.PrefixFrom(hostIP6, 64)}
	if got := r.h.Addrs(); !slices.Equal(got, want) {
		t.Fatalf("Addrs() = %v, want %v (link-local first)", got, want)
	}
	if LinkLocal(hostMAC) != netip.MustParseAddr("fe80::77:ff:fe00:2") {
		t.Errorf("LinkLocal(%v) = %v", hostMAC, LinkLocal(hostMAC))
	}
	if len(r.changes) != 0 {
		t.Errorf("New reported changes %v", r.changes)
	}
	added := netip.MustParsePrefix("::ffff:10.78.0.2/120")
	if err := r.h.AddAddr(added); err != nil {
		t.Fatal(err)
	}
	// The new address is announced with a gratuitous ARP.
	p := r.recv(t)
	if arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP); arp == nil || !bytes.Equal(arp.SourceProtAddress, []byte{10, 78, 0, 2}) || !bytes.Equal(arp.DstProtAddress, []byte{10, 78, 0, 2}) {
		t.Errorf("no gratuitous ARP for the added address:\n%s", p.Dump())
	}
	v6 := netip.MustParsePrefix("fd78::1:5/64") // its own solicited-node group
	if err := r.h.AddAddr(v6); err != nil {
		t.Fatal(err)
	}
	p = r.recv(t)
	checkMLDReport(t, p, mldChangeToExclude, solicitedNode(v6.Addr())) // the join comes first
	p = r.recv(t)
	if na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement); na == nil || na.Solicited() || !na.Override() {
		t.Errorf("no unsolicited NA for the added address:\n%s", p.Dump())
	}
	if !r.h.HasAddr(netip.MustParseAddr("10.78.0.2")) || !r.h.acceptsMAC(MulticastMAC(solicitedNode(v6.Addr()))) {
		t.Error("added addresses not in effect")
	}
	if err := r.h.RemoveAddr(v6.Addr()); err != nil {
		t.Fatal(err)
	}
	if r.h.acceptsMAC(MulticastMAC(solicitedNode(v6.Addr()))) {
		t.Error("the removed address's solicited-node group is still joined")
	}
	wantChanges := []AddrChange{
		{netip.MustParsePrefix("10.78.0.2/24"), true},
		{v6, true},
		{v6, false},
	}
	if !slices.Equal(r.changes, wantChanges) {
		t.Errorf("changes = %v, want %v", r.changes, wantChanges)
	}
	for _, tt := range []struct {
		p    netip.Prefix
		want error
	}{
		{netip.PrefixFrom(hostIP4, 24), syscall.EEXIST},
		{netip.PrefixFrom(hostIP4, 16), syscall.EEXIST},
		{netip.MustParsePrefix("0.0.0.0/0"), syscall.EINVAL},
		{netip.MustParsePrefix("224.0.0.1/32"), syscall.EINVAL},
		{netip.Prefix{}, syscall.EINVAL},
	} {
		if err := r.h.AddAddr(tt.p); !errors.Is(err, tt.want) {
			t.Errorf("AddAddr(%v) = %v, want %v", tt.p, err, tt.want)
		}
	}
	if err := r.h.RemoveAddr(netip.MustParseAddr("10.99.0.1")); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("RemoveAddr of an absent address: %v, want EADDRNOTAVAIL", err)
	}
	if err := r.h.JoinGroup(hostIP4); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("JoinGroup(unicast): %v, want EINVAL", err)
	}
	if err := r.h.LeaveGroup(netip.MustParseAddr("ff0e::1")); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("LeaveGroup(unjoined): %v, want EADDRNOTAVAIL", err)
	}
}

func TestNewRejects(t *testing.T) {
	a, _ := link.Pipe()
	for _, cfg := range []Config{
		{},
		{MAC: net.HardwareAddr{1, 0, 0x5e, 0, 0, 1}},
		{MAC: hostMAC, Addrs: []netip.Prefix{netip.MustParsePrefix("ff02::1/128")}},
		{MAC: hostMAC, Addrs: []netip.Prefix{netip.PrefixFrom(hostIP4, 24), netip.PrefixFrom(hostIP4, 24)}},
	} {
		if _, err := New(a, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// TestTwoHosts runs two Hosts with Run over a Pipe: each resolves the
// other and a RoCE frame crosses.
func TestTwoHosts(t *testing.T) {
	ea, eb := link.Pipe()
	got := make(chan []byte, 1)
	a, err := New(ea, Config{NoDAD: true, MAC: hostMAC, Addrs: []netip.Prefix{netip.PrefixFrom(hostIP4, 24), netip.PrefixFrom(hostIP6, 64)}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(eb, Config{NoDAD: true, MAC: peerMAC, Addrs: []netip.Prefix{netip.PrefixFrom(peerIP4, 24), netip.PrefixFrom(peerIP6, 64)},
		RoCE: func(f []byte) { got <- bytes.Clone(f) }})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(); err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() {
		if err := b.Run(); err != nil {
			t.Error(err)
		}
	})
	defer wg.Wait()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ip := range []netip.Addr{peerIP4, peerIP6, LinkLocal(peerMAC)} {
		if mac, err := a.Resolve(ctx, ip); err != nil || !bytes.Equal(mac, peerMAC) {
			t.Fatalf("a.Resolve(%v) = %v, %v", ip, mac, err)
		}
	}
	if mac, err := b.Resolve(ctx, hostIP6); err != nil || !bytes.Equal(mac, hostMAC) {
		t.Fatalf("b.Resolve = %v, %v", mac, err)
	}
	f := udpFrame(t, peerMAC, hostIP4, peerIP4, 4791, []byte("bth..."))
	copy(f[6:12], hostMAC)
	if err := a.Send(f); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if !bytes.Equal(g, f) {
			t.Error("RoCE frame changed in transit")
		}
	case <-ctx.Done():
		t.Fatal("RoCE frame not delivered")
	}
}

// TestRoCEInputZeroAllocs guards the receive fast path: a RoCE frame for
// the Host reaches the handler without allocating.
func TestRoCEInputZeroAllocs(t *testing.T) {
	for _, dst := range []netip.Addr{hostIP4, hostIP6} {
		t.Run(dst.String(), func(t *testing.T) {
			n := 0
			r := newRig(t, func(c *Config) { c.RoCE = func([]byte) { n++ } })
			src := peerIP4
			if dst.Is6() {
				src = peerIP6
			}
			f := udpFrame(t, hostMAC, src, dst, 4791, make([]byte, 1024))
			r.h.Input(f)
			if allocs := testing.AllocsPerRun(200, func() { r.h.Input(f) }); allocs != 0 {
				t.Errorf("Input of a RoCE frame allocates %v times, want 0", allocs)
			}
			if n != 202 {
				t.Errorf("handler ran %d times, want 202", n)
			}
		})
	}
}

func BenchmarkInputRoCE(b *testing.B) {
	for _, dst := range []netip.Addr{hostIP4, hostIP6} {
		b.Run(map[bool]string{true: "IPv4", false: "IPv6"}[dst.Is4()], func(b *testing.B) {
			end, _ := link.Pipe()
			src := peerIP4
			if dst.Is6() {
				src = peerIP6
			}
			h, err := New(end, Config{NoDAD: true, MAC: hostMAC, Addrs: []netip.Prefix{netip.PrefixFrom(dst, dst.BitLen()/2)}, RoCE: func([]byte) {}})
			if err != nil {
				b.Fatal(err)
			}
			f := udpFrame(b, hostMAC, src, dst, 4791, make([]byte, 1024))
			b.SetBytes(int64(len(f)))
			b.ReportAllocs()
			for b.Loop() {
				h.Input(f)
			}
		})
	}
}
