package gopacketlayer

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testutil"
	"github.com/softroce/softroce/wire"
)

// captures returns every frame of the stored captures; it fails when the
// glob matches nothing.
func captures(t testing.TB) [][]byte {
	t.Helper()
	var frames [][]byte
	for _, path := range testutil.Captures(t, "*.pcap") {
		frames = append(frames, testutil.ReadPcapFile(t, path)...)
	}
	return frames
}

// TestNewPacketCaptures decodes every capture frame with gopacket.NewPacket
// and checks the RoCE layer against wire.Parse, and the ICRC.
func TestNewPacketCaptures(t *testing.T) {
	n := 0
	for i, fr := range captures(t) {
		wp, werr := wire.Parse(fr)
		pkt := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
		rl := pkt.Layer(LayerTypeRoCE)
		if errors.Is(werr, wire.ErrNotRoCE) {
			if rl != nil {
				t.Fatalf("frame %d: gopacket found RoCE in a non-RoCE frame", i)
			}
			continue
		}
		if werr != nil {
			t.Fatalf("frame %d: %v", i, werr)
		}
		if el := pkt.ErrorLayer(); el != nil {
			t.Fatalf("frame %d: %v", i, el.Error())
		}
		r, ok := rl.(*RoCE)
		if !ok {
			t.Fatalf("frame %d: no RoCE layer: %v", i, pkt)
		}
		n++
		if r.BTH != wp.BTH().Fields() || r.ICRC != wp.ICRC() || r.Pad != len(wp.Pad()) ||
			!bytes.Equal(r.Payload, wp.Payload()) || !bytes.Equal(r.Contents, fr[wp.BTHOffset():wp.PayloadOffset()]) {
			t.Fatalf("frame %d: RoCE layer %+v disagrees with wire.Parse", i, r)
		}
		if h := wp.AETH(); h != nil && r.AETH != h.Fields() {
			t.Fatalf("frame %d: AETH %+v", i, r.AETH)
		}
		if h := wp.RETH(); h != nil && r.RETH != h.Fields() {
			t.Fatalf("frame %d: RETH %+v", i, r.RETH)
		}
		if h := wp.AtomicETH(); h != nil && r.AtomicETH != h.Fields() {
			t.Fatalf("frame %d: AtomicETH %+v", i, r.AtomicETH)
		}
		if h := wp.DETH(); h != nil && r.DETH != h.Fields() {
			t.Fatalf("frame %d: DETH %+v", i, r.DETH)
		}
		if len(r.Payload) > 0 && pkt.Layer(gopacket.LayerTypePayload) == nil {
			t.Fatalf("frame %d: no payload layer", i)
		}
		if err := VerifyICRC(pkt); err != nil {
			t.Fatalf("frame %d: VerifyICRC: %v", i, err)
		}
	}
	if n == 0 {
		t.Fatal("no RoCE frames decoded")
	}
}

// TestDecodingLayerParserZeroAlloc decodes a capture frame with a
// DecodingLayerParser and checks it allocates nothing.
func TestDecodingLayerParserZeroAlloc(t *testing.T) {
	var (
		eth     layers.Ethernet
		dot1q   layers.Dot1Q
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		roce    RoCE
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &dot1q, &ip4, &ip6, &udp, &roce, &payload)
	decoded := make([]gopacket.LayerType, 0, 8)
	var roceFrames [][]byte
	for _, fr := range captures(t) {
		if _, err := wire.Parse(fr); err == nil {
			roceFrames = append(roceFrames, fr)
		}
	}
	for _, fr := range roceFrames {
		if err := parser.DecodeLayers(fr, &decoded); err != nil {
			t.Fatalf("DecodeLayers: %v (decoded %v)", err, decoded)
		}
		if decoded[len(decoded)-1] != gopacket.LayerTypePayload && decoded[len(decoded)-1] != LayerTypeRoCE {
			t.Fatalf("decoded %v", decoded)
		}
	}
	fr := roceFrames[len(roceFrames)/2]
	allocs := testing.AllocsPerRun(100, func() {
		if err := parser.DecodeLayers(fr, &decoded); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("DecodeLayers: %v allocations per run, want 0", allocs)
	}
	// A bad opcode fails without allocating, with a wire error.
	bad := bytes.Clone(fr)
	var p wire.Packet
	_ = p.Decode(bad)
	bad[p.BTHOffset()] = 0x15
	err := parser.DecodeLayers(bad, &decoded)
	if !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("bad opcode: %v", err)
	}
	if a := testing.AllocsPerRun(50, func() { _ = parser.DecodeLayers(bad, &decoded) }); a != 0 {
		t.Fatalf("DecodeLayers on a bad frame: %v allocations", a)
	}
}

// TestSerializeRoundTrip serializes Ethernet/IPv4|IPv6/UDP/RoCE/Payload
// with gopacket, seals the ICRC, and compares with wire.Build of the same
// fields (the UDP checksum, which the ICRC masks and rxe sets to 0, is
// left to gopacket).
func TestSerializeRoundTrip(t *testing.T) {
	ops := []wire.Opcode{wire.RCSendOnly, wire.RCRDMAWriteOnlyWithImmediate, wire.RCAtomicAcknowledge,
		wire.UDSendOnlyWithImmediate, wire.RCFlush, wire.CNP, wire.Opcode(wire.TransportXRC) | wire.RCCompareSwap}
	for _, v6 := range []bool{false, true} {
		for _, op := range ops {
			t.Run(op.String(), func(t *testing.T) {
				f := &wire.Frame{
					DstMAC: [6]byte{2, 0, 0, 0, 0, 1}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 2},
					Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1"),
					HopLimit: 64, IPID: 7, SrcPort: 0xc001,
					BTH:          wire.BTHFields{Opcode: op, PKey: 0xffff, DestQP: 0x42, AckReq: true, PSN: 100},
					RETH:         wire.RETHFields{VA: 0x1000, RKey: 0x77, DMALen: 3},
					FETH:         wire.FETHFields{Placement: 1},
					DETH:         wire.DETHFields{QKey: 0x11111111, SrcQP: 3},
					AETH:         wire.AETHFields{Syndrome: wire.SyndromeACKUnlimited, MSN: 9},
					AtomicAckETH: wire.AtomicAckETHFields{OrigData: 5},
					AtomicETH:    wire.AtomicETHFields{VA: 0x2000, RKey: 1, SwapAdd: 2, Compare: 3},
					XRCETH:       wire.XRCETHFields{SRQ: 4},
					ImmDt:        wire.ImmDtFields{Imm: 0x01020304},
				}
				if v6 {
					f.Src, f.Dst = netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::1")
				}
				if op.HasPayload() {
					f.Payload = []byte("abc")
				}
				want := make([]byte, f.Len())
				if _, err := wire.Build(want, f); err != nil {
					t.Fatal(err)
				}

				eth := &layers.Ethernet{DstMAC: net.HardwareAddr(f.DstMAC[:]), SrcMAC: net.HardwareAddr(f.SrcMAC[:])}
				udp := &layers.UDP{SrcPort: layers.UDPPort(f.SrcPort), DstPort: ib.RoCEv2UDPPort}
				var ip gopacket.SerializableLayer
				if v6 {
					eth.EthernetType = layers.EthernetTypeIPv6
					ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
						SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice()}
					_ = udp.SetNetworkLayerForChecksum(ip6)
					ip = ip6
				} else {
					eth.EthernetType = layers.EthernetTypeIPv4
					ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 7, Flags: layers.IPv4DontFragment,
						Protocol: layers.IPProtocolUDP, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice()}
					_ = udp.SetNetworkLayerForChecksum(ip4)
					ip = ip4
				}
				r := &RoCE{}
				r.fromFrame(f)
				buf := gopacket.NewSerializeBuffer()
				err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
					eth, ip, udp, r, gopacket.Payload(f.Payload))
				if err != nil {
					t.Fatal(err)
				}
				got := buf.Bytes()
				if err := SealICRC(got); err != nil {
					t.Fatal(err)
				}
				udpOff := wire.EthernetSize + wire.IPv4Size
				if v6 {
					udpOff = wire.EthernetSize + wire.IPv6Size
				}
				got[udpOff+6], got[udpOff+7] = 0, 0 // rxe's UDP checksum
				if !bytes.Equal(got, want) {
					t.Fatalf("gopacket serialized\n% x\nwire.Build\n% x", got, want)
				}
				if r.String() == "" {
					t.Fatal("empty String")
				}
			})
		}
	}
	r := &RoCE{BTH: wire.BTHFields{Opcode: 0x15}}
	if err := gopacket.SerializeLayers(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{}, r); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("unknown opcode: %v", err)
	}
	r = &RoCE{BTH: wire.BTHFields{Opcode: wire.RCSendOnly}, Pad: 4}
	if err := gopacket.SerializeLayers(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{}, r); err == nil {
		t.Fatal("pad 4 accepted")
	}
	if err := SealICRC([]byte{1, 2, 3}); err == nil {
		t.Fatal("SealICRC of garbage succeeded")
	}
}

// TestNewPacketErrors: a truncated RoCE datagram becomes an error layer.
func TestNewPacketErrors(t *testing.T) {
	f := &wire.Frame{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1"),
		BTH: wire.BTHFields{Opcode: wire.RCAcknowledge}}
	b := make([]byte, f.Len())
	if _, err := wire.Build(b, f); err != nil {
		t.Fatal(err)
	}
	b[wire.EthernetSize+wire.IPv4Size+wire.UDPSize] = byte(wire.RCCompareSwap) // needs 40 header bytes
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	el := pkt.ErrorLayer()
	if el == nil || !errors.Is(el.Error(), wire.ErrTruncated) {
		t.Fatalf("error layer %v", el)
	}
	if pkt.Metadata().Truncated != true {
		t.Fatal("not marked truncated")
	}
	if err := VerifyICRC(gopacket.NewPacket([]byte{0}, layers.LayerTypeEthernet, gopacket.Default)); !errors.Is(err, wire.ErrNotRoCE) {
		t.Fatalf("VerifyICRC without IP: %v", err)
	}
}
