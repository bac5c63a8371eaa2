package host

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/clock"
	"github.com/softroce/softroce/link"
)

// FuzzHostInput feeds arbitrary frames to a Host: it must never panic or
// block, and every frame is counted exactly once.
func FuzzHostInput(f *testing.F) {
	zero := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	for _, seed := range [][]byte{
		arpFrame(f, layers.ARPRequest, broadcastMAC, peerMAC, peerIP4, hostIP4, zero),
		arpFrame(f, layers.ARPReply, hostMAC, peerMAC, peerIP4, hostIP4, hostMAC),
		nsFrame(f, peerIP6, solicitedNode(hostIP6), hostIP6, MulticastMAC(solicitedNode(hostIP6)), 255, true),
		nsFrame(f, netip.IPv6Unspecified(), solicitedNode(hostIP6), hostIP6, MulticastMAC(solicitedNode(hostIP6)), 255, false),
		naFrame(f, peerIP6, hostIP6, peerIP6, hostMAC, 0x60),
		echo4Frame(f, hostMAC, hostIP4, []byte("ping")),
		echo6Frame(f, hostMAC, hostIP6, []byte("ping6")),
		udpFrame(f, hostMAC, peerIP4, hostIP4, 4791, make([]byte, 40)),
		udpFrame(f, hostMAC, peerIP6, hostIP6, 4791, make([]byte, 40)),
		udpFrame(f, hostMAC, peerIP4, hostIP4, 9, []byte("closed")),
		udpFrame(f, hostMAC, peerIP6, hostIP6, 9, []byte("closed")),
		ipFrame(f, hostMAC, peerIP4, hostIP4, 253, []byte("proto")),
		ipFrame(f, hostMAC, peerIP6, hostIP6, 253, []byte("proto")),
		tcpFrame(f, peerIP4, hostIP4, &layers.TCP{SrcPort: 1, DstPort: 22, SYN: true, Seq: 9}, nil),
		queryFrame(f, allNodes, netip.IPv6Unspecified(), 1000, true),
		queryFrame(f, solicitedNode(hostIP6), solicitedNode(hostIP6), 0x8123, false),
		igmpQueryFrame(f, allHosts, netip.IPv4Unspecified(), 100, true),
		igmpQueryFrame(f, allHosts, netip.IPv4Unspecified(), 0, false),
		igmpQueryFrame(f, group4, group4, 0x85, true),
		probeFrame(f, hostIP6, []byte{1, 2, 3, 4, 5, 6}),
		tcpFrame(f, peerIP6, hostIP6, &layers.TCP{SrcPort: 1, DstPort: 22, ACK: true, Ack: 9}, []byte("data")),
		{},
		hostMAC,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		end, _ := link.NewPipe(&link.PipeConfig{QueueLen: 4, DropWhenFull: true})
		h, err := New(end, Config{
			MAC:   hostMAC,
			Addrs: []netip.Prefix{netip.PrefixFrom(hostIP4, 24), netip.PrefixFrom(hostIP6, 64)},
			Clock: clock.NewManual(epoch),
			NoDAD: true,
			RoCE:  func([]byte) {},
		})
		if err != nil {
			t.Fatal(err)
		}
		h.JoinIPGroup(group4) // IGMP queries for it get answers
		h.Input(frame)
		s := h.Stats()
		if s.RxFrames != 1 || s.NotForUs+s.Malformed+s.Unhandled+s.RoCE+s.ARPReplies+s.NeighborAdverts+s.EchoReplies+s.IGMPQueries == 0 && len(h.Neighbors()) == 0 && !learntOnly(frame) {
			t.Errorf("frame neither counted nor acted on: %+v", s)
		}
	})
}

// learntOnly reports whether frame may be a valid ARP or NA that only
// updates the cache (and so changes no counter).
func learntOnly(frame []byte) bool {
	return len(frame) >= 14 && (frame[12] == 0x08 && frame[13] == 0x06 || frame[12] == 0x86 && frame[13] == 0xdd)
}
