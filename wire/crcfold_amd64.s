//go:build amd64 && !purego

#include "textflag.h"

// Folding constants of CRC-32 (IEEE, bit-reflected). Folding a 128-bit
// lane forward by D bits multiplies its low quadword by x^(D+32) mod P and
// its high quadword by x^(D-32) mod P (both bit-reflected and shifted left
// by one); the sum of the two products is congruent, D bits further on,
// to the lane. fold2048 is D = 2048 (256 bytes).
DATA fold2048<>+0(SB)/8, $0x11542778a
DATA fold2048<>+8(SB)/8, $0x1322d1430
GLOBL fold2048<>(SB), RODATA|NOPTR, $16

DATA iota64<>+0(SB)/8, $0x0706050403020100
DATA iota64<>+8(SB)/8, $0x0f0e0d0c0b0a0908
DATA iota64<>+16(SB)/8, $0x1716151413121110
DATA iota64<>+24(SB)/8, $0x1f1e1d1c1b1a1918
DATA iota64<>+32(SB)/8, $0x2726252423222120
DATA iota64<>+40(SB)/8, $0x2f2e2d2c2b2a2928
DATA iota64<>+48(SB)/8, $0x3736353433323130
DATA iota64<>+56(SB)/8, $0x3f3e3d3c3b3a3938
GLOBL iota64<>(SB), RODATA|NOPTR, $64

// tailMask is 256 zero bits then 256 one bits: the 256 bits from bit n
// select the last n bytes of a 256-byte window.
DATA tailMask<>+0(SB)/8, $0
DATA tailMask<>+8(SB)/8, $0
DATA tailMask<>+16(SB)/8, $0
DATA tailMask<>+24(SB)/8, $0
DATA tailMask<>+32(SB)/8, $-1
DATA tailMask<>+40(SB)/8, $-1
DATA tailMask<>+48(SB)/8, $-1
DATA tailMask<>+56(SB)/8, $-1
GLOBL tailMask<>(SB), RODATA|NOPTR, $64

// func foldIEEE(crc uint32, p []byte, ones *[64]byte) uint32
//
// crc32.Update(crc, crc32.IEEETable, p) with the bits of ones set in p's
// first 64 - pad bytes (pad below; the last pad bytes of ones are not
// used).
//
// p is read as if preceded by pad = -len(p) mod 16 zero bytes, which
// change nothing with a zero register: the register (^crc) is added to the
// 4 bytes at p instead. The padded stream, a multiple of 16 bytes, is
// folded 256 bytes at a time in four independent 512-bit registers; then
// every 16-byte lane left, in those registers and in the last bytes of the
// stream, is folded in one step onto the 16 bytes after the stream's end
// (constants in foldConsts), whose register, stepped back over them, is
// summed from foldTail. len(p) must be at least 64.
TEXT ·foldIEEE(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), AX
	NOTL AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), DX

	// CX = pad; SI, DX: the padded stream.
	MOVQ DX, CX
	NEGQ CX
	ANDQ $15, CX
	SUBQ CX, SI
	ADDQ CX, DX

	// K1 selects the bytes of the first 64 that are p's.
	MOVQ  $-1, BX
	SHLQ  CX, BX
	KMOVQ BX, K1

	// Z0 = reg and Z3 = *ones moved to byte pad: bytes permuted by
	// iota - pad, those before pad zeroed by K1.
	MOVQ         ones+32(FP), DI
	VMOVD        AX, X0
	VMOVDQU64    (DI), Z3
	VPBROADCASTB CX, Z1
	VMOVDQU64    iota64<>(SB), Z2
	VPSUBB       Z1, Z2, Z2
	VPERMB.Z     Z0, Z2, K1, Z0
	VPERMB.Z     Z3, Z2, K1, Z3

	// Z1 = (first 64 bytes | ones) ^ reg.
	VMOVDQU8.Z (SI), K1, Z1
	VPTERNLOGD $0x56, Z0, Z3, Z1
	CMPQ       DX, $256
	JAE        long

	// Shorter than 256 bytes: the first 64 are the last register.
	VMOVDQA64 Z1, Z4
	VPXORQ    Z1, Z1, Z1
	VPXORQ    Z2, Z2, Z2
	VPXORQ    Z3, Z3, Z3
	ADDQ      $64, SI
	SUBQ      $64, DX
	JMP       tail

long:
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	ADDQ      $256, SI
	SUBQ      $256, DX
	CMPQ      DX, $256
	JB        tail

	VBROADCASTI32X4 fold2048<>(SB), Z0

loop256:
	VPCLMULQDQ $0x00, Z0, Z1, Z5
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPCLMULQDQ $0x00, Z0, Z2, Z6
	VPCLMULQDQ $0x11, Z0, Z2, Z2
	VPCLMULQDQ $0x00, Z0, Z3, Z7
	VPCLMULQDQ $0x11, Z0, Z3, Z3
	VPCLMULQDQ $0x00, Z0, Z4, Z8
	VPCLMULQDQ $0x11, Z0, Z4, Z4
	VPTERNLOGD $0x96, (SI), Z5, Z1
	VPTERNLOGD $0x96, 64(SI), Z6, Z2
	VPTERNLOGD $0x96, 128(SI), Z7, Z3
	VPTERNLOGD $0x96, 192(SI), Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, DX
	CMPQ       DX, $256
	JAE        loop256

tail:
	// DX (0 to 240) bytes left at SI, Z5-Z8: the 256 bytes ending where
	// they end, with only those bytes kept (tailMask from bit DX). Z8 is
	// loaded here, Z5-Z7 below when DX > 64.
	LEAQ       tailMask<>(SB), AX
	MOVQ       DX, CX
	SHRQ       $3, CX
	ADDQ       CX, AX
	LEAQ       -256(SI)(DX*1), BX
	KMOVQ      24(AX), K4
	VMOVDQU8.Z 192(BX), K4, Z8

	// Fold every lane onto the 16 bytes after the end: foldConsts[c] is
	// for a register whose last lane is c lanes before them. Z8's c is 1,
	// Z4's DX/16 + 1.
	LEAQ       ·foldConsts(SB), R8
	MOVQ       DX, R9
	SHLQ       $2, R9
	ADDQ       R8, R9
	VPCLMULQDQ $0x00, 64(R9), Z4, Z9
	VPCLMULQDQ $0x11, 64(R9), Z4, Z4
	VPCLMULQDQ $0x00, 320(R9), Z3, Z10
	VPCLMULQDQ $0x11, 320(R9), Z3, Z3
	VPCLMULQDQ $0x00, 576(R9), Z2, Z11
	VPCLMULQDQ $0x11, 576(R9), Z2, Z2
	VPCLMULQDQ $0x00, 832(R9), Z1, Z12
	VPCLMULQDQ $0x11, 832(R9), Z1, Z1
	VPCLMULQDQ $0x00, 64(R8), Z8, Z13
	VPCLMULQDQ $0x11, 64(R8), Z8, Z8
	VPTERNLOGD $0x96, Z9, Z4, Z1
	VPTERNLOGD $0x96, Z10, Z3, Z2
	VPTERNLOGD $0x96, Z11, Z12, Z13
	VPTERNLOGD $0x96, Z1, Z2, Z8
	VPXORQ     Z13, Z8, Z1
	CMPQ       DX, $64
	JBE        reduce

	KMOVQ      (AX), K1
	KMOVQ      8(AX), K2
	KMOVQ      16(AX), K3
	VMOVDQU8.Z (BX), K1, Z5
	VMOVDQU8.Z 64(BX), K2, Z6
	VMOVDQU8.Z 128(BX), K3, Z7
	VPCLMULQDQ $0x00, 320(R8), Z7, Z14
	VPCLMULQDQ $0x11, 320(R8), Z7, Z7
	VPCLMULQDQ $0x00, 576(R8), Z6, Z15
	VPCLMULQDQ $0x11, 576(R8), Z6, Z6
	VPCLMULQDQ $0x00, 832(R8), Z5, Z16
	VPCLMULQDQ $0x11, 832(R8), Z5, Z5
	VPTERNLOGD $0x96, Z14, Z7, Z1
	VPTERNLOGD $0x96, Z15, Z6, Z5
	VPTERNLOGD $0x96, Z16, Z5, Z1

reduce:
	VEXTRACTI64X4 $1, Z1, Y2
	VPXORQ        Y2, Y1, Y1
	VEXTRACTI32X4 $1, Y1, X2
	VPXORQ        X2, X1, X1

	// The register for those 16 bytes: foldTail[15-k][byte k].
	VMOVQ   X1, AX
	VPEXTRQ $1, X1, BX
	VZEROUPPER
	LEAQ    ·foldTail(SB), R8
	MOVBLZX AL, CX
	MOVL    15360(R8)(CX*4), R10
	MOVBLZX AH, CX
	MOVL    14336(R8)(CX*4), R11
	MOVQ    AX, CX
	SHRQ    $16, CX
	MOVBLZX CL, CX
	MOVL    13312(R8)(CX*4), R12
	MOVQ    AX, CX
	SHRQ    $24, CX
	MOVBLZX CL, CX
	MOVL    12288(R8)(CX*4), R13
	MOVQ    AX, CX
	SHRQ    $32, CX
	MOVBLZX CL, CX
	XORL    11264(R8)(CX*4), R10
	MOVQ    AX, CX
	SHRQ    $40, CX
	MOVBLZX CL, CX
	XORL    10240(R8)(CX*4), R11
	MOVQ    AX, CX
	SHRQ    $48, CX
	MOVBLZX CL, CX
	XORL    9216(R8)(CX*4), R12
	MOVQ    AX, CX
	SHRQ    $56, CX
	MOVBLZX CL, CX
	XORL    8192(R8)(CX*4), R13
	MOVBLZX BL, CX
	XORL    7168(R8)(CX*4), R10
	MOVBLZX BH, CX
	XORL    6144(R8)(CX*4), R11
	MOVQ    BX, CX
	SHRQ    $16, CX
	MOVBLZX CL, CX
	XORL    5120(R8)(CX*4), R12
	MOVQ    BX, CX
	SHRQ    $24, CX
	MOVBLZX CL, CX
	XORL    4096(R8)(CX*4), R13
	MOVQ    BX, CX
	SHRQ    $32, CX
	MOVBLZX CL, CX
	XORL    3072(R8)(CX*4), R10
	MOVQ    BX, CX
	SHRQ    $40, CX
	MOVBLZX CL, CX
	XORL    2048(R8)(CX*4), R11
	MOVQ    BX, CX
	SHRQ    $48, CX
	MOVBLZX CL, CX
	XORL    1024(R8)(CX*4), R12
	MOVQ    BX, CX
	SHRQ    $56, CX
	MOVBLZX CL, CX
	XORL    0(R8)(CX*4), R13
	XORL    R11, R10
	XORL    R13, R12
	XORL    R12, R10
	NOTL    R10
	MOVL    R10, ret+40(FP)
	RET
