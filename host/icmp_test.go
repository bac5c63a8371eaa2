package host

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// ipFrame builds a frame from the peer to dst carrying proto with payload.
func ipFrame(t testing.TB, dstMAC net.HardwareAddr, src, dst netip.Addr, proto layers.IPProtocol, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: peerMAC, DstMAC: dstMAC}
	if dst.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		return build(t, eth, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, TOS: 0x10, Protocol: proto,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}, gopacket.Payload(payload))
	}
	eth.EthernetType = layers.EthernetTypeIPv6
	return build(t, eth, &layers.IPv6{Version: 6, NextHeader: proto, HopLimit: 64,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}, gopacket.Payload(payload))
}

func tcpFrame(t testing.TB, src, dst netip.Addr, seg *layers.TCP, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: peerMAC, DstMAC: hostMAC}
	if dst.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		return build(t, eth, &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP,
			SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}, seg, gopacket.Payload(payload))
	}
	eth.EthernetType = layers.EthernetTypeIPv6
	return build(t, eth, &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolTCP, HopLimit: 64,
		SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}, seg, gopacket.Payload(payload))
}

// TestDestUnreachable: UDP to a closed port and unknown protocols get the
// ICMP error Linux sends, from the address they were sent to, quoting
// the offending packet up to the kernel's limits.
func TestDestUnreachable(t *testing.T) {
	for _, tt := range []struct {
		name      string
		frame     func(testing.TB) []byte
		v4        bool
		typ, code uint8
		param     uint32
		quoteLen  int // of the offending IP packet; 0 means all of it
	}{
		{"UDP4 closed port", func(t testing.TB) []byte { return udpFrame(t, hostMAC, peerIP4, hostIP4, 4792, []byte("hello")) },
			true, 3, 3, 0, 0},
		{"UDP6 closed port", func(t testing.TB) []byte { return udpFrame(t, hostMAC, peerIP6, hostIP6, 9, []byte("hello")) },
			false, 1, 4, 0, 0},
		{"UDP6 closed port from link-local", func(t testing.TB) []byte {
			return udpFrame(t, hostMAC, peerLL, LinkLocal(hostMAC), 9, []byte("hello"))
		}, false, 1, 4, 0, 0},
		{"UDP4 large datagram quotes 548 bytes", func(t testing.TB) []byte {
			return udpFrame(t, hostMAC, peerIP4, hostIP4, 4792, bytes.Repeat([]byte{0xab}, 1400))
		}, true, 3, 3, 0, 548},
		{"UDP6 large datagram quotes 1232 bytes", func(t testing.TB) []byte {
			return udpFrame(t, hostMAC, peerIP6, hostIP6, 4792, bytes.Repeat([]byte{0xab}, 1400))
		}, false, 1, 4, 0, 1232},
		{"IPv4 unknown protocol", func(t testing.TB) []byte { return ipFrame(t, hostMAC, peerIP4, hostIP4, 253, []byte("x")) },
			true, 3, 2, 0, 0},
		{"IPv6 unknown next header", func(t testing.TB) []byte { return ipFrame(t, hostMAC, peerIP6, hostIP6, 253, []byte("x")) },
			false, 4, 1, 6, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			in := tt.frame(t)
			r.h.Input(in)
			if r.sent() != 1 {
				t.Fatalf("the Host sent %d frames; want 1", r.sent())
			}
			p := r.recv(t)
			offending := in[14:]
			if tt.v4 {
				offending = offending[:binary.BigEndian.Uint16(offending[2:])]
			} else {
				offending = offending[:40+int(binary.BigEndian.Uint16(offending[4:]))]
			}
			want := offending
			if tt.quoteLen != 0 {
				want = offending[:tt.quoteLen]
			}
			eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if !bytes.Equal(eth.DstMAC, peerMAC) || !bytes.Equal(eth.SrcMAC, hostMAC) {
				t.Errorf("Ethernet %v -> %v; want %v -> %v", eth.SrcMAC, eth.DstMAC, hostMAC, peerMAC)
			}
			var body []byte
			if tt.v4 {
				ip := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				if !bytes.Equal(ip.SrcIP, offending[16:20]) || !bytes.Equal(ip.DstIP, offending[12:16]) || ip.Protocol != layers.IPProtocolICMPv4 {
					t.Errorf("IPv4 %v -> %v proto %v; want the offender's addresses swapped, ICMP", ip.SrcIP, ip.DstIP, ip.Protocol)
				}
				if wantTOS := offending[1]&0x1e | 0xc0; ip.Length > 576 || ip.TOS != wantTOS || ip.Flags&layers.IPv4DontFragment != 0 {
					t.Errorf("IPv4 length %d TOS %#x flags %v; want <= 576, %#x, no DF", ip.Length, ip.TOS, ip.Flags, wantTOS)
				}
				icmp := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if icmp.TypeCode != layers.CreateICMPv4TypeCode(tt.typ, tt.code) || icmp.Id != 0 || icmp.Seq != 0 {
					t.Errorf("ICMP %v id %d seq %d; want type %d code %d, unused zero", icmp.TypeCode, icmp.Id, icmp.Seq, tt.typ, tt.code)
				}
				if s := checksum16(ip.Payload, 0); s != 0xffff {
					t.Errorf("ICMP checksum does not verify (sum %#x)", s)
				}
				body = icmp.Payload
			} else {
				ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
				if !bytes.Equal(ip.SrcIP, offending[24:40]) || !bytes.Equal(ip.DstIP, offending[8:24]) || ip.HopLimit != 64 {
					t.Errorf("IPv6 %v -> %v hop limit %d; want the offender's addresses swapped, 64", ip.SrcIP, ip.DstIP, ip.HopLimit)
				}
				if 40+int(ip.Length) > 1280 {
					t.Errorf("IPv6 packet of %d bytes; want at most 1280", 40+int(ip.Length))
				}
				checkICMPv6Checksum(t, p)
				icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				if icmp.TypeCode != layers.CreateICMPv6TypeCode(tt.typ, tt.code) {
					t.Errorf("ICMPv6 %v; want type %d code %d", icmp.TypeCode, tt.typ, tt.code)
				}
				if len(icmp.Payload) < 4 || binary.BigEndian.Uint32(icmp.Payload) != tt.param {
					t.Fatalf("ICMPv6 parameter field of %x; want %d", icmp.Payload[:min(4, len(icmp.Payload))], tt.param)
				}
				body = icmp.Payload[4:]
			}
			if !bytes.Equal(body, want) {
				t.Errorf("quoted %d bytes %x\nwant %d bytes %x", len(body), body, len(want), want)
			}
			if s := r.h.Stats(); s.DestUnreachables != 1 || s.Unhandled != 1 {
				t.Errorf("Stats() = %+v; want one unhandled frame and one unreachable sent", s)
			}
		})
	}
}

// TestNoDestUnreachable: the cases where Linux stays silent.
func TestNoDestUnreachable(t *testing.T) {
	for _, tt := range []struct {
		name  string
		mod   func(*Config)
		frame func(testing.TB) []byte
	}{
		{"UDP6 to all nodes", nil, func(t testing.TB) []byte {
			return udpFrame(t, MulticastMAC(allNodes), peerIP6, allNodes, 9, []byte("x"))
		}},
		{"UDP4 to our address under the broadcast MAC", nil, func(t testing.TB) []byte {
			return udpFrame(t, broadcastMAC, peerIP4, hostIP4, 9, []byte("x"))
		}},
		{"UDP4 from a multicast source", nil, func(t testing.TB) []byte {
			return udpFrame(t, hostMAC, netip.MustParseAddr("224.0.0.9"), hostIP4, 9, []byte("x"))
		}},
		{"UDP6 from ::", nil, func(t testing.TB) []byte {
			return udpFrame(t, hostMAC, netip.IPv6Unspecified(), hostIP6, 9, []byte("x"))
		}},
		{"UDP4 bad checksum", nil, func(t testing.TB) []byte {
			f := udpFrame(t, hostMAC, peerIP4, hostIP4, 9, []byte("x"))
			f[14+20+6] ^= 0x01 // the checksum (the frame ends in Ethernet padding)
			return f
		}},
		{"UDP6 zero checksum", nil, func(t testing.TB) []byte {
			f := udpFrame(t, hostMAC, peerIP6, hostIP6, 9, []byte("x"))
			f[14+40+6], f[14+40+7] = 0, 0
			return f
		}},
		{"UDP4 fragment", nil, func(t testing.TB) []byte {
			return build(t, &layers.Ethernet{SrcMAC: peerMAC, DstMAC: hostMAC, EthernetType: layers.EthernetTypeIPv4},
				&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4MoreFragments, Protocol: layers.IPProtocolUDP,
					SrcIP: peerIP4.AsSlice(), DstIP: hostIP4.AsSlice()},
				&layers.UDP{SrcPort: 1, DstPort: 9}, gopacket.Payload(make([]byte, 16)))
		}},
		{"IGMP", nil, func(t testing.TB) []byte {
			return ipFrame(t, hostMAC, peerIP4, hostIP4, layers.IPProtocolIGMP, make([]byte, 8))
		}},
		{"IPv6 no next header", nil, func(t testing.TB) []byte {
			return ipFrame(t, hostMAC, peerIP6, hostIP6, layers.IPProtocolNoNextHeader, nil)
		}},
		{"TCP RST", nil, func(t testing.TB) []byte {
			return tcpFrame(t, peerIP4, hostIP4, &layers.TCP{SrcPort: 1, DstPort: 2, RST: true, Seq: 5}, nil)
		}},
		{"TCP bad checksum", nil, func(t testing.TB) []byte {
			f := tcpFrame(t, peerIP4, hostIP4, &layers.TCP{SrcPort: 1, DstPort: 2, SYN: true, Seq: 5}, nil)
			f[14+20+16] ^= 0x01
			return f
		}},
		{"rate limited to nothing", func(c *Config) { c.ICMPMsgsPerSec, c.ICMPMsgsBurst = 1, 1; c.ICMPRateLimit = -1 }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.mod)
			if tt.frame == nil {
				r.h.Input(udpFrame(t, hostMAC, peerIP4, hostIP4, 9, nil))
				r.recv(t)
				tt.frame = func(t testing.TB) []byte { return udpFrame(t, hostMAC, peerIP4, hostIP4, 9, nil) }
				if s := r.h.Stats(); s.DestUnreachables != 1 {
					t.Fatalf("the first error was not sent: %+v", s)
				}
			}
			before := r.sent()
			r.h.Input(tt.frame(t))
			if r.sent() != before {
				t.Errorf("the Host answered: %s", r.recv(t).Dump())
			}
		})
	}
}

// TestICMPRateLimit: per destination a burst of 6, then one per
// interval (IPv4: icmp_ratelimit 1 s; IPv6 on a /64: 1 s >> 2); the
// global budget caps all destinations together.
func TestICMPRateLimit(t *testing.T) {
	other4 := netip.MustParseAddr("10.77.0.5")
	for _, tt := range []struct {
		name  string
		mod   func(*Config)
		src   []netip.Addr // one datagram from each, in turn
		steps []struct {
			advance time.Duration
			n       int // datagrams sent after advancing
			want    int // errors sent for them
		}
	}{
		{"IPv4 per destination", nil, []netip.Addr{peerIP4}, []struct {
			advance time.Duration
			n, want int
		}{{0, 10, 6}, {999 * time.Millisecond, 1, 0}, {time.Millisecond, 2, 1}, {3 * time.Second, 5, 3}, {time.Minute, 10, 6}}},
		{"IPv4 destinations apart", nil, []netip.Addr{peerIP4, other4}, []struct {
			advance time.Duration
			n, want int
		}{{0, 20, 12}}},
		{"IPv6 on a /64", nil, []netip.Addr{peerIP6}, []struct {
			advance time.Duration
			n, want int
		}{{0, 10, 6}, {249 * time.Millisecond, 1, 0}, {time.Millisecond, 1, 1}}},
		{"global budget", func(c *Config) { c.ICMPMsgsPerSec, c.ICMPMsgsBurst = 10, 3 }, []netip.Addr{peerIP4, other4}, []struct {
			advance time.Duration
			n, want int
		}{{0, 10, 3}, {100 * time.Millisecond, 4, 1}, {time.Second, 10, 3}}},
		{"no limits", func(c *Config) { c.ICMPMsgsPerSec, c.ICMPRateLimit = -1, -1 }, []netip.Addr{peerIP4}, []struct {
			advance time.Duration
			n, want int
		}{{0, 100, 100}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.mod)
			i, read := 0, uint64(0)
			for k, st := range tt.steps {
				r.clk.Advance(st.advance)
				before := r.h.Stats().DestUnreachables
				for range st.n {
					src := tt.src[i%len(tt.src)]
					i++
					r.h.Input(udpFrame(t, hostMAC, src, map[bool]netip.Addr{true: hostIP4, false: hostIP6}[src.Is4()], 9, nil))
					for ; read < r.sent(); read++ {
						r.recv(t)
					}
				}
				if got := int(r.h.Stats().DestUnreachables - before); got != st.want {
					t.Errorf("step %d (after +%v, %d datagrams): %d errors sent; want %d", k, st.advance, st.n, got, st.want)
				}
			}
			if s := r.h.Stats(); int(s.DestUnreachables+s.ICMPRateLimited) != i {
				t.Errorf("Stats() = %+v; want every one of %d datagrams answered or rate limited", s, i)
			}
		})
	}
}

// TestTCPReset: a segment to any TCP port gets the reset
// tcp_v4_send_reset sends.
func TestTCPReset(t *testing.T) {
	for _, tt := range []struct {
		name        string
		src, dst    netip.Addr
		in          layers.TCP
		payload     int
		ack, rstAck bool
		seq, ackNum uint32
	}{
		{"SYN", peerIP4, hostIP4, layers.TCP{SrcPort: 40000, DstPort: 22, SYN: true, Seq: 1000}, 0, false, true, 0, 1001},
		{"SYN6", peerIP6, hostIP6, layers.TCP{SrcPort: 40000, DstPort: 22, SYN: true, Seq: 0xffffffff}, 0, false, true, 0, 0},
		{"data with ACK", peerIP4, hostIP4, layers.TCP{SrcPort: 40000, DstPort: 80, ACK: true, PSH: true, Seq: 7, Ack: 5000}, 10, true, false, 5000, 0},
		{"FIN with data, no ACK", peerIP6, hostIP6, layers.TCP{SrcPort: 1, DstPort: 2, FIN: true, Seq: 100}, 10, false, true, 0, 111},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			in := tt.in
			in.Window = 1000
			r.h.Input(tcpFrame(t, tt.src, tt.dst, &in, make([]byte, tt.payload)))
			if r.sent() != 1 {
				t.Fatalf("the Host sent %d frames; want 1", r.sent())
			}
			p := r.recv(t)
			tcp := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
			if !tcp.RST || tcp.ACK != tt.rstAck || tcp.SYN || tcp.FIN || tcp.Seq != tt.seq || tcp.ACK && tcp.Ack != tt.ackNum ||
				tcp.SrcPort != in.DstPort || tcp.DstPort != in.SrcPort || len(tcp.Payload) != 0 {
				t.Errorf("reply %s; want RST ack=%v seq %d ack %d, ports swapped", p.Dump(), tt.rstAck, tt.seq, tt.ackNum)
			}
			var src, dst []byte
			if ip, ok := p.NetworkLayer().(*layers.IPv4); ok {
				src, dst = ip.SrcIP, ip.DstIP
			} else {
				ip := p.NetworkLayer().(*layers.IPv6)
				src, dst = ip.SrcIP, ip.DstIP
			}
			s, _ := netip.AddrFromSlice(src)
			d, _ := netip.AddrFromSlice(dst)
			if s != tt.dst || d != tt.src {
				t.Errorf("reset %v -> %v; want %v -> %v", s, d, tt.dst, tt.src)
			}
			seg := append(bytes.Clone(tcp.Contents), tcp.Payload...)
			if !l4ChecksumOK(s, d, layers.IPProtocolTCP, seg) {
				t.Error("reset's TCP checksum does not verify")
			}
			if st := r.h.Stats(); st.TCPResets != 1 || st.DestUnreachables != 0 {
				t.Errorf("Stats() = %+v; want one reset", st)
			}
		})
	}
}
