//go:build amd64 && !purego

package wire

import (
	"hash/crc32"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// foldIEEE is crc32.Update(crc, crc32.IEEETable, p) with the bits of ones
// set in p's first 64 - (-len(p) mod 16) bytes; len(p) must be at least 64
// (foldMin). See crcfold_amd64.s.
//
//go:noescape
func foldIEEE(crc uint32, p []byte, ones *[64]byte) uint32

// haveFold reports whether foldIEEE runs on this CPU: it uses AVX-512 (F,
// BW, VL, VBMI) and VPCLMULQDQ, and the OS saves the AVX-512 registers.
var haveFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512VPCLMULQDQ

// foldMin is the shortest input updateIEEE gives foldIEEE.
const foldMin = 64

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p): foldIEEE when the
// CPU has it and p is long enough, otherwise hash/crc32's pass.
func updateIEEE(crc uint32, p []byte) uint32 {
	if len(p) < foldMin || !haveFold {
		return updateIEEEGeneric(crc, p)
	}
	return foldIEEE(crc, p, &noOnes)
}

// noOnes sets no bit.
var noOnes [64]byte

// updateIEEEOnes returns crc32.Update(crc, crc32.IEEETable, p) with the
// bits of ones set in p's first bytes (p is not written), and true; or
// false when it cannot: p shorter than 64 bytes, or a CPU without
// foldIEEE. The bits set must be in the first 64 - (-len(p) mod 16) bytes
// of ones (the pass pads p in front to a multiple of 16 bytes).
func updateIEEEOnes(crc uint32, p []byte, ones *[64]byte) (uint32, bool) {
	if len(p) < foldMin || !haveFold {
		return 0, false
	}
	return foldIEEE(crc, p, ones), true
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
	// bytes from a zero register (see crcUnstep): foldIEEE's 16 bytes
	// were folded onto the 16 after the input, so the register after the
	// input is S^-16 of theirs, and foldTail[15-k][byte k] summed over
	// them gives it in 16 independent lookups.
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
