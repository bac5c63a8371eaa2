package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/softroce/softroce/ib"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/wire"
)

func builtFrame(t testing.TB, src, dst netip.Addr, payload []byte) []byte {
	t.Helper()
	b := make([]byte, 2048)
	n, err := wire.Build(b, &wire.Frame{Src: src, Dst: dst, TrafficClass: 0x2e, HopLimit: 17, IPID: 0x4242, SrcPort: 0xd00d,
		BTH:  wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, DestQP: 0x12, PSN: 99, PKey: 0xffff},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 0x77, DMALen: uint32(len(payload))}, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// TestPrepareThenSynthesizeRoundTrips: what prepare hands the socket,
// synthesized back with what the receiving socket reports, is the frame
// that was sent with the kernel's identification (0, DF) and the socket's
// source port, and its ICRC verifies without resealing.
func TestPrepareThenSynthesizeRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
	}{
		{"IPv4", netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")},
		{"IPv6", netip.MustParseAddr("fd01::1"), netip.MustParseAddr("fd01::2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := builtFrame(t, tc.src, tc.dst, bytes.Repeat([]byte{0xab}, 300))
			scratch := make([]byte, 4096)
			pay, m, err := prepare(scratch, sent, Port, 1500)
			if err != nil {
				t.Fatal(err)
			}
			if m.src != tc.src || m.dst != tc.dst || m.dport != ib.RoCEv2UDPPort || m.tos != 0x2e || m.ttl != 17 {
				t.Errorf("meta %+v", m)
			}
			buf := make([]byte, headroom+len(pay))
			copy(buf[headroom:], pay)
			start := synthesize(buf, headroom, len(pay), &rxMeta{src: netip.AddrPortFrom(tc.src, Port),
				dst: netip.AddrPortFrom(tc.dst, ib.RoCEv2UDPPort), tos: 0x2e, ttl: 17})
			got := buf[start:]
			if new(checker).check(got) {
				t.Error("a frame prepared by the link is unverifiable")
			}
			if err := wire.VerifyICRC(got, wire.EthernetSize); err != nil {
				t.Errorf("ICRC: %v", err)
			}
			// The same frame as sent, except the fields the kernel chooses.
			want := append([]byte(nil), sent...)
			copy(want[0:6], LocalMAC[:])
			copy(want[6:12], PeerMAC[:])
			l4 := wire.EthernetSize + wire.IPv6Size
			if tc.src.Is4() {
				l4 = wire.EthernetSize + wire.IPv4Size
				binary.BigEndian.PutUint16(want[18:], 0)
				binary.BigEndian.PutUint16(want[24:], 0)
				binary.BigEndian.PutUint16(want[24:], ipv4Checksum(want[14:34]))
			}
			binary.BigEndian.PutUint16(want[l4:], Port)
			copy(want[len(want)-4:], got[len(got)-4:]) // the resealed ICRC, checked above
			if !bytes.Equal(got, want) {
				t.Errorf("received frame\n got %x\nwant %x", got, want)
			}
		})
	}
}

func TestPrepareRefuses(t *testing.T) {
	good := builtFrame(t, netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), make([]byte, 1000))
	arp := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	tcp := append([]byte(nil), good...)
	tcp[wire.EthernetSize+9] = 6
	for _, tc := range []struct {
		name  string
		frame []byte
		mtu   int
		want  error
	}{
		{"over the MTU", good, 576, unix.EMSGSIZE},
		{"ARP", arp, 1500, errNotRoCE},
		{"TCP", tcp, 1500, errNotRoCE},
		{"runt", good[:10], 1500, errNotRoCE},
		{"cut in the IP header", good[:20], 1500, errNotRoCE},
		{"UDP length past the end", good[:100], 1500, errNotRoCE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := prepare(make([]byte, 4096), tc.frame, Port, tc.mtu); !errors.Is(err, tc.want) {
				t.Errorf("prepare: %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzFrameRewrite feeds arbitrary frames to prepare and arbitrary
// datagrams to synthesize and checkRx: neither may panic, and a frame
// prepare accepts comes back verifying.
func FuzzFrameRewrite(f *testing.F) {
	f.Add(builtFrame(f, netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), []byte("seed")), true)
	f.Add(builtFrame(f, netip.MustParseAddr("fd01::1"), netip.MustParseAddr("fd01::2"), []byte("seed")), false)
	f.Fuzz(func(t *testing.T, frame []byte, v4 bool) {
		scratch := make([]byte, 4096)
		if pay, m, err := prepare(scratch, frame, Port, 1500); err == nil {
			buf := make([]byte, headroom+len(pay))
			copy(buf[headroom:], pay)
			start := synthesize(buf, headroom, len(pay), &rxMeta{src: netip.AddrPortFrom(m.src, Port),
				dst: netip.AddrPortFrom(m.dst, m.dport), tos: m.tos, ttl: m.ttl})
			if m.src.Is4() && new(checker).check(buf[start:]) {
				t.Errorf("a frame prepare accepted does not verify")
			}
		}
		if len(frame) > 9000 {
			return
		}
		src, dst := netip.MustParseAddr("10.2.0.1"), netip.MustParseAddr("10.2.0.2")
		if !v4 {
			src, dst = netip.MustParseAddr("fd02::1"), netip.MustParseAddr("fd02::2")
		}
		buf := make([]byte, headroom+len(frame))
		copy(buf[headroom:], frame)
		start := synthesize(buf, headroom, len(frame), &rxMeta{src: netip.AddrPortFrom(src, 49152), dst: netip.AddrPortFrom(dst, Port), ttl: 64})
		new(checker).check(buf[start:])
		wire.Parse(buf[start:])
	})
}

// TestCheckerFindsTheGSOIdentification: an IPv4 frame sealed for any
// identification a GSO send gives its segments (0 to MaxSegments-1)
// verifies and comes back with that identification and its own ICRC; one
// sealed for a larger identification, or corrupted, is unverifiable and
// resealed for identification 0.
func TestCheckerFindsTheGSOIdentification(t *testing.T) {
	src, dst := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	var c checker
	for _, size := range []int{0, 300, 1024} {
		for _, id := range []int{0, 1, 2, 5, 31, 62, 63, 64, 65, 1000, 0xffff} {
			for _, corrupt := range []bool{false, true} {
				scratch := make([]byte, 4096)
				pay, m, err := prepare(scratch, builtFrame(t, src, dst, bytes.Repeat([]byte{0x5a}, size)), Port, 1500)
				if err != nil {
					t.Fatal(err)
				}
				setIPID(&m, uint16(id), new(idDeltas))
				if corrupt {
					pay[len(pay)/2] ^= 0x10
				}
				buf := make([]byte, headroom+len(pay))
				copy(buf[headroom:], pay)
				start := synthesize(buf, headroom, len(pay), &rxMeta{src: netip.AddrPortFrom(src, Port),
					dst: netip.AddrPortFrom(dst, Port), tos: 0x2e, ttl: 17})
				got := buf[start:]
				want := id < MaxSegments && !corrupt
				if unverifiable := c.check(got); unverifiable == want {
					t.Errorf("size %d id %d corrupt %v: unverifiable %v", size, id, corrupt, unverifiable)
				}
				if err := wire.VerifyICRC(got, wire.EthernetSize); err != nil {
					t.Errorf("size %d id %d corrupt %v: delivered ICRC: %v", size, id, corrupt, err)
				}
				gotID := int(binary.BigEndian.Uint16(got[wire.EthernetSize+4:]))
				if want && gotID != id || !want && gotID != 0 {
					t.Errorf("size %d id %d corrupt %v: delivered identification %d", size, id, corrupt, gotID)
				}
				if ipv4Checksum(got[wire.EthernetSize:wire.EthernetSize+wire.IPv4Size]) != 0 {
					t.Errorf("size %d id %d corrupt %v: bad IPv4 header checksum", size, id, corrupt)
				}
			}
		}
	}
}
