package wire

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestUpdateIEEE compares updateIEEE (the vectorised pass where the CPU
// has it) and updateIEEEGeneric with hash/crc32 on seeded random inputs of
// every length from 0 to 9000, starting at every offset mod 64, from
// random registers.
func TestUpdateIEEE(t *testing.T) {
	const seed = 19
	rng := rand.New(rand.NewPCG(seed, 0))
	buf := make([]byte, 9000+64)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 9000; n++ {
		off := n % 64
		p := buf[off : off+n]
		crc := rng.Uint32()
		want := crc32.Update(crc, crc32.IEEETable, p)
		if got := updateIEEE(crc, p); got != want {
			t.Fatalf("seed %d: updateIEEE(%#x, %d bytes at offset %d) = %#x, crc32.Update %#x", seed, crc, n, off, got, want)
		}
		if got := updateIEEEGeneric(crc, p); got != want {
			t.Fatalf("seed %d: updateIEEEGeneric(%#x, %d bytes at offset %d) = %#x, crc32.Update %#x", seed, crc, n, off, got, want)
		}
	}
}

// TestUpdateIEEEPatterns checks inputs whose bytes are all zero or all
// ones around the lengths where updateIEEE changes paths (the 64-byte
// minimum, 256-byte blocks, more than 64 bytes after the last block).
func TestUpdateIEEEPatterns(t *testing.T) {
	for _, fill := range []byte{0x00, 0xff} {
		for _, n := range []int{63, 64, 65, 79, 80, 127, 128, 255, 256, 257, 319, 320, 321, 511, 512, 513, 1024 + 40, 4096 + 40} {
			p := make([]byte, n)
			for i := range p {
				p[i] = fill
			}
			for _, crc := range []uint32{0, 0xffffffff, 0x80000001} {
				if got, want := updateIEEE(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
					t.Errorf("updateIEEE(%#x, %d bytes of %#x) = %#x, crc32.Update %#x", crc, n, fill, got, want)
				}
			}
		}
	}
}

func FuzzUpdateIEEE(f *testing.F) {
	f.Add(uint32(0), []byte{}, uint8(0))
	f.Add(uint32(0xffffffff), make([]byte, 1064), uint8(14))
	f.Add(uint32(0x12345678), make([]byte, 300), uint8(3))
	f.Fuzz(func(t *testing.T, crc uint32, data []byte, off uint8) {
		p := data[min(int(off), len(data)):]
		want := crc32.Update(crc, crc32.IEEETable, p)
		if got := updateIEEE(crc, p); got != want {
			t.Fatalf("updateIEEE(%#x, %d bytes) = %#x, crc32.Update %#x", crc, len(p), got, want)
		}
		if got := updateIEEEGeneric(crc, p); got != want {
			t.Fatalf("updateIEEEGeneric(%#x, %d bytes) = %#x, crc32.Update %#x", crc, len(p), got, want)
		}
	})
}

// TestUpdateIEEEOnes compares updateIEEEOnes, where it runs, with
// hash/crc32 over a copy with the bits set, for seeded random patterns in
// the first 64 - (-n mod 16) bytes, every length n from 0 to 2100 and
// every offset mod 16.
func TestUpdateIEEEOnes(t *testing.T) {
	const seed = 23
	rng := rand.New(rand.NewPCG(seed, 0))
	buf := make([]byte, 2100+16)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	var ones [64]byte
	cp := make([]byte, len(buf))
	for n := 0; n <= 2100; n++ {
		for i := range ones {
			ones[i] = 0
			if i < 64-(-n&15) && rng.IntN(4) == 0 {
				ones[i] = byte(rng.Uint32())
			}
		}
		p := buf[n%16 : n%16+n]
		crc := rng.Uint32()
		got, ok := updateIEEEOnes(crc, p, &ones)
		if !ok {
			if n >= foldMin && haveFold {
				t.Fatalf("updateIEEEOnes declined %d bytes", n)
			}
			continue
		}
		q := cp[:n]
		copy(q, p)
		for i := range min(n, len(ones)) {
			q[i] |= ones[i]
		}
		if want := crc32.Update(crc, crc32.IEEETable, q); got != want {
			t.Fatalf("seed %d: updateIEEEOnes(%#x, %d bytes) = %#x, crc32.Update with the bits set %#x", seed, crc, n, got, want)
		}
		if p[0] != buf[n%16] {
			t.Fatal("updateIEEEOnes wrote into p")
		}
	}
}

// TestICRCBoundsFastPath checks that icrcBounds, which takes the offsets
// of a frame whose datagrams end where it ends from its length, gives what
// icrcBoundsChecked gives from the length fields, and that icrcUsual takes
// exactly the usual frames and gives computeICRC's ICRC: on IPv4 and IPv6 frames,
// with every one of their first 64 header bytes changed several ways, and
// with bytes added or removed at the end.
func TestICRCBoundsFastPath(t *testing.T) {
	type result struct {
		l4, icrc int
		v6       bool
		err      error
	}
	check := func(name string, fr []byte, l3 int) {
		t.Helper()
		var got, want result
		got.l4, got.icrc, got.v6, got.err = icrcBounds(fr, l3)
		want.l4, want.icrc, want.v6, want.err = icrcBoundsChecked(fr, l3)
		if got != want {
			t.Fatalf("%s: icrcBounds = %+v, icrcBoundsChecked %+v", name, got, want)
		}
		if crc, ok := icrcUsual(fr, l3); ok {
			if want.err != nil || want.icrc != len(fr)-ICRCSize {
				t.Fatalf("%s: icrcUsual took a frame icrcBoundsChecked gives %+v", name, want)
			}
			if c := computeICRC(fr, l3, want.l4, want.icrc, want.v6); crc != c {
				t.Fatalf("%s: icrcUsual = %#x, computeICRC %#x", name, crc, c)
			}
		} else if usual := haveFold && want.err == nil && want.icrc == len(fr)-ICRCSize && fr[want.l4+UDPSize] != byte(RCFlush) &&
			(!want.v6 && want.l4 == l3+IPv4Size || want.v6 && -(want.icrc-l3)&15 <= 11); usual && want.icrc-l3 >= foldMin {
			t.Fatalf("%s: icrcUsual declined a usual frame (%d bytes from the IP header, %+v)", name, len(fr)-l3, want)
		}
	}
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 3, 24, 1024, 1025, 1028, 1031} {
			f := sampleFrame(RCRDMAWriteMiddle, v6, n == 3, n)
			good := frameOf(t, f)
			l3 := len(good) - f.Len() + EthernetSize
			if f.VLAN {
				l3 += VLANTagSize
			}
			if _, _, _, err := icrcBoundsChecked(good, l3); err != nil {
				t.Fatalf("v6=%v n=%d: %v", v6, n, err)
			}
			check("valid", good, l3)
			for _, l := range []int{-1, 0, 1, 7, l3, len(good)} {
				check(fmt.Sprintf("l3Off %d", l), good, l)
			}
			for _, d := range []int{-5, -4, -1, 1, 4, 60} {
				fr := append([]byte(nil), good...)
				if d < 0 {
					fr = fr[:len(fr)+d]
				} else {
					fr = append(fr, make([]byte, d)...)
				}
				check(fmt.Sprintf("length %+d", d), fr, l3)
			}
			for i := l3; i < min(l3+64, len(good)); i++ {
				for _, x := range []byte{0x01, 0x02, 0x10, 0x20, 0x40, 0x80, 0xff} {
					fr := append([]byte(nil), good...)
					fr[i] ^= x
					check(fmt.Sprintf("v6=%v n=%d byte %d ^ %#x", v6, n, i-l3, x), fr, l3)
				}
				for _, v := range []byte{0, 0x45, 0x60, 17} {
					fr := append([]byte(nil), good...)
					fr[i] = v
					check(fmt.Sprintf("v6=%v n=%d byte %d = %#x", v6, n, i-l3, v), fr, l3)
				}
			}
		}
	}
}
