package wire

import (
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
