package oob

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/internal/testutil"
)

// segment is one TCP payload of the out-of-band exchange.
type segment struct {
	fromClient bool
	payload    []byte
}

// roceFrame is one RoCEv2 packet: IP addresses and the UDP payload (BTH
// onwards, ICRC included).
type roceFrame struct {
	src, dst netip.Addr
	payload  []byte
}

// capture is what the tests need from a pcap of a tool run.
type capture struct {
	segments []segment
	roce     []roceFrame
	client   netip.Addr // the side that connected to 18515
	server   netip.Addr
}

// loadCapture reads the stored rxe capture name (internal/testutil) and splits
// it into the TCP payloads of port 18515 (in capture order) and the RoCE frames.
// It fails the test on a missing or empty file.
func loadCapture(t *testing.T, name string) *capture {
	t.Helper()
	c := &capture{}
	for _, data := range testutil.ReadPcapFile(t, testutil.Capture(t, name)) {
		p := gopacket.NewPacket(data, layers.LinkTypeEthernet, gopacket.Default)
		var src, dst netip.Addr
		if ip4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			src, _ = netip.AddrFromSlice(ip4.SrcIP.To4())
			dst, _ = netip.AddrFromSlice(ip4.DstIP.To4())
		} else if ip6, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			src, _ = netip.AddrFromSlice(ip6.SrcIP)
			dst, _ = netip.AddrFromSlice(ip6.DstIP)
		}
		if tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok {
			if tcp.DstPort == DefaultPort && tcp.SYN && !tcp.ACK {
				c.client, c.server = src, dst
			}
			if len(tcp.Payload) > 0 {
				c.segments = append(c.segments, segment{fromClient: tcp.DstPort == DefaultPort, payload: append([]byte(nil), tcp.Payload...)})
			}
			continue
		}
		if udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && udp.DstPort == 4791 {
			c.roce = append(c.roce, roceFrame{src: src, dst: dst, payload: append([]byte(nil), udp.Payload...)})
		}
	}
	if len(c.segments) == 0 || len(c.roce) == 0 || !c.client.IsValid() {
		t.Fatalf("%s: %d TCP payloads, %d RoCE frames, client %v: not a tool capture", name, len(c.segments), len(c.roce), c.client)
	}
	return c
}

// BTH fields, IBA 9.2 (the BTH starts the UDP payload in RoCEv2).
func bthOpcode(p []byte) byte   { return p[0] }
func bthDestQP(p []byte) uint32 { return uint32(p[5])<<16 | uint32(p[6])<<8 | uint32(p[7]) }
func bthPSN(p []byte) uint32    { return uint32(p[9])<<16 | uint32(p[10])<<8 | uint32(p[11]) }

// ipOfGID returns the IP address a RoCEv2 GID stands for (an IPv4-mapped
// GID is the IPv4 address).
func ipOfGID(gid [16]byte) netip.Addr { return netip.AddrFrom16(gid).Unmap() }

// rethOf returns the RETH (VA, R_Key) after the BTH (IBA 9.3.3).
func rethOf(p []byte) (uint64, uint32) {
	return binary.BigEndian.Uint64(p[12:20]), binary.BigEndian.Uint32(p[20:24])
}
