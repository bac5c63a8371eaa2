package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// frameOf builds f into a fresh buffer.
func frameOf(t testing.TB, f *Frame) []byte {
	t.Helper()
	b := make([]byte, f.Len())
	if _, err := Build(b, f); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseMutations mutates one field of a valid frame (wireguard-go's
// udp4PacketMutateIPFields style) and checks the verdict: the sentinel,
// the layer and the offset of a parse error, or, when the frame still
// parses, whether the ICRC still verifies.
func TestParseMutations(t *testing.T) {
	const (
		l3  = EthernetSize
		l4  = l3 + IPv4Size
		bth = l4 + UDPSize
	)
	v4 := func() []byte { return frameOf(t, sampleFrame(RCRDMAWriteFirst, false, false, 20)) }
	v6 := func() []byte { return frameOf(t, sampleFrame(RCSendOnly, true, false, 20)) }
	vlan := func() []byte { return frameOf(t, sampleFrame(UDSendOnly, false, true, 20)) }
	put16 := func(off int, v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint16(b[off:], v); return b }
	}
	set := func(off int, v byte) func([]byte) []byte {
		return func(b []byte) []byte { b[off] = v; return b }
	}
	xor := func(off int, v byte) func([]byte) []byte {
		return func(b []byte) []byte { b[off] ^= v; return b }
	}
	fixed := func(b []byte) func() []byte { return func() []byte { return bytes.Clone(b) } }
	cut := func(n int) func([]byte) []byte { return func(b []byte) []byte { return b[:n] } }
	tests := []struct {
		name    string
		base    func() []byte
		mut     func([]byte) []byte
		want    error // parse error sentinel, or nil
		layer   Layer
		offset  int
		icrcOK  bool // when want == nil: does the ICRC still verify?
		payload int  // when want == nil and >= 0: expected payload length
	}{
		{"valid", v4, func(b []byte) []byte { return b }, nil, 0, 0, true, 20},
		{"valid ipv6", v6, func(b []byte) []byte { return b }, nil, 0, 0, true, 20},
		{"valid vlan", vlan, func(b []byte) []byte { return b }, nil, 0, 0, true, 20},
		{"empty", v4, cut(0), ErrTruncated, LayerEthernet, 0, false, 0},
		{"short ethernet", v4, cut(13), ErrTruncated, LayerEthernet, 0, false, 0},
		{"arp", v4, put16(12, 0x0806), ErrNotRoCE, LayerEthernet, 12, false, 0},
		{"short vlan", vlan, cut(17), ErrTruncated, LayerVLAN, 12, false, 0},
		{"stacked vlan", vlan, put16(16, EtherTypeVLAN), ErrUnsupported, LayerVLAN, 16, false, 0},
		{"qinq", v4, put16(12, EtherTypeQinQ), ErrUnsupported, LayerVLAN, 12, false, 0},
		{"vlan inner arp", vlan, put16(16, 0x0806), ErrNotRoCE, LayerEthernet, 16, false, 0},
		{"short ipv4", v4, cut(l3 + 19), ErrTruncated, LayerIPv4, l3, false, 0},
		{"ipv4 version 6", v4, set(l3, 0x65), ErrMalformed, LayerIPv4, l3, false, 0},
		{"ipv4 ihl 4", v4, set(l3, 0x44), ErrMalformed, LayerIPv4, l3, false, 0},
		{"ipv4 options", v4, set(l3, 0x46), ErrUnsupported, LayerIPv4, l3, false, 0},
		{"ipv4 total length 19", v4, put16(l3+2, 19), ErrMalformed, LayerIPv4, l3 + 2, false, 0},
		{"ipv4 total length past frame", v4, put16(l3+2, 0xffff), ErrTruncated, LayerIPv4, l3 + 2, false, 0},
		{"ipv4 frame cut", v4, cut(l3 + 40), ErrTruncated, LayerIPv4, l3 + 2, false, 0},
		{"ipv4 MF", v4, put16(l3+6, 0x2000), ErrUnsupported, LayerIPv4, l3 + 6, false, 0},
		{"ipv4 fragment offset", v4, put16(l3+6, 0x4001), ErrUnsupported, LayerIPv4, l3 + 6, false, 0},
		{"ipv4 tcp", v4, set(l3+9, 6), ErrNotRoCE, LayerIPv4, l3 + 9, false, 0},
		{"ipv4 DF cleared", v4, put16(l3+6, 0), nil, 0, 0, false, 20},
		{"ipv4 TTL", v4, set(l3+8, 1), nil, 0, 0, true, 20},
		{"ipv4 TOS", v4, set(l3+1, 0xff), nil, 0, 0, true, 20},
		{"ipv4 checksum", v4, put16(l3+10, 0), nil, 0, 0, true, 20},
		{"ipv4 id", v4, xor(l3+5, 1), nil, 0, 0, false, 20},
		{"ipv4 source", v4, xor(l3+15, 1), nil, 0, 0, false, 20},
		{"ipv4 short for UDP", v4, put16(l3+2, IPv4Size+7), ErrTruncated, LayerUDP, l4, false, 0},
		{"ipv6 version", v6, set(l3, 0x40), ErrMalformed, LayerIPv6, l3, false, 0},
		{"short ipv6", v6, cut(l3 + 39), ErrTruncated, LayerIPv6, l3, false, 0},
		{"ipv6 payload length past frame", v6, put16(l3+4, 0xffff), ErrTruncated, LayerIPv6, l3 + 4, false, 0},
		{"ipv6 icmpv6", v6, set(l3+6, 58), ErrNotRoCE, LayerIPv6, l3 + 6, false, 0},
		{"ipv6 hop-by-hop", v6, set(l3+6, 0), ErrNotRoCE, LayerIPv6, l3 + 6, false, 0},
		{"ipv6 flow label", v6, xor(l3+3, 0x55), nil, 0, 0, true, 20},
		{"ipv6 traffic class", v6, xor(l3, 0x0f), nil, 0, 0, true, 20},
		{"ipv6 hop limit", v6, set(l3+7, 255), nil, 0, 0, true, 20},
		{"ipv6 destination", v6, xor(l3+39, 1), nil, 0, 0, false, 20},
		{"udp other port", v4, put16(l4+2, 4792), ErrNotRoCE, LayerUDP, l4 + 2, false, 0},
		{"udp length 7", v4, put16(l4+4, 7), ErrMalformed, LayerUDP, l4 + 4, false, 0},
		{"udp length past ip", v4, put16(l4+4, 0xfff0), ErrMalformed, LayerUDP, l4 + 4, false, 0},
		{"udp length no bth", v4, put16(l4+4, UDPSize+BTHSize-1), ErrTruncated, LayerBTH, bth, false, 0},
		{"udp checksum", v4, put16(l4+6, 0x1234), nil, 0, 0, true, 20},
		{"udp source port", v4, xor(l4+1, 1), nil, 0, 0, false, 20},
		{"udp length shorter than ip (trimmed)", v4, put16(l4+4, UDPSize+28+16+4), nil, 0, 0, false, 16},
		{"unknown opcode 0x15", v4, set(bth, 0x15), ErrMalformed, LayerBTH, bth, false, 0},
		{"unknown opcode 0xff", v4, set(bth, 0xff), ErrMalformed, LayerBTH, bth, false, 0},
		{"opcode needs more headers", fixed(frameOf(t, sampleFrame(RCAcknowledge, false, false, 0))),
			set(bth, uint8(RCCompareSwap)), ErrTruncated, LayerExtHeaders, bth + BTHSize, false, 0},
		{"pad count beyond payload", fixed(frameOf(t, sampleFrame(RCAcknowledge, false, false, 0))),
			set(bth+1, 0x30), ErrMalformed, LayerPayload, bth + 16, false, 0},
		{"opcode changed to one with fewer headers", v4, set(bth, uint8(RCRDMAWriteMiddle)), nil, 0, 0, false, 36},
		{"pad count changed", v4, set(bth+1, 0x90), nil, 0, 0, false, 19},
		{"FECN and BECN", v4, xor(bth+4, 0xc0), nil, 0, 0, true, 20},
		{"resv6", v4, xor(bth+4, 0x3f), nil, 0, 0, true, 20},
		{"TVer 1 (parses; rxe drops later)", v4, xor(bth+1, 1), nil, 0, 0, false, 20},
		{"AckReq", v4, xor(bth+8, 0x80), nil, 0, 0, false, 20},
		{"resv7", v4, xor(bth+8, 0x01), nil, 0, 0, false, 20},
		{"PSN", v4, xor(bth+11, 1), nil, 0, 0, false, 20},
		{"P_Key", v4, xor(bth+2, 0x80), nil, 0, 0, false, 20},
		{"RETH R_Key", v4, xor(bth+BTHSize+8, 1), nil, 0, 0, false, 20},
		{"payload bit", v4, xor(bth+BTHSize+RETHSize+3, 0x10), nil, 0, 0, false, 20},
		{"ICRC bit", v4, func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, nil, 0, 0, false, 20},
		{"ethernet padding after frame", v4, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }, nil, 0, 0, true, 20},
		{"ethernet source", v4, xor(6, 0xff), nil, 0, 0, true, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr := tt.mut(tt.base())
			var p Packet
			err := p.Decode(fr)
			if tt.want != nil {
				var pe *ParseError
				if !errors.As(err, &pe) || !errors.Is(err, tt.want) {
					t.Fatalf("Decode = %v, want a *ParseError wrapping %v", err, tt.want)
				}
				if pe.Layer != tt.layer || pe.Offset != tt.offset {
					t.Fatalf("error at %v offset %d, want %v offset %d (%v)", pe.Layer, pe.Offset, tt.layer, tt.offset, err)
				}
				if !strings.HasPrefix(err.Error(), "wire: "+tt.layer.String()+" at offset ") {
					t.Fatalf("message %q", err.Error())
				}
				if _, err2 := Parse(fr); err2 == nil || err2.Error() != err.Error() {
					t.Fatalf("Parse = %v, Decode = %v", err2, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode = %v", err)
			}
			if got := p.PayloadLen(); got != tt.payload {
				t.Errorf("payload length %d, want %d", got, tt.payload)
			}
			if err := p.VerifyICRC(); (err == nil) != tt.icrcOK {
				t.Errorf("VerifyICRC = %v, want ok=%v", err, tt.icrcOK)
			} else if err != nil && !errors.Is(err, ErrBadICRC) {
				t.Errorf("VerifyICRC = %v, want ErrBadICRC", err)
			}
		})
	}
}

// TestDecodeTransportAndIP checks the two entry points that skip outer
// layers.
func TestDecodeTransportAndIP(t *testing.T) {
	fr := frameOf(t, sampleFrame(RCRDMAWriteOnlyWithImmediate, true, false, 33))
	var full Packet
	if err := full.Decode(fr); err != nil {
		t.Fatal(err)
	}
	var p Packet
	if err := p.DecodeTransport(full.UDPPayload()); err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != full.Opcode() || !bytes.Equal(p.Payload(), full.Payload()) || p.ImmDt().Imm() != 0xdeadbeef ||
		p.RETH().DMALen() != 4096 || p.BTHOffset() != 0 || p.L3Offset() != -1 {
		t.Fatalf("DecodeTransport disagrees with Decode")
	}
	if err := p.VerifyICRC(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("VerifyICRC without IP = %v", err)
	}
	if p.ComputeICRC() != 0 {
		t.Fatal("ComputeICRC without IP")
	}
	p.SealICRC() // no-op, must not panic
	var q Packet
	if err := q.DecodeIP(fr[EthernetSize:]); err != nil {
		t.Fatal(err)
	}
	if err := q.VerifyICRC(); err != nil || q.Src() != v6B || q.Len() != len(fr)-EthernetSize {
		t.Fatalf("DecodeIP: %v src %v len %d", err, q.Src(), q.Len())
	}
	for _, bad := range [][]byte{nil, {0x50}} {
		if err := q.DecodeIP(bad); err == nil {
			t.Fatalf("DecodeIP(% x) accepted", bad)
		}
	}
	var f Frame
	p.Fields(&f)
	if f.Src.IsValid() || f.BTH.Opcode != RCRDMAWriteOnlyWithImmediate {
		t.Fatalf("Fields after DecodeTransport: %+v", f)
	}
}

// TestPacketSealICRC re-seals after a change through a view.
func TestPacketSealICRC(t *testing.T) {
	fr := frameOf(t, sampleFrame(RCSendOnly, false, false, 8))
	var p Packet
	if err := p.Decode(fr); err != nil {
		t.Fatal(err)
	}
	p.BTH().SetPSN(42)
	if err := p.VerifyICRC(); !errors.Is(err, ErrBadICRC) {
		t.Fatalf("after PSN change: %v", err)
	}
	p.SealICRC()
	if err := VerifyICRC(fr, p.L3Offset()); err != nil {
		t.Fatalf("after SealICRC: %v", err)
	}
}

// TestZeroAllocs guards the data path: Decode (valid and invalid input),
// Build, SealICRC, VerifyICRC and the accessors allocate nothing.
func TestZeroAllocs(t *testing.T) {
	good := frameOf(t, sampleFrame(RCRDMAWriteFirst, false, false, 1024))
	good6 := frameOf(t, sampleFrame(UDSendOnlyWithImmediate, true, true, 4096))
	bad := bytes.Clone(good)
	bad[EthernetSize+IPv4Size+UDPSize] = 0x15
	f := sampleFrame(RCSendOnly, true, false, 4096)
	buf := make([]byte, 9000)
	var p Packet
	var sink int
	for _, tt := range []struct {
		name string
		fn   func()
	}{
		{"Decode", func() {
			if p.Decode(good) != nil {
				panic("decode")
			}
			sink += int(p.BTH().PSN()) + len(p.Payload()) + int(p.RETH().DMALen()) + int(p.Src().As4()[0])
		}},
		{"Decode ipv6 vlan", func() {
			if p.Decode(good6) != nil {
				panic("decode")
			}
			sink += int(p.DETH().QKey()) + int(p.ImmDt().Imm()) + int(p.Dst().As16()[15])
		}},
		{"Decode error", func() {
			if err := p.Decode(bad); err == nil || !errors.Is(err, ErrMalformed) {
				panic("decode error")
			}
		}},
		{"Build", func() {
			n, err := Build(buf, f)
			if err != nil {
				panic(err)
			}
			sink += n
		}},
		{"SealICRC", func() {
			if SealICRC(good, EthernetSize) != nil {
				panic("seal")
			}
		}},
		{"VerifyICRC", func() {
			if VerifyICRC(good, EthernetSize) != nil {
				panic("verify")
			}
		}},
		{"Packet.VerifyICRC", func() {
			_ = p.Decode(good)
			if p.VerifyICRC() != nil {
				panic("verify")
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tt.fn); n != 0 {
				t.Fatalf("%v allocations per run, want 0", n)
			}
		})
	}
	_ = sink
}

// TestSrcDstBytes checks that SrcBytes and DstBytes equal an address's
// AsSlice exactly when Src and Dst equal it, for IPv4 and IPv6 frames and
// addresses of every kind but zoned ones: the frame's own, the other
// end's, IPv4-mapped IPv6, unspecified.
func TestSrcDstBytes(t *testing.T) {
	addrs := []netip.Addr{v4A, v4B, v6A, v6B, netip.AddrFrom16(v4A.As16()), netip.AddrFrom16(v4B.As16()),
		netip.MustParseAddr("10.77.0.13"), netip.MustParseAddr("::ffff:10.77.0.11"),
		netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	buf := make([]byte, 9000)
	built := 0
	for _, src := range addrs {
		for _, dst := range addrs {
			if src.Is4() != dst.Is4() || src.IsUnspecified() || dst.IsUnspecified() {
				continue
			}
			f := sampleFrame(RCRDMAWriteMiddle, src.Is6(), false, 64)
			f.Src, f.Dst = src, dst
			n, err := Build(buf, f)
			if err != nil {
				continue // an IPv4-mapped address with an IPv6 one
			}
			built++
			var p Packet
			if err := p.Decode(buf[:n]); err != nil {
				t.Fatal(err)
			}
			for _, a := range addrs {
				if got, want := bytes.Equal(p.SrcBytes(), a.AsSlice()), p.Src() == a; got != want {
					t.Errorf("frame %v -> %v: SrcBytes % x, %v's % x: equal %v, Src() == %v %v", src, dst, p.SrcBytes(), a, a.AsSlice(), got, a, want)
				}
				if got, want := bytes.Equal(p.DstBytes(), a.AsSlice()), p.Dst() == a; got != want {
					t.Errorf("frame %v -> %v: DstBytes % x, %v's % x: equal %v, Dst() == %v %v", src, dst, p.DstBytes(), a, a.AsSlice(), got, a, want)
				}
			}
		}
	}
	if built < 20 {
		t.Fatalf("%d frames built", built)
	}
}

// TestDecodeFastPathAsGeneral checks that Decode's path for the usual
// frame (untagged IPv4) gives the Packet and the error of the general
// path, every check in order, on the sample frames and on frames whose
// Ethernet, IP and UDP header bytes, lengths and size are mutated at
// random (seeded): a check the fast path skipped would show as a frame it
// accepts and the general path refuses.
func TestDecodeFastPathAsGeneral(t *testing.T) {
	rng := testenv.Rand(t)
	buf := make([]byte, 9000)
	var fast, general Packet
	check := func(what string, b []byte) {
		t.Helper()
		e1, e2 := fast.Decode(b), general.decodeFrame(b)
		if (e1 == nil) != (e2 == nil) || !reflect.DeepEqual(fast, general) {
			t.Fatalf("%s (% x...): Decode %v, %+v; general path %v, %+v", what, b[:min(len(b), 48)], e1, fast, e2, general)
		}
	}
	accepted := 0
	for i, f := range sampleFrames() {
		n, err := Build(buf, f)
		if err != nil {
			t.Fatal(err)
		}
		frame := append([]byte(nil), buf[:n]...)
		check(frameName(f), frame)
		for range 300 {
			m := append([]byte(nil), frame...)
			for range 1 + rng.IntN(3) {
				switch k := 12 + rng.IntN(30); rng.IntN(4) {
				case 0:
					m[k] = byte(rng.Uint32())
				case 1:
					m[k] ^= 1 << rng.IntN(8)
				case 2: // a length near the frame's
					if len(m) < 42 {
						break
					}
					binary.BigEndian.PutUint16(m[[]int{16, 38, 18}[rng.IntN(3)]:], uint16(len(m)-40+rng.IntN(80)))
				default:
					m = m[:rng.IntN(len(m)+1)]
				}
				if len(m) < 42 {
					break
				}
			}
			check(fmt.Sprintf("frame %d mutated", i), m)
			if fast.err.Reason == "" && len(m) > 0 {
				accepted++
			}
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d mutated frames decoded: the mutations test little", accepted)
	}
}
