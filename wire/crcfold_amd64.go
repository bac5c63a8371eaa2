//go:build amd64 && !purego

package wire

import (
	"hash/crc32"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// foldIEEE is in crcfold_amd64.s.
//
//go:noescape
func foldIEEE(reg uint32, p []byte) (lo, hi uint64)

// haveFold reports whether foldIEEE runs on this CPU: it uses AVX-512 (F,
// BW, VL, VBMI) and VPCLMULQDQ, and the OS saves the AVX-512 registers.
var haveFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512VPCLMULQDQ

// foldMin is the shortest input updateIEEE gives foldIEEE.
const foldMin = 64

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p): foldIEEE's pass
// when the CPU has it and p is long enough, otherwise hash/crc32's.
func updateIEEE(crc uint32, p []byte) uint32 {
	if len(p) < foldMin || !haveFold {
		return updateIEEEGeneric(crc, p)
	}
	lo, hi := foldIEEE(^crc, p)
	return ^crcAfterFold(lo, hi)
}

// crcAfterFold returns the register that foldIEEE's 16 bytes lo, hi
// stand for: their CRC from a zero register, stepped back over 16 zero
// bytes (the bytes were folded onto the 16 after the input), in 16
// independent table lookups.
func crcAfterFold(lo, hi uint64) uint32 {
	t := &foldTail
	return t[15][byte(lo)] ^ t[14][byte(lo>>8)] ^ t[13][byte(lo>>16)] ^ t[12][byte(lo>>24)] ^
		t[11][byte(lo>>32)] ^ t[10][byte(lo>>40)] ^ t[9][byte(lo>>48)] ^ t[8][byte(lo>>56)] ^
		t[7][byte(hi)] ^ t[6][byte(hi>>8)] ^ t[5][byte(hi>>16)] ^ t[4][byte(hi>>24)] ^
		t[3][byte(hi>>32)] ^ t[2][byte(hi>>40)] ^ t[1][byte(hi>>48)] ^ t[0][byte(hi>>56)]
}

// foldLanes is the number of entries of foldConsts: the last 16-byte lane
// of a register foldIEEE folds is at most 28 lanes before the end.
const foldLanes = 29

var (
	// foldConsts[c] holds, for each 16-byte lane k of a 64-byte register
	// whose last lane is c lanes before the 16 bytes after the input, the
	// constants that fold lane k onto those bytes: d = c+3-k lanes, D =
	// 128d bits on, low quadword x^(D+32) mod P, high x^(D-32) mod P, both
	// bit-reflected and shifted left by one (carry-less products of
	// reflected operands come out a bit short). foldIEEE reads it.
	foldConsts [foldLanes][8]uint64
	// foldTail[j][b] is S^-16 of the register after byte b and j zero
	// bytes from a zero register (see crcUnstep).
	foldTail [16][256]uint32
)

func init() {
	if !haveFold {
		return
	}
	// x^e mod P for every e = 32 (mod 64) up to the largest D+32.
	const maxE = 128*(foldLanes+3) + 32
	var pow [maxE/64 + 1]uint32
	r := uint32(1)
	for e := 0; e <= maxE; e++ {
		if e%64 == 32 {
			pow[e/64] = r
		}
		top := r >> 31
		r <<= 1
		r ^= -top & 0x04c11db7
	}
	konst := func(e int) uint64 { return uint64(bits.Reverse32(pow[e/64])) << 1 }
	for c := 1; c < foldLanes; c++ {
		for k := range 4 {
			d := 128 * (c + 3 - k)
			foldConsts[c][2*k] = konst(d + 32)
			foldConsts[c][2*k+1] = konst(d - 32)
		}
	}
	tab := crc32.IEEETable
	for b := range 256 {
		x := tab[b]
		for j := range 16 {
			if j > 0 {
				x = tab[x&0xff] ^ x>>8
			}
			y := x
			for range 16 {
				y = crcUnstep(y)
			}
			foldTail[j][b] = y
		}
	}
}
