package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/softroce/softroce/ib"
	"github.com/softroce/softroce/internal/testenv"
)

var (
	macA = [6]byte{0x52, 0x54, 0x00, 0x4d, 0x00, 0x0b}
	macB = [6]byte{0x52, 0x54, 0x00, 0x4d, 0x00, 0x0c}
	v4A  = netip.MustParseAddr("10.77.0.11")
	v4B  = netip.MustParseAddr("10.77.0.12")
	v6A  = netip.MustParseAddr("fd77::11")
	v6B  = netip.MustParseAddr("fd77::12")
)

// sampleOpcodes has one opcode for every header combination and family.
var sampleOpcodes = []Opcode{
	RCSendFirst, RCSendMiddle, RCSendLastWithImmediate, RCSendOnly, RCRDMAWriteFirst,
	RCRDMAWriteOnlyWithImmediate, RCRDMAReadRequest, RCRDMAReadResponseFirst, RCRDMAReadResponseMiddle,
	RCAcknowledge, RCAtomicAcknowledge, RCCompareSwap, RCFetchAdd, RCSendOnlyWithInvalidate,
	RCFlush, RCAtomicWrite, UCSendOnlyWithImmediate, UCRDMAWriteOnly,
	UDSendOnly, UDSendOnlyWithImmediate, CNP,
	Opcode(TransportRD) | RCRDMAWriteOnlyWithImmediate, Opcode(TransportRD) | RCAtomicAcknowledge,
	Opcode(TransportXRC) | RCSendOnly, Opcode(TransportXRC) | RCCompareSwap, Opcode(TransportXRC) | RCAcknowledge,
}

// sampleFrame returns a frame for op with every header field set to a
// distinctive value and a payload of n bytes.
func sampleFrame(op Opcode, v6, vlan bool, n int) *Frame {
	f := &Frame{
		DstMAC: macA, SrcMAC: macB, VLAN: vlan, VLANTCI: 0x2064,
		Src: v4B, Dst: v4A, TrafficClass: 0x8a, HopLimit: 64, IPID: 0x1234,
		SrcPort: 0xc121,
		BTH: BTHFields{Opcode: op, SE: true, PKey: 0xffff, DestQP: 0x000011, AckReq: op.IsRequest(),
			PSN: 0xabcdef},
		RDETH:        RDETHFields{EEC: 0x0a0b0c},
		DETH:         DETHFields{QKey: 0x80010000, SrcQP: 0x000012},
		XRCETH:       XRCETHFields{SRQ: 0x000042},
		FETH:         FETHFields{Selectivity: 1, Placement: 2},
		RETH:         RETHFields{VA: 0x00007f0012345000, RKey: 0x1234abcd, DMALen: 4096},
		AtomicETH:    AtomicETHFields{VA: 0x7f0000001000, RKey: 0x4321, SwapAdd: 1, Compare: 2},
		AETH:         AETHFields{Syndrome: SyndromeACKUnlimited, MSN: 7},
		AtomicAckETH: AtomicAckETHFields{OrigData: 0x1122334455667788},
		ImmDt:        ImmDtFields{Imm: 0xdeadbeef},
		IETH:         IETHFields{RKey: 0x5566},
	}
	if v6 {
		f.Src, f.Dst, f.FlowLabel = v6B, v6A, 0x12345
	}
	if op.HasPayload() {
		f.Payload = make([]byte, n)
		for i := range f.Payload {
			f.Payload[i] = byte(i*7 + 1)
		}
	}
	return f
}

// sampleFrames returns sampleFrame for every sample opcode over IPv4 and
// IPv6, a few with a VLAN tag, and payload lengths covering every pad.
func sampleFrames() []*Frame {
	var fs []*Frame
	for i, op := range sampleOpcodes {
		fs = append(fs, sampleFrame(op, false, i%5 == 0, 61+i), sampleFrame(op, true, i%7 == 0, 13+i))
	}
	return fs
}

// TestBuildParseRoundTrip builds every sample frame, parses it and checks
// each field comes back, then rebuilds it from the parsed fields.
// frameName names a sample frame's subtest: opcode, address family, tag.
func frameName(f *Frame) string {
	name := f.BTH.Opcode.String()
	if f.Src.Is6() {
		name += "/ipv6"
	}
	if f.VLAN {
		name += "/vlan"
	}
	return name
}

func TestBuildParseRoundTrip(t *testing.T) {
	for _, f := range sampleFrames() {
		t.Run(frameName(f), func(t *testing.T) {
			buf := make([]byte, 9000)
			n, err := Build(buf, f)
			if err != nil {
				t.Fatal(err)
			}
			if n != f.Len() {
				t.Fatalf("Build wrote %d bytes, Len() = %d", n, f.Len())
			}
			var p Packet
			if err := p.Decode(buf[:n]); err != nil {
				t.Fatal(err)
			}
			if err := p.VerifyICRC(); err != nil {
				t.Fatal(err)
			}
			var g Frame
			p.Fields(&g)
			want := *f
			want.BTH.PadCnt = uint8(padLen(len(f.Payload)))
			if !f.Src.Is6() {
				want.FlowLabel = 0
			} else {
				want.IPID = 0
			}
			if !f.VLAN {
				want.VLANTCI = 0
			}
			if !bytes.Equal(g.Payload, want.Payload) {
				t.Fatalf("payload % x, want % x", g.Payload, want.Payload)
			}
			h := f.BTH.Opcode.Headers()
			clearAbsent(&want, h)
			g.Payload, want.Payload = nil, nil
			if !reflect.DeepEqual(g, want) {
				t.Fatalf("parsed fields\n got %+v\nwant %+v", g, want)
			}
			if len(p.Pad()) != padLen(len(f.Payload)) || !bytes.Equal(p.Pad(), make([]byte, len(p.Pad()))) {
				t.Fatalf("pad % x", p.Pad())
			}
			buf2 := make([]byte, n)
			if _, err := Build(buf2, &g); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// clearAbsent zeroes the header fields of f that headers h does not carry
// (what Packet.Fields leaves zero).
func clearAbsent(f *Frame, h Headers) {
	if !h.Has(HdrRDETH) {
		f.RDETH = RDETHFields{}
	}
	if !h.Has(HdrDETH) {
		f.DETH = DETHFields{}
	}
	if !h.Has(HdrXRCETH) {
		f.XRCETH = XRCETHFields{}
	}
	if !h.Has(HdrFETH) {
		f.FETH = FETHFields{}
	}
	if !h.Has(HdrRETH) {
		f.RETH = RETHFields{}
	}
	if !h.Has(HdrAtomicETH) {
		f.AtomicETH = AtomicETHFields{}
	}
	if !h.Has(HdrAETH) {
		f.AETH = AETHFields{}
	}
	if !h.Has(HdrAtomicAckETH) {
		f.AtomicAckETH = AtomicAckETHFields{}
	}
	if !h.Has(HdrImmDt) {
		f.ImmDt = ImmDtFields{}
	}
	if !h.Has(HdrIETH) {
		f.IETH = IETHFields{}
	}
}

// TestBuildOuterHeadersGopacket decodes built frames and the captures with
// gopacket's Ethernet, Dot1Q, IPv4, IPv6 and UDP decoders and compares
// every outer field with what Parse reports (a differential check).
func TestBuildOuterHeadersGopacket(t *testing.T) {
	var frames [][]byte
	for _, f := range sampleFrames() {
		buf := make([]byte, f.Len())
		if _, err := Build(buf, f); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, buf)
	}
	captured, _ := roceFrames(t)
	frames = append(frames, captured...)
	for i, fr := range frames {
		var p Packet
		if err := p.Decode(fr); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		pkt := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
		if el := pkt.ErrorLayer(); el != nil {
			t.Fatalf("frame %d: gopacket: %v", i, el.Error())
		}
		eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if dst, src := p.EthDst(), p.EthSrc(); !bytes.Equal(eth.DstMAC, dst[:]) || !bytes.Equal(eth.SrcMAC, src[:]) {
			t.Fatalf("frame %d: MACs differ", i)
		}
		if q, ok := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); ok != p.HasVLAN() ||
			ok && (uint16(q.Priority)<<13|uint16(q.VLANIdentifier)|boolBit(q.DropEligible)<<12) != p.VLANTCI() {
			t.Fatalf("frame %d: VLAN differs", i)
		}
		if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			if p.IsIPv6() || ip4.TOS != p.TrafficClass() || ip4.TTL != p.HopLimit() || ip4.Id != p.IPID() ||
				ip4.Flags != layers.IPv4DontFragment || ip4.Protocol != layers.IPProtocolUDP ||
				netip.AddrFrom4([4]byte(ip4.SrcIP.To4())) != p.Src() || netip.AddrFrom4([4]byte(ip4.DstIP.To4())) != p.Dst() ||
				int(ip4.Length) != p.Len()-p.L3Offset() {
				t.Fatalf("frame %d: IPv4 differs: %+v", i, ip4)
			}
			// gopacket recomputes the checksum when serializing: compare.
			sb := gopacket.NewSerializeBuffer()
			c := *ip4
			if err := c.SerializeTo(sb, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
				t.Fatal(err)
			}
			if binary.BigEndian.Uint16(sb.Bytes()[10:]) != ip4.Checksum {
				t.Fatalf("frame %d: IPv4 checksum %#x, gopacket computes %#x", i, ip4.Checksum, binary.BigEndian.Uint16(sb.Bytes()[10:]))
			}
		} else if ip6, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			if !p.IsIPv6() || ip6.TrafficClass != p.TrafficClass() || ip6.HopLimit != p.HopLimit() ||
				ip6.FlowLabel != p.FlowLabel() || ip6.NextHeader != layers.IPProtocolUDP ||
				netip.AddrFrom16([16]byte(ip6.SrcIP)) != p.Src() || netip.AddrFrom16([16]byte(ip6.DstIP)) != p.Dst() ||
				int(ip6.Length) != p.Len()-p.UDPOffset() {
				t.Fatalf("frame %d: IPv6 differs: %+v", i, ip6)
			}
		} else {
			t.Fatalf("frame %d: gopacket found no IP layer", i)
		}
		udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if uint16(udp.SrcPort) != p.UDPSrcPort() || udp.DstPort != ib.RoCEv2UDPPort || udp.Checksum != 0 ||
			int(udp.Length) != p.Len()-p.UDPOffset() || !bytes.Equal(udp.Payload, p.UDPPayload()) {
			t.Fatalf("frame %d: UDP differs: %+v", i, udp)
		}
	}
}

func boolBit(b bool) uint16 {
	if b {
		return 1
	}
	return 0
}

func TestBuildErrors(t *testing.T) {
	ok := sampleFrame(RCSendOnly, false, false, 10)
	tests := []struct {
		name string
		mut  func(*Frame)
		buf  int
		want error
	}{
		{"unknown opcode", func(f *Frame) { f.BTH.Opcode = 0x15 }, 256, ErrMalformed},
		{"mixed families", func(f *Frame) { f.Dst = v6A }, 256, ErrMalformed},
		{"no addresses", func(f *Frame) { f.Src, f.Dst = netip.Addr{}, netip.Addr{} }, 256, ErrMalformed},
		{"short buffer", func(*Frame) {}, ok.Len() - 1, ErrShortBuffer},
		{"datagram too large", func(f *Frame) { f.Payload = make([]byte, 70000) }, 80000, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := *ok
			tt.mut(&f)
			if _, err := Build(make([]byte, tt.buf), &f); !errors.Is(err, tt.want) {
				t.Fatalf("Build = %v, want %v", err, tt.want)
			}
		})
	}
	if n := (&Frame{BTH: BTHFields{Opcode: 0xff}}).Len(); n != 0 {
		t.Errorf("Len of unknown opcode = %d", n)
	}
}

// TestBuildDetails checks the fields Build fills in: PadCnt, zero pad,
// IPv4-mapped sources count as IPv4, SrcPort 0 comes from the flow label.
func TestBuildDetails(t *testing.T) {
	f := sampleFrame(RCSendOnly, true, false, 5)
	f.SrcPort = 0
	f.BTH.PadCnt = 0 // ignored
	buf := bytes.Repeat([]byte{0xee}, 512)
	n, err := Build(buf, f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.UDPSrcPort(), FlowLabelToUDPSport(0x12345); got != want || got != 0xe341 {
		t.Errorf("source port %#x, want %#x", got, want)
	}
	if p.BTH().PadCnt() != 3 || !bytes.Equal(p.Pad(), []byte{0, 0, 0}) {
		t.Errorf("PadCnt %d pad % x", p.BTH().PadCnt(), p.Pad())
	}
	if buf[n] != 0xee {
		t.Error("Build wrote past the frame")
	}
	m := sampleFrame(RCAcknowledge, false, false, 0)
	m.Src = netip.AddrFrom16(v4B.As16()) // ::ffff:10.77.0.12
	n, err = Build(buf, m)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Parse(buf[:n]); err != nil || p.IsIPv6() || p.Src() != v4B {
		t.Errorf("IPv4-mapped source: %v ipv6=%v src=%v", err, p.IsIPv6(), p.Src())
	}
}

// TestBuildPayloadInPlace checks PayloadOffset against Parse for every
// sample frame, and that a payload already at that offset in the buffer
// builds the same frame as a payload elsewhere.
func TestBuildPayloadInPlace(t *testing.T) {
	for _, f := range sampleFrames() {
		t.Run(frameName(f), func(t *testing.T) {
			want := make([]byte, 9000)
			n, err := Build(want, f)
			if err != nil {
				t.Fatal(err)
			}
			var p Packet
			if err := p.Decode(want[:n]); err != nil {
				t.Fatal(err)
			}
			off := f.PayloadOffset()
			if got := len(want[:n]) - len(p.Payload()) - padLen(len(f.Payload)) - ICRCSize; f.BTH.Opcode.HasPayload() && off != got {
				t.Fatalf("PayloadOffset = %d, the parsed payload starts at %d", off, got)
			}
			if len(f.Payload) == 0 {
				return
			}
			buf := make([]byte, 9000)
			for i := range buf {
				buf[i] = 0xee // stale bytes everywhere but the payload
			}
			g := *f
			g.Payload = buf[off : off+copy(buf[off:], f.Payload)]
			m, err := Build(buf, &g)
			if err != nil || m != n || !bytes.Equal(buf[:m], want[:n]) {
				t.Fatalf("in-place build = %d, %v; differs from the copying build", m, err)
			}
		})
	}
	if f := (Frame{BTH: BTHFields{Opcode: 0x1f}}); f.BTH.Opcode.HeaderLen() != 0 || f.PayloadOffset() != 0 {
		t.Error("PayloadOffset of a frame with an unknown opcode is not 0")
	}
}

// TestBuildIPv4ChecksumAnyFields checks the IPv4 header checksum Build
// computes from the field values against RFC 1071's sum over the header
// bytes it wrote, for random traffic classes, TTLs, identifications,
// addresses and lengths (the carries the fold must take included).
func TestBuildIPv4ChecksumAnyFields(t *testing.T) {
	rng := testenv.Rand(t)
	buf := make([]byte, 9000)
	ops := []Opcode{RCRDMAWriteFirst, RCRDMAWriteLast, RCAcknowledge, UDSendOnly, RCSendOnlyWithImmediate}
	for i := range 5000 {
		f := sampleFrame(ops[i%len(ops)], false, i%3 == 0, rng.IntN(4097))
		f.TrafficClass, f.HopLimit, f.IPID = uint8(rng.Uint32()), uint8(rng.Uint32()), uint16(rng.Uint32())
		if i%4 == 0 {
			f.TrafficClass, f.HopLimit, f.IPID = 0xff, 0xff, 0xffff
		}
		var s, d [4]byte
		binary.BigEndian.PutUint32(s[:], rng.Uint32())
		binary.BigEndian.PutUint32(d[:], rng.Uint32())
		f.Src, f.Dst = netip.AddrFrom4(s), netip.AddrFrom4(d)
		n, err := Build(buf, f)
		if err != nil {
			t.Fatal(err)
		}
		l3 := EthernetSize
		if f.VLAN {
			l3 += VLANTagSize
		}
		h := append([]byte(nil), buf[l3:l3+IPv4Size]...)
		got := binary.BigEndian.Uint16(h[10:])
		h[10], h[11] = 0, 0
		if want := ipv4Checksum(h); got != want {
			t.Fatalf("frame %d (%d bytes, header % x): checksum %#04x, want %#04x", i, n, h, got, want)
		}
	}
}

// TestBuildNextEqualsBuild builds random frames, then the next one with
// BuildNext (a new IPv4 identification, PSN and AckReq bit, a new
// payload gathered into the buffer first) and checks it equals what Build
// writes for the changed fields, byte for byte, with and without the ICRC.
// It fails if BuildNext leaves a field, the IPv4 checksum or the ICRC as
// prev had it.
func TestBuildNextEqualsBuild(t *testing.T) {
	rng := testenv.Rand(t)
	prev, got, want := make([]byte, 9000), make([]byte, 9000), make([]byte, 9000)
	ops := []Opcode{RCSendMiddle, RCRDMAWriteMiddle, UCSendMiddle, UCRDMAWriteMiddle, RCRDMAWriteFirst, RCSendLastWithImmediate}
	for i := range 4000 {
		f := sampleFrame(ops[i%len(ops)], i%2 == 1, i%3 == 0, rng.IntN(4097))
		f.TrafficClass, f.HopLimit, f.IPID = uint8(rng.Uint32()), uint8(rng.Uint32()), uint16(rng.Uint32())
		f.BTH.PSN, f.BTH.AckReq, f.BTH.SE = rng.Uint32()&0xffffff, rng.IntN(2) == 0, rng.IntN(2) == 0
		if i%5 == 0 {
			f.IPID = 0xffff
		}
		noICRC := i%4 == 0
		f.NoICRC = noICRC
		n, err := Build(prev, f)
		if err != nil {
			t.Fatal(err)
		}
		g := *f
		g.IPID, g.BTH.PSN, g.BTH.AckReq = uint16(rng.Uint32()), rng.Uint32()&0xffffff, rng.IntN(2) == 0
		if i%7 == 0 {
			g.IPID = f.IPID + 1
		}
		g.Payload = make([]byte, len(f.Payload))
		for j := range g.Payload {
			g.Payload[j] = byte(rng.Uint32())
		}
		if _, err := Build(want, &g); err != nil {
			t.Fatal(err)
		}
		for j := range got {
			got[j] = 0xa5 // stale bytes of an earlier frame
		}
		copy(got[g.PayloadOffset():], g.Payload)
		m, err := BuildNext(got, prev[:n], g.IPID, g.BTH.PSN, g.BTH.AckReq, noICRC)
		if err != nil || m != n {
			t.Fatalf("frame %d: BuildNext = %d, %v; want %d", i, m, err, n)
		}
		if !bytes.Equal(got[:n], want[:n]) {
			t.Fatalf("frame %d (%s, %d bytes, noICRC %v):\n got % x\nwant % x", i, frameName(f), n, noICRC, got[:n], want[:n])
		}
	}
}

// TestBuildNextErrors checks BuildNext refuses a short buffer and
// frames that are not RoCEv2 or too short for their headers, without
// panicking.
func TestBuildNextErrors(t *testing.T) {
	buf := make([]byte, 9000)
	n, err := Build(buf, sampleFrame(RCRDMAWriteMiddle, false, false, 64))
	if err != nil {
		t.Fatal(err)
	}
	frame := append([]byte(nil), buf[:n]...)
	if _, err := BuildNext(make([]byte, n-1), frame, 1, 1, false, false); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short buffer: %v, want ErrShortBuffer", err)
	}
	arp := append([]byte(nil), frame...)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	badOp := append([]byte(nil), frame...)
	badOp[EthernetSize+IPv4Size+UDPSize] = 0xff
	for name, b := range map[string][]byte{
		"empty": nil, "ethernet only": frame[:EthernetSize], "not IP": arp,
		"no ICRC room": frame[:EthernetSize+IPv4Size+UDPSize+BTHSize], "unknown opcode": badOp,
	} {
		if _, err := BuildNext(buf, b, 1, 1, false, false); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestNextFramesFollowOneFrame: one Reset, then frame after frame with
// new identifications, PSNs, AckReq bits and payloads, each equal to
// Build's; the zero NextFrames builds nothing.
func TestNextFramesFollowOneFrame(t *testing.T) {
	rng := testenv.Rand(t)
	prev, got, want := make([]byte, 9000), make([]byte, 9000), make([]byte, 9000)
	var nf NextFrames
	if _, err := nf.Build(got, 1, 1, false, false); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zero NextFrames: %v, want ErrMalformed", err)
	}
	for i, v6 := range []bool{false, true, false, true} {
		f := sampleFrame(RCRDMAWriteMiddle, v6, i >= 2, 4096)
		f.NoICRC = i%2 == 0
		n, err := Build(prev, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := nf.Reset(prev[:n]); err != nil {
			t.Fatal(err)
		}
		for k := range 50 {
			g := *f
			g.IPID, g.BTH.PSN, g.BTH.AckReq = uint16(rng.Uint32()), (f.BTH.PSN+uint32(k)+1)&0xffffff, k%7 == 0
			g.Payload = make([]byte, len(f.Payload))
			for j := range g.Payload {
				g.Payload[j] = byte(rng.Uint32())
			}
			if _, err := Build(want, &g); err != nil {
				t.Fatal(err)
			}
			copy(got[g.PayloadOffset():], g.Payload)
			if m, err := nf.Build(got, g.IPID, g.BTH.PSN, g.BTH.AckReq, g.NoICRC); err != nil || m != n || !bytes.Equal(got[:n], want[:n]) {
				t.Fatalf("frame %d after %s: %d, %v; differs from Build's", k, frameName(f), m, err)
			}
		}
	}
}
