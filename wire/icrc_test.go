package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

func TestICRCSeed(t *testing.T) {
	if got := crc32.ChecksumIEEE(bytes.Repeat([]byte{0xff}, 8)); got != icrcSeed {
		t.Fatalf("CRC of 8 x 0xff = %#x, icrcSeed = %#x", got, icrcSeed)
	}
	if ^uint32(0xdebb20e3) != icrcSeed {
		t.Fatal("icrcSeed is not the inverse of rxe's raw register 0xdebb20e3")
	}
}

// spec56Frame is a worked ICRC example computed by hand from the algorithm
// of rxe_icrc.c (IBTA Annex A17.3.3): IPv4 RC
// SEND_ONLY 192.168.1.1 → 192.168.1.2, UDP 0xc132 → 4791, IP ID 0, TTL 64,
// TOS 0, DestQP 0x12, AckReq, PSN 1, payload "hello" (pad 3).
func spec56Frame(v6 bool) *Frame {
	f := &Frame{
		DstMAC: [6]byte{0x52, 0x54, 0, 0x4d, 0, 0x0b}, SrcMAC: [6]byte{0x52, 0x54, 0, 0x4d, 0, 0x0c},
		Src: netip.MustParseAddr("192.168.1.1"), Dst: netip.MustParseAddr("192.168.1.2"),
		HopLimit: 64, SrcPort: 0xc132,
		BTH:     BTHFields{Opcode: RCSendOnly, PKey: 0xffff, DestQP: 0x12, AckReq: true, PSN: 1},
		Payload: []byte("hello"),
	}
	if v6 {
		f.Src, f.Dst = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	}
	return f
}

// specExampleIPv4 is the IPv4 frame of that worked example, from the
// Ethernet header to the ICRC:
//
//	0000  52 54 00 4d 00 0b 52 54 00 4d 00 0c 08 00        Ethernet
//	000e  45 00 00 34 00 00 40 00 40 11 b7 65 c0 a8 01 01  IPv4 (DF, TTL 64)
//	001e  c0 a8 01 02
//	0022  c1 32 12 b7 00 20 00 00                          UDP 0xc132 → 4791
//	002a  04 30 ff ff 00 00 00 12 80 00 00 01              BTH SEND_ONLY pad 3
//	0036  68 65 6c 6c 6f 00 00 00                          "hello" + pad
//	003e  4e f6 61 42                                      ICRC 0x4261f64e (LE)
var specExampleIPv4 = []byte{
	0x52, 0x54, 0x00, 0x4d, 0x00, 0x0b, 0x52, 0x54, 0x00, 0x4d, 0x00, 0x0c, 0x08, 0x00,
	0x45, 0x00, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb7, 0x65, 0xc0, 0xa8, 0x01, 0x01,
	0xc0, 0xa8, 0x01, 0x02,
	0xc1, 0x32, 0x12, 0xb7, 0x00, 0x20, 0x00, 0x00,
	0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x01,
	0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x00, 0x00, 0x00,
	0x4e, 0xf6, 0x61, 0x42,
}

// TestICRCWorkedExample builds the worked example over IPv4 and IPv6 and
// compares with the committed bytes (IPv4) and ICRC (IPv6: 7f 98 53 3b).
func TestICRCWorkedExample(t *testing.T) {
	buf := make([]byte, 256)
	n, err := Build(buf, spec56Frame(false))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], specExampleIPv4) {
		t.Fatalf("IPv4 example:\n got % x\nwant % x", buf[:n], specExampleIPv4)
	}
	if err := VerifyICRC(specExampleIPv4, EthernetSize); err != nil {
		t.Fatalf("VerifyICRC(example) = %v", err)
	}
	n, err = Build(buf, spec56Frame(true))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := buf[n-4:n], []byte{0x7f, 0x98, 0x53, 0x3b}; !bytes.Equal(got, want) {
		t.Fatalf("IPv6 example ICRC = % x, want % x", got, want)
	}
}

// referenceICRC computes the ICRC the slow, obvious way: copy the whole
// datagram from the IP header, overwrite the masked fields with ones,
// prepend 8 x 0xff, CRC everything but the last 4 bytes.
func referenceICRC(frame []byte, l3, icrcOff int) uint32 {
	d := append(bytes.Repeat([]byte{0xff}, 8), frame[l3:icrcOff]...)
	ip := d[8:]
	var udp []byte
	if ip[0]>>4 == 6 {
		ip[0] |= 0x0f
		ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff
		ip[7] = 0xff
		udp = ip[40:]
	} else {
		ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
		udp = ip[20:]
	}
	udp[6], udp[7] = 0xff, 0xff
	udp[8+4] = 0xff
	if udp[8] == byte(RCFlush) {
		// rxe's FLUSH covers the BTH and its headers once more, as they
		// are on the wire.
		bth := l3 + len(ip) - len(udp) + UDPSize
		d = append(d, frame[bth:icrcOff]...)
	}
	return crc32.ChecksumIEEE(d)
}

// icrcSamples returns a few frames of each kind: every opcode family the
// captures hold (first 40 RoCE frames of each capture) plus built frames
// over IPv4, IPv6 and with a VLAN tag.
func icrcSamples(t *testing.T) [][]byte {
	frames, _ := roceFrames(t)
	var out [][]byte
	for i, fr := range frames {
		if i%25 == 0 {
			out = append(out, fr)
		}
	}
	for _, f := range sampleFrames() {
		buf := make([]byte, f.Len())
		if _, err := Build(buf, f); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf)
	}
	return out
}

// maskedBits returns, for a frame parsed as p, whether bit i of byte off is
// one the ICRC masks (or does not cover).
func icrcCovers(p *Packet, off int, bit uint) bool {
	if off < p.L3Offset() || off >= p.ICRCOffset() {
		return false
	}
	ip := off - p.L3Offset()
	if p.IsIPv6() {
		if ip == 0 && bit < 4 || ip >= 1 && ip <= 3 || ip == 7 {
			return false
		}
	} else if ip == 1 || ip == 8 || ip == 10 || ip == 11 {
		return false
	}
	u := off - p.UDPOffset()
	if u == 6 || u == 7 {
		return false
	}
	if off-p.BTHOffset() == bthResv8a {
		return p.Opcode() == RCFlush // rxe's FLUSH ICRC covers the BTH twice, the second time unmasked
	}
	return true
}

// TestICRCProperties flips every bit of sample frames: a flip of a covered
// bit makes VerifyICRC fail; a flip of a masked or uncovered bit (Ethernet,
// VLAN, TTL/hop limit, TOS/traffic class, flow label, IPv4 checksum, UDP
// checksum, FECN/BECN/resv6) leaves it valid. It also checks the fast
// implementation against referenceICRC on every frame.
func TestICRCProperties(t *testing.T) {
	for i, fr := range icrcSamples(t) {
		var p Packet
		if err := p.Decode(fr); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if got, want := p.ComputeICRC(), referenceICRC(fr, p.L3Offset(), p.ICRCOffset()); got != want {
			t.Fatalf("sample %d: ComputeICRC %#x, reference %#x", i, got, want)
		}
		if err := p.VerifyICRC(); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		m := bytes.Clone(fr)
		for off := 0; off < p.Len(); off++ {
			for bit := uint(0); bit < 8; bit++ {
				m[off] ^= 1 << bit
				err := VerifyICRC(m, p.L3Offset())
				inICRC := off >= p.ICRCOffset()
				switch {
				case icrcCovers(&p, off, bit) || inICRC:
					if err == nil {
						t.Fatalf("sample %d (%v): flipping covered bit %d of byte %d kept the ICRC valid", i, p.Opcode(), bit, off)
					}
				case err != nil:
					t.Fatalf("sample %d (%v): flipping masked bit %d of byte %d: %v", i, p.Opcode(), bit, off, err)
				}
				m[off] ^= 1 << bit
			}
		}
	}
}

// TestSealICRC seals random garbage payloads and checks Verify agrees;
// Seal and Verify refuse frames whose headers do not fit.
func TestSealICRC(t *testing.T) {
	r := testenv.Rand(t)
	for _, f := range sampleFrames() {
		buf := make([]byte, f.Len())
		n, _ := Build(buf, f)
		l3 := EthernetSize
		if f.VLAN {
			l3 += VLANTagSize
		}
		for j := l3 + 1; j < n; j++ {
			buf[j] ^= byte(r.Uint32())
		}
		var p Packet
		if p.Decode(buf) != nil {
			continue // scrambled lengths: not a frame any more
		}
		if err := SealICRC(buf, l3); err != nil {
			t.Fatal(err)
		}
		if err := VerifyICRC(buf, l3); err != nil {
			t.Fatalf("after SealICRC: %v", err)
		}
	}
	good := bytes.Clone(specExampleIPv4)
	for _, tt := range []struct {
		name  string
		frame []byte
		l3    int
		want  error
	}{
		{"l3 past end", good, len(good), ErrTruncated},
		{"negative l3", good, -1, ErrTruncated},
		{"truncated IP", good[:30], EthernetSize, ErrTruncated},
		{"wrong l3", good, 12, ErrMalformed},
		{"cut before ICRC", good[:len(good)-1], EthernetSize, ErrTruncated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := VerifyICRC(tt.frame, tt.l3); !errors.Is(err, tt.want) {
				t.Errorf("VerifyICRC = %v, want %v", err, tt.want)
			}
			c := bytes.Clone(tt.frame)
			if err := SealICRC(c, tt.l3); !errors.Is(err, tt.want) {
				t.Errorf("SealICRC = %v, want %v", err, tt.want)
			}
		})
	}
	// A UDP length shorter than BTH + ICRC cannot carry an ICRC.
	short := bytes.Clone(good)
	binary.BigEndian.PutUint16(short[EthernetSize+IPv4Size+4:], UDPSize+BTHSize)
	if err := VerifyICRC(short, EthernetSize); !errors.Is(err, ErrTruncated) {
		t.Errorf("short UDP length: %v", err)
	}
}

// TestICRCRandomFrames compares SealICRC and Packet.ComputeICRC with
// referenceICRC on random frames: IPv4 and IPv6, with and without a VLAN
// tag, every opcode byte, every masked field and every other header byte
// random (except the lengths, versions and protocol the bounds checks
// read), payloads of 0 to 4200 bytes.
func TestICRCRandomFrames(t *testing.T) {
	r := testenv.Rand(t)
	for i := range 4000 {
		v6 := r.IntN(2) == 1
		f := sampleFrame(RCSendOnly, v6, r.IntN(4) == 0, 0)
		n := r.IntN(300)
		if r.IntN(8) == 0 {
			n = r.IntN(4200)
		}
		f.Payload = make([]byte, n)
		buf := make([]byte, f.Len())
		if _, err := Build(buf, f); err != nil {
			t.Fatal(err)
		}
		l3 := EthernetSize
		if f.VLAN {
			l3 += VLANTagSize
		}
		// Keep: IP version and IHL, IPv4 total length, flags and fragment
		// offset, protocol; IPv6 payload length and next header; UDP
		// length.
		keep := map[int]bool{0: true, 2: true, 3: true, 6: true, 7: true, 9: true}
		udp := IPv4Size
		if v6 {
			keep = map[int]bool{4: true, 5: true, 6: true}
			udp = IPv6Size
		}
		keep[udp+4], keep[udp+5] = true, true
		for j := l3; j < len(buf); j++ {
			if !keep[j-l3] {
				buf[j] = byte(r.Uint32())
			}
		}
		if v6 {
			buf[l3] = 0x60 | buf[l3+1]&0x0f // version 6, random traffic class bits
		}
		icrcOff := len(buf) - ICRCSize
		want := referenceICRC(buf, l3, icrcOff)
		if err := SealICRC(buf, l3); err != nil {
			t.Fatalf("frame %d: SealICRC: %v", i, err)
		}
		if got := binary.LittleEndian.Uint32(buf[icrcOff:]); got != want {
			t.Fatalf("frame %d (v6 %v, opcode %#x, %d bytes): SealICRC %#x, reference %#x", i, v6, buf[l3+udp+UDPSize], len(buf), got, want)
		}
		var p Packet
		if p.Decode(buf) == nil {
			if got := p.ComputeICRC(); got != want {
				t.Fatalf("frame %d: ComputeICRC %#x, reference %#x", i, got, want)
			}
		}
	}
}

// TestUpdateTail checks updateTail against hash/crc32 for every length
// below 16 bytes.
func TestUpdateTail(t *testing.T) {
	r := testenv.Rand(t)
	for n := range 16 {
		for range 50 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			seed := r.Uint32()
			if got, want := updateTail(seed, b), crc32.Update(seed, crc32.IEEETable, b); got != want {
				t.Fatalf("n=%d: %#x, want %#x", n, got, want)
			}
		}
	}
}

// TestICRCFixTables checks that each entry of the masked-field tables,
// folded into the CRC register before the IP header, changes the CRC as
// changing the byte at its position does.
func TestICRCFixTables(t *testing.T) {
	r := testenv.Rand(t)
	for _, c := range []struct {
		pos []int
		tab [][256]uint32
	}{{icrcMasked4[:], icrcFix4[:]}, {icrcMasked6[:], icrcFix6[:]}} {
		for k, i := range c.pos {
			for d := range 256 {
				b := make([]byte, i+1+r.IntN(64))
				for j := range b {
					b[j] = byte(r.Uint32())
				}
				want := crc32.Update(icrcSeed, crc32.IEEETable, b)
				b[i] ^= byte(d)
				if got := crc32.Update(icrcSeed^c.tab[k][d], crc32.IEEETable, b); got != want {
					t.Fatalf("position %d, change %#x: %#x, want %#x", i, d, got, want)
				}
			}
		}
	}
}

// TestICRCFlushAsRxe: an RC FLUSH as Debian 13's kernel 6.12 rxe sent it
// (FETH PLT 1 SEL 0, RETH of 8 bytes; captured by conformance/peer's
// TestInteropExtOps) carries rxe's ICRC, which covers the BTH, FETH and
// RETH a second time: VerifyICRC accepts it, SealICRC reproduces it, and
// the specification's ICRC in its place is accepted too; any other
// value is not.
func TestICRCFlushAsRxe(t *testing.T) {
	frame, _ := hex.DecodeString("ea02b3dec3975254004d000b08004500" +
		"00400aa7400040111b600a4d000b0a4d" +
		"0002c12112b7002c00001c00ffff0000" +
		"00118011111200000001000000000001" +
		"20000000033f000000084162544a")
	if err := VerifyICRC(frame, EthernetSize); err != nil {
		t.Fatalf("rxe's FLUSH: %v", err)
	}
	icrcOff := len(frame) - ICRCSize
	want := binary.LittleEndian.Uint32(frame[icrcOff:])
	binary.LittleEndian.PutUint32(frame[icrcOff:], 0)
	if err := SealICRC(frame, EthernetSize); err != nil || binary.LittleEndian.Uint32(frame[icrcOff:]) != want {
		t.Errorf("SealICRC gave %#x (%v), rxe sent %#x", binary.LittleEndian.Uint32(frame[icrcOff:]), err, want)
	}
	spec := referenceSpecICRC(frame, EthernetSize, icrcOff)
	if spec == want {
		t.Fatal("the specification's ICRC equals rxe's for FLUSH")
	}
	binary.LittleEndian.PutUint32(frame[icrcOff:], spec)
	if err := VerifyICRC(frame, EthernetSize); err != nil {
		t.Errorf("FLUSH with the specification's ICRC: %v", err)
	}
	binary.LittleEndian.PutUint32(frame[icrcOff:], spec^1)
	if err := VerifyICRC(frame, EthernetSize); !errors.Is(err, ErrBadICRC) {
		t.Errorf("FLUSH with a wrong ICRC: %v, want ErrBadICRC", err)
	}
}

// referenceSpecICRC is the specification's ICRC of an IPv4 frame, the
// slow way (referenceICRC without rxe's FLUSH rule).
func referenceSpecICRC(frame []byte, l3, icrcOff int) uint32 {
	d := append(bytes.Repeat([]byte{0xff}, 8), frame[l3:icrcOff]...)
	d[8+1], d[8+8], d[8+10], d[8+11] = 0xff, 0xff, 0xff, 0xff
	d[8+IPv4Size+6], d[8+IPv4Size+7] = 0xff, 0xff
	d[8+IPv4Size+UDPSize+4] = 0xff
	return crc32.ChecksumIEEE(d)
}

// FuzzSealICRC checks SealICRC and VerifyICRC on arbitrary frames against
// referenceICRC: where icrcBoundsChecked accepts the headers, SealICRC
// changes only the ICRC, to referenceICRC's value, and VerifyICRC accepts
// it and refuses it with a bit flipped; elsewhere both return
// icrcBoundsChecked's error.
func FuzzSealICRC(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 100, 1024, 1029} {
			for _, op := range []Opcode{RCRDMAWriteMiddle, RCFlush} {
				fr := frameOf(f, sampleFrame(op, v6, false, n))
				f.Add(fr, uint8(EthernetSize))
			}
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte, l3 uint8) {
		l3Off := int(l3)
		_, icrcOff, _, wantErr := icrcBoundsChecked(frame, l3Off)
		fr := append([]byte(nil), frame...)
		if err := SealICRC(fr, l3Off); err != wantErr {
			t.Fatalf("SealICRC: %v, icrcBoundsChecked %v", err, wantErr)
		}
		if wantErr != nil {
			if err := VerifyICRC(fr, l3Off); err != wantErr {
				t.Fatalf("VerifyICRC: %v, icrcBoundsChecked %v", err, wantErr)
			}
			return
		}
		if !bytes.Equal(fr[:icrcOff], frame[:icrcOff]) || !bytes.Equal(fr[icrcOff+ICRCSize:], frame[icrcOff+ICRCSize:]) {
			t.Fatal("SealICRC changed bytes other than the ICRC")
		}
		if got, want := binary.LittleEndian.Uint32(fr[icrcOff:]), referenceICRC(frame, l3Off, icrcOff); got != want {
			t.Fatalf("SealICRC stored %#x, reference %#x", got, want)
		}
		if err := VerifyICRC(fr, l3Off); err != nil {
			t.Fatalf("VerifyICRC after SealICRC: %v", err)
		}
		fr[icrcOff] ^= 0x10
		if err := VerifyICRC(fr, l3Off); err != ErrBadICRC {
			t.Fatalf("VerifyICRC with an ICRC bit flipped: %v", err)
		}
	})
}
