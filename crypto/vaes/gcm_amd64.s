// AES-GCM primitives with VAES and VPCLMULQDQ on 256-bit registers
// (AVX2 encoding), two AES blocks per YMM register.
//
// Written for Keel from the published algorithms:
//   - AES rounds: FIPS-197 with the AES-NI instructions (Intel SDM, VAESENC
//     and VAESENCLAST with VEX.256 operate on each 128-bit lane).
//   - GHASH: Gueron and Kounavis, "Intel Carry-Less Multiplication
//     Instruction and its Usage for Computing the GCM Mode": blocks are
//     byte-reflected, H is pre-multiplied by x (H<<1 mod P) so that the
//     carry-less product needs no 1-bit shift, and the 256-bit product is
//     reduced modulo x^128+x^127+x^126+x^121+1 in two folding steps, each
//     one carry-less multiplication by the constant 0xC2<<56.
//   - Aggregated reduction (same paper, and Drucker, Gueron, Krasnov,
//     "Making AES great again"): eight blocks are multiplied by H^8..H^1,
//     the unreduced products are summed and reduced once.
//
// Nothing here branches on or indexes memory by key, data, keystream or
// tag: loops and branches depend only on the block count and the number of
// rounds, which are public.
//
// Calling convention: ABI0, arguments on the stack; every register used is
// caller-saved under ABI0 (the compiler restores X15 and R14 after an ABI0
// call). VZEROUPPER before each return avoids AVX-SSE transition stalls in
// the caller.

#include "go_asm.h"
#include "textflag.h"

// bswapMask reverses the bytes of each 128-bit lane (VPSHUFB).
DATA bswapMask<>+0x00(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+0x08(SB)/8, $0x0001020304050607
DATA bswapMask<>+0x10(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+0x18(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), (NOPTR+RODATA), $32

// gcmPoly is the reflected GHASH reduction constant, in both lanes: the
// high qword 0xC2<<56 is the folding multiplier; the whole value is what
// H<<1 is reduced by when its top bit was set.
DATA gcmPoly<>+0x00(SB)/8, $0x0000000000000001
DATA gcmPoly<>+0x08(SB)/8, $0xc200000000000000
DATA gcmPoly<>+0x10(SB)/8, $0x0000000000000001
DATA gcmPoly<>+0x18(SB)/8, $0xc200000000000000
GLOBL gcmPoly<>(SB), (NOPTR+RODATA), $32

// Counter increments on byte-reversed counter blocks, where the 32-bit
// big-endian block counter is the low dword of each lane: VPADDD then
// wraps modulo 2^32 without carrying into the nonce (GCM's inc32).
DATA ctrLanes<>+0x00(SB)/8, $0
DATA ctrLanes<>+0x08(SB)/8, $0
DATA ctrLanes<>+0x10(SB)/8, $1
DATA ctrLanes<>+0x18(SB)/8, $0
GLOBL ctrLanes<>(SB), (NOPTR+RODATA), $32

DATA ctrTwo<>+0x00(SB)/8, $2
DATA ctrTwo<>+0x08(SB)/8, $0
DATA ctrTwo<>+0x10(SB)/8, $2
DATA ctrTwo<>+0x18(SB)/8, $0
GLOBL ctrTwo<>(SB), (NOPTR+RODATA), $32

DATA ctrOne<>+0x00(SB)/8, $1
DATA ctrOne<>+0x08(SB)/8, $0
DATA ctrOne<>+0x10(SB)/8, $1
DATA ctrOne<>+0x18(SB)/8, $0
GLOBL ctrOne<>(SB), (NOPTR+RODATA), $32

// func subWord(x uint32) uint32
//
// FIPS-197 SubWord through the AES unit: with the word broadcast to all
// four columns, ShiftRows is the identity, so AESENCLAST with a zero round
// key is SubBytes of each byte.
TEXT ·subWord(SB), NOSPLIT, $0-12
	MOVL   x+0(FP), AX
	MOVQ   AX, X0
	PSHUFD $0, X0, X0
	PXOR   X1, X1
	AESENCLAST X1, X0
	MOVQ   X0, AX
	MOVL   AX, ret+8(FP)
	RET

// AES rounds on four YMM registers (eight blocks), round key loaded from
// off(AX) (each round key is stored twice, once per lane).
#define ROUND4(off) \
	VMOVDQU off(AX), Y8 \
	VAESENC Y8, Y0, Y0  \
	VAESENC Y8, Y1, Y1  \
	VAESENC Y8, Y2, Y2  \
	VAESENC Y8, Y3, Y3

#define ROUND1(off) \
	VMOVDQU off(AX), Y8 \
	VAESENC Y8, Y0, Y0

// ENC2 encrypts the two byte-reversed counter blocks in Y0 (result in
// Y0) with the round keys at AX, R8 rounds, last key at R9; Y15 is the
// byte-reversal mask. Clobbers Y8. lbl names the jump target that skips
// the AES-256 rounds.
#define ENC2(lbl) \
	VPSHUFB Y15, Y0, Y0 \
	VPXOR   (AX), Y0, Y0 \
	ROUND1(32)  \
	ROUND1(64)  \
	ROUND1(96)  \
	ROUND1(128) \
	ROUND1(160) \
	ROUND1(192) \
	ROUND1(224) \
	ROUND1(256) \
	ROUND1(288) \
	CMPQ R8, $10 \
	JE   lbl \
	ROUND1(320) \
	ROUND1(352) \
	ROUND1(384) \
	ROUND1(416) \
lbl: \
	VMOVDQU (R9), Y8 \
	VAESENCLAST Y8, Y0, Y0

// func ctrBlocks(rk *byte, rounds int, ctr *[16]byte, dst, src *byte, n int)
//
// CTR mode over n whole blocks: dst[i] = src[i] XOR E(K, ctr+i), with the
// low 32 bits of ctr incremented big-endian modulo 2^32 (inc32). ctr is
// left at ctr+n. rk holds rounds+1 round keys of 32 bytes each (a round
// key in both lanes). dst and src are equal or do not overlap.
TEXT ·ctrBlocks(SB), NOSPLIT, $0-48
	MOVQ rk+0(FP), AX
	MOVQ rounds+8(FP), R8
	MOVQ ctr+16(FP), BX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ n+40(FP), CX

	MOVQ R8, R9
	SHLQ $5, R9
	ADDQ AX, R9               // R9 = last round key

	VMOVDQU bswapMask<>(SB), Y15
	VMOVDQU ctrTwo<>(SB), Y14
	VBROADCASTI128 (BX), Y12
	VPSHUFB Y15, Y12, Y12
	VPADDD  ctrLanes<>(SB), Y12, Y12 // lanes: ctr, ctr+1

ctr8:
	CMPQ CX, $8
	JB   ctr2
	VMOVDQU Y12, Y0
	VPADDD  Y14, Y0, Y1
	VPADDD  Y14, Y1, Y2
	VPADDD  Y14, Y2, Y3
	VPADDD  Y14, Y3, Y12
	VMOVDQU (AX), Y8
	VPSHUFB Y15, Y0, Y0
	VPSHUFB Y15, Y1, Y1
	VPSHUFB Y15, Y2, Y2
	VPSHUFB Y15, Y3, Y3
	VPXOR   Y8, Y0, Y0
	VPXOR   Y8, Y1, Y1
	VPXOR   Y8, Y2, Y2
	VPXOR   Y8, Y3, Y3
	ROUND4(32)
	ROUND4(64)
	ROUND4(96)
	ROUND4(128)
	ROUND4(160)
	ROUND4(192)
	ROUND4(224)
	ROUND4(256)
	ROUND4(288)
	CMPQ R8, $10
	JE   ctr8last
	ROUND4(320)
	ROUND4(352)
	ROUND4(384)
	ROUND4(416)

ctr8last:
	VMOVDQU (R9), Y8
	VAESENCLAST Y8, Y0, Y0
	VAESENCLAST Y8, Y1, Y1
	VAESENCLAST Y8, Y2, Y2
	VAESENCLAST Y8, Y3, Y3
	VPXOR   (SI), Y0, Y0
	VPXOR   32(SI), Y1, Y1
	VPXOR   64(SI), Y2, Y2
	VPXOR   96(SI), Y3, Y3
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $8, CX
	JMP  ctr8

ctr2:
	CMPQ CX, $2
	JB   ctr1
	VMOVDQU Y12, Y0
	VPADDD  Y14, Y12, Y12
	ENC2(ctr2last)
	VPXOR   (SI), Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $2, CX
	JMP  ctr2

ctr1:
	TESTQ CX, CX
	JZ    ctrDone
	VMOVDQU Y12, Y0
	VPADDD  ctrOne<>(SB), Y12, Y12
	ENC2(ctr1last)
	VPXOR   (SI), X0, X0
	VMOVDQU X0, (DI)

ctrDone:
	VPSHUFB X15, X12, X12
	VMOVDQU X12, (BX)
	VZEROUPPER
	RET

// REDUCE folds the 256-bit product hi:lo (lo in L, hi in H, 128-bit X
// registers) modulo the GHASH polynomial into L, with P holding gcmPoly:
// twice, multiply the low qword by 0xC2<<56 and add it to the qword-swapped
// value; then add hi. T is a temporary.
#define REDUCE(L, H, P, T) \
	VPCLMULQDQ $0x10, P, L, T \
	VPSHUFD    $0x4e, L, L    \
	VPXOR      T, L, L        \
	VPCLMULQDQ $0x10, P, L, T \
	VPSHUFD    $0x4e, L, L    \
	VPXOR      T, L, L        \
	VPXOR      H, L, L

// MULACC multiplies the (byte-reflected) blocks in A by the powers in B,
// lane by lane, and adds the partial products into LO, HI and MID
// (schoolbook: four carry-less products per lane). A is clobbered; T is a
// temporary. Works on X or Y registers.
#define MULACC(A, B, LO, HI, MID, T) \
	VPCLMULQDQ $0x00, B, A, T \
	VPXOR      T, LO, LO      \
	VPCLMULQDQ $0x11, B, A, T \
	VPXOR      T, HI, HI      \
	VPCLMULQDQ $0x01, B, A, T \
	VPXOR      T, MID, MID    \
	VPCLMULQDQ $0x10, B, A, T \
	VPXOR      T, MID, MID

// MULFIRST is MULACC into fresh LO, HI and MID.
#define MULFIRST(A, B, LO, HI, MID, T) \
	VPCLMULQDQ $0x00, B, A, LO \
	VPCLMULQDQ $0x11, B, A, HI \
	VPCLMULQDQ $0x01, B, A, MID \
	VPCLMULQDQ $0x10, B, A, T  \
	VPXOR      T, MID, MID

// MIDFOLD adds the 128-bit middle product MID (bits 64..191) into LO and HI.
#define MIDFOLD(LO, HI, MID, T) \
	VPSLLDQ $8, MID, T   \
	VPSRLDQ $8, MID, MID \
	VPXOR   T, LO, LO    \
	VPXOR   MID, HI, HI

// KMULACC is MULACC with Karatsuba's three products per lane: lo, hi and
// (a.lo^a.hi)(b.lo^b.hi), BK holding b.lo^b.hi in each qword (the
// table after the powers). The middle sums become the real middle product
// in KMIDFOLD. A is clobbered; T is a temporary.
#define KMULACC(A, B, BK, LO, HI, MID, T) \
	VPCLMULQDQ $0x00, B, A, T \
	VPXOR      T, LO, LO      \
	VPCLMULQDQ $0x11, B, A, T \
	VPXOR      T, HI, HI      \
	VPSHUFD    $0x4e, A, T    \
	VPXOR      T, A, A        \
	VPCLMULQDQ $0x00, BK, A, A \
	VPXOR      A, MID, MID

// KMULFIRST is KMULACC into fresh LO, HI and MID.
#define KMULFIRST(A, B, BK, LO, HI, MID, T) \
	VPCLMULQDQ $0x00, B, A, LO \
	VPCLMULQDQ $0x11, B, A, HI \
	VPSHUFD    $0x4e, A, T     \
	VPXOR      T, A, A         \
	VPCLMULQDQ $0x00, BK, A, MID

// KMIDFOLD turns Karatsuba's middle sum into the middle product
// (MID ^= LO ^ HI) and adds it into LO and HI like MIDFOLD.
#define KMIDFOLD(LO, HI, MID, T) \
	VPXOR LO, MID, MID \
	VPXOR HI, MID, MID \
	MIDFOLD(LO, HI, MID, T)

// func ghashInit(pow *[512]byte, h *[16]byte)
//
// pow = H^16, H^15, ..., H^1 (16 bytes each, byte-reflected and multiplied
// by x as the multiplication above expects), from H = E(K, 0^128), then at
// pow+256 the Karatsuba table: lo^hi of each power, in both qwords.
TEXT ·ghashInit(SB), NOSPLIT, $0-16
	MOVQ pow+0(FP), DI
	MOVQ h+8(FP), SI
	VMOVDQU gcmPoly<>(SB), X14
	VMOVDQU (SI), X0
	VPSHUFB bswapMask<>(SB), X0, X0
	// H<<1 mod P, without a branch on H's top bit: the mask is all ones
	// exactly when it is set.
	VPSHUFD $0xff, X0, X1
	VPSRAD  $31, X1, X1
	VPAND   X14, X1, X1
	VPSRLQ  $63, X0, X2
	VPSLLDQ $8, X2, X2
	VPSLLQ  $1, X0, X0
	VPXOR   X2, X0, X0
	VPXOR   X1, X0, X0
	VMOVDQU X0, 240(DI)
	VMOVDQU X0, X3
	MOVQ $224, CX

powLoop:
	VMOVDQU X3, X4
	MULFIRST(X4, X0, X5, X6, X7, X8)
	MIDFOLD(X5, X6, X7, X8)
	REDUCE(X5, X6, X14, X8)
	VMOVDQU X5, X3
	VMOVDQU X3, (DI)(CX*1)
	SUBQ $16, CX
	JAE  powLoop
	// The Karatsuba table: lo^hi of each power, in both qwords.
	MOVQ $240, CX

kLoop:
	VMOVDQU (DI)(CX*1), X1
	VPSHUFD $0x4e, X1, X2
	VPXOR   X2, X1, X1
	VMOVDQU X1, 256(DI)(CX*1)
	SUBQ $16, CX
	JAE  kLoop
	VZEROUPPER
	RET

// tailMask: loaded from tailMask+16-r, it keeps the first r bytes of a
// block and clears the rest.
DATA tailMask<>+0x00(SB)/8, $0xffffffffffffffff
DATA tailMask<>+0x08(SB)/8, $0xffffffffffffffff
DATA tailMask<>+0x10(SB)/8, $0
DATA tailMask<>+0x18(SB)/8, $0
GLOBL tailMask<>(SB), (NOPTR+RODATA), $32

// ctrOneTwo turns a byte-reversed J0 in both lanes into J0+1, J0+2.
DATA ctrOneTwo<>+0x00(SB)/8, $1
DATA ctrOneTwo<>+0x08(SB)/8, $0
DATA ctrOneTwo<>+0x10(SB)/8, $2
DATA ctrOneTwo<>+0x18(SB)/8, $0
GLOBL ctrOneTwo<>(SB), (NOPTR+RODATA), $32

// CTR8START takes the next eight counter blocks from Y12 (advancing it),
// byte-reverses them into Y0-Y3 and adds round key 0.
#define CTR8START \
	VMOVDQU Y12, Y0                  \
	VPADDD  ctrTwo<>(SB), Y0, Y1     \
	VPADDD  ctrTwo<>(SB), Y1, Y2     \
	VPADDD  ctrTwo<>(SB), Y2, Y3     \
	VPADDD  ctrTwo<>(SB), Y3, Y12    \
	VMOVDQU (AX), Y8                 \
	VPSHUFB Y15, Y0, Y0              \
	VPSHUFB Y15, Y1, Y1              \
	VPSHUFB Y15, Y2, Y2              \
	VPSHUFB Y15, Y3, Y3              \
	VPXOR   Y8, Y0, Y0               \
	VPXOR   Y8, Y1, Y1               \
	VPXOR   Y8, Y2, Y2               \
	VPXOR   Y8, Y3, Y3

// CTR8FINISH runs the last round, XORs the keystream into 128 bytes at SI
// and stores them at DI.
#define CTR8FINISH \
	VMOVDQU (R9), Y8         \
	VAESENCLAST Y8, Y0, Y0   \
	VAESENCLAST Y8, Y1, Y1   \
	VAESENCLAST Y8, Y2, Y2   \
	VAESENCLAST Y8, Y3, Y3   \
	VPXOR   (SI), Y0, Y0     \
	VPXOR   32(SI), Y1, Y1   \
	VPXOR   64(SI), Y2, Y2   \
	VPXOR   96(SI), Y3, Y3   \
	VMOVDQU Y0, (DI)         \
	VMOVDQU Y1, 32(DI)       \
	VMOVDQU Y2, 64(DI)       \
	VMOVDQU Y3, 96(DI)

// GHFIRST, GHNEXT and GHREDUCE are the 8-block GHASH of 128 bytes at DX
// into X11 (powers at R10, Y14 = gcmPoly), split so that they can be
// interleaved with AES rounds. Temporaries Y4-Y7, Y9, X10.
#define GHFIRST \
	VMOVDQU (DX), Y4      \
	VPSHUFB Y15, Y4, Y4   \
	VPXOR   Y11, Y4, Y4   \
	KMULFIRST(Y4, (R10), 256(R10), Y5, Y6, Y7, Y9)

#define GHNEXT(off) \
	VMOVDQU off(DX), Y4   \
	VPSHUFB Y15, Y4, Y4   \
	KMULACC(Y4, off(R10), off+256(R10), Y5, Y6, Y7, Y9)

#define GHREDUCE \
	VEXTRACTI128 $1, Y5, X10 \
	VPXOR X10, X5, X5        \
	VEXTRACTI128 $1, Y6, X10 \
	VPXOR X10, X6, X6        \
	VEXTRACTI128 $1, Y7, X10 \
	VPXOR X10, X7, X7        \
	KMIDFOLD(X5, X6, X7, X10) \
	REDUCE(X5, X6, X14, X10) \
	VMOVDQU X5, X11

// GH1 absorbs the byte-reversed block in X4 into X11 (times H^1).
#define GH1 \
	VPXOR X11, X4, X4 \
	KMULFIRST(X4, 112(R10), 368(R10), X5, X6, X7, X9) \
	KMIDFOLD(X5, X6, X7, X10) \
	REDUCE(X5, X6, X14, X10) \
	VMOVDQU X5, X11

// The 16-block loop's registers: AES state Y0-Y7, round key Y8; GHASH
// data Y9, accumulators Y10-Y12, temporary Y13, state X14; Y15 the
// byte-reversal mask. The counter pair lives in st.ctrv and E(K, J0) in
// st.tag meanwhile; the reduction constant is a memory operand.
#define ROUND8(off) \
	VMOVDQU off(AX), Y8 \
	VAESENC Y8, Y0, Y0  \
	VAESENC Y8, Y1, Y1  \
	VAESENC Y8, Y2, Y2  \
	VAESENC Y8, Y3, Y3  \
	VAESENC Y8, Y4, Y4  \
	VAESENC Y8, Y5, Y5  \
	VAESENC Y8, Y6, Y6  \
	VAESENC Y8, Y7, Y7

#define CTR16START \
	VMOVDQU sealState_ctrv(BX), Y0 \
	VPADDD  ctrTwo<>(SB), Y0, Y1   \
	VPADDD  ctrTwo<>(SB), Y1, Y2   \
	VPADDD  ctrTwo<>(SB), Y2, Y3   \
	VPADDD  ctrTwo<>(SB), Y3, Y4   \
	VPADDD  ctrTwo<>(SB), Y4, Y5   \
	VPADDD  ctrTwo<>(SB), Y5, Y6   \
	VPADDD  ctrTwo<>(SB), Y6, Y7   \
	VPADDD  ctrTwo<>(SB), Y7, Y8   \
	VMOVDQU Y8, sealState_ctrv(BX) \
	VMOVDQU (AX), Y8    \
	VPSHUFB Y15, Y0, Y0 \
	VPSHUFB Y15, Y1, Y1 \
	VPSHUFB Y15, Y2, Y2 \
	VPSHUFB Y15, Y3, Y3 \
	VPSHUFB Y15, Y4, Y4 \
	VPSHUFB Y15, Y5, Y5 \
	VPSHUFB Y15, Y6, Y6 \
	VPSHUFB Y15, Y7, Y7 \
	VPXOR   Y8, Y0, Y0  \
	VPXOR   Y8, Y1, Y1  \
	VPXOR   Y8, Y2, Y2  \
	VPXOR   Y8, Y3, Y3  \
	VPXOR   Y8, Y4, Y4  \
	VPXOR   Y8, Y5, Y5  \
	VPXOR   Y8, Y6, Y6  \
	VPXOR   Y8, Y7, Y7

#define CTR16FINISH \
	VMOVDQU (R9), Y8       \
	VAESENCLAST Y8, Y0, Y0 \
	VAESENCLAST Y8, Y1, Y1 \
	VAESENCLAST Y8, Y2, Y2 \
	VAESENCLAST Y8, Y3, Y3 \
	VAESENCLAST Y8, Y4, Y4 \
	VAESENCLAST Y8, Y5, Y5 \
	VAESENCLAST Y8, Y6, Y6 \
	VAESENCLAST Y8, Y7, Y7 \
	VPXOR   (SI), Y0, Y0   \
	VPXOR   32(SI), Y1, Y1 \
	VPXOR   64(SI), Y2, Y2 \
	VPXOR   96(SI), Y3, Y3 \
	VPXOR   128(SI), Y4, Y4 \
	VPXOR   160(SI), Y5, Y5 \
	VPXOR   192(SI), Y6, Y6 \
	VPXOR   224(SI), Y7, Y7 \
	VMOVDQU Y0, (DI)       \
	VMOVDQU Y1, 32(DI)     \
	VMOVDQU Y2, 64(DI)     \
	VMOVDQU Y3, 96(DI)     \
	VMOVDQU Y4, 128(DI)    \
	VMOVDQU Y5, 160(DI)    \
	VMOVDQU Y6, 192(DI)    \
	VMOVDQU Y7, 224(DI)

// G16FIRST, G16NEXT and G16REDUCE hash the 256 bytes at DX into X14 with
// H^16..H^1 (at R13) and one reduction.
#define G16FIRST \
	VMOVDQU (DX), Y9    \
	VPSHUFB Y15, Y9, Y9 \
	VPXOR   Y14, Y9, Y9 \
	KMULFIRST(Y9, (R13), 256(R13), Y10, Y11, Y12, Y13)

#define G16NEXT(off) \
	VMOVDQU off(DX), Y9 \
	VPSHUFB Y15, Y9, Y9 \
	KMULACC(Y9, off(R13), off+256(R13), Y10, Y11, Y12, Y13)

#define G16REDUCE \
	VEXTRACTI128 $1, Y10, X13 \
	VPXOR X13, X10, X10       \
	VEXTRACTI128 $1, Y11, X13 \
	VPXOR X13, X11, X11       \
	VEXTRACTI128 $1, Y12, X13 \
	VPXOR X13, X12, X12       \
	KMIDFOLD(X10, X11, X12, X13) \
	VPCLMULQDQ $0x10, gcmPoly<>(SB), X10, X13 \
	VPSHUFD    $0x4e, X10, X10 \
	VPXOR      X13, X10, X10   \
	VPCLMULQDQ $0x10, gcmPoly<>(SB), X10, X13 \
	VPSHUFD    $0x4e, X10, X10 \
	VPXOR      X13, X10, X10   \
	VPXOR      X11, X10, X10   \
	VMOVDQU    X10, X14

// func ghashBlocks(pow *[512]byte, y *[16]byte, data *byte, n int)
//
// Absorbs n whole 16-byte blocks into the GHASH state y (kept
// byte-reflected between calls): sixteen blocks at a time with one
// reduction, then eight, then the remaining n mod 8 blocks the same way
// with the matching lower powers.
TEXT ·ghashBlocks(SB), NOSPLIT, $0-32
	MOVQ pow+0(FP), DI
	ADDQ $128, DI // H^8..H^1
	MOVQ y+8(FP), BX
	MOVQ data+16(FP), SI
	MOVQ n+24(FP), CX

	VMOVDQU bswapMask<>(SB), Y15
	VMOVDQU gcmPoly<>(SB), Y14
	VMOVDQU (BX), X14 // upper lane zero
	LEAQ    -128(DI), R13 // H^16..H^1
	MOVQ    SI, DX

gh16:
	CMPQ CX, $16
	JB   gh16done
	G16FIRST
	G16NEXT(32)
	G16NEXT(64)
	G16NEXT(96)
	G16NEXT(128)
	G16NEXT(160)
	G16NEXT(192)
	G16NEXT(224)
	G16REDUCE
	ADDQ $256, DX
	SUBQ $16, CX
	JMP  gh16

gh16done:
	MOVQ    DX, SI
	VMOVDQU X14, X0
	VMOVDQU gcmPoly<>(SB), Y14

gh8:
	CMPQ CX, $8
	JB   ghTail
	VMOVDQU (SI), Y1
	VPSHUFB Y15, Y1, Y1
	VPXOR   Y0, Y1, Y1
	KMULFIRST(Y1, (DI), 256(DI), Y3, Y4, Y5, Y6)
	VMOVDQU 32(SI), Y1
	VPSHUFB Y15, Y1, Y1
	KMULACC(Y1, 32(DI), 288(DI), Y3, Y4, Y5, Y6)
	VMOVDQU 64(SI), Y1
	VPSHUFB Y15, Y1, Y1
	KMULACC(Y1, 64(DI), 320(DI), Y3, Y4, Y5, Y6)
	VMOVDQU 96(SI), Y1
	VPSHUFB Y15, Y1, Y1
	KMULACC(Y1, 96(DI), 352(DI), Y3, Y4, Y5, Y6)
	VEXTRACTI128 $1, Y3, X6
	VPXOR X6, X3, X3
	VEXTRACTI128 $1, Y4, X6
	VPXOR X6, X4, X4
	VEXTRACTI128 $1, Y5, X6
	VPXOR X6, X5, X5
	KMIDFOLD(X3, X4, X5, X6)
	REDUCE(X3, X4, X14, X6)
	VMOVDQU X3, X0
	ADDQ $128, SI
	SUBQ $8, CX
	JMP  gh8

ghTail:
	TESTQ CX, CX
	JZ    ghDone
	// Block j of the n left is multiplied by H^(n-j), at pow[8-n+j].
	MOVQ $8, DX
	SUBQ CX, DX
	SHLQ $4, DX
	ADDQ DI, DX
	VMOVDQU (SI), X1
	VPSHUFB X15, X1, X1
	VPXOR   X0, X1, X1
	KMULFIRST(X1, (DX), 256(DX), X3, X4, X5, X6)
	ADDQ $16, SI
	ADDQ $16, DX
	DECQ CX

ghTailLoop:
	JZ ghTailReduce
	VMOVDQU (SI), X1
	VPSHUFB X15, X1, X1
	KMULACC(X1, (DX), 256(DX), X3, X4, X5, X6)
	ADDQ $16, SI
	ADDQ $16, DX
	DECQ CX
	JMP  ghTailLoop

ghTailReduce:
	KMIDFOLD(X3, X4, X5, X6)
	REDUCE(X3, X4, X14, X6)
	VMOVDQU X3, X0

ghDone:
	VMOVDQU X0, (BX)
	VZEROUPPER
	RET

// func cpuid7ecx() uint32
//
// CPUID leaf 7 subleaf 0, register ECX (VAES is bit 9, VPCLMULQDQ bit 10).
// The caller checks that leaf 7 exists (x/sys/cpu's HasAVX2 implies it).
TEXT ·cpuid7ecx(SB), NOSPLIT, $0-4
	MOVL $7, AX
	MOVL $0, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

// func spinAdds(n int)
//
// Runs 8n dependent 64-bit additions, one cycle each on every x86-64 core
// (latency 1): the benchmarks time it to measure the core clock, for
// cycles per byte. Not used by the cipher.
TEXT ·spinAdds(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	XORQ AX, AX

spin:
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	DECQ CX
	JNZ  spin
	RET

// func gcmSeal(k *gcm, st *sealState, dst, src *byte, n, aadInline, tailLen int)
//
// The whole of Seal after the Go wrapper's checks: E(K, J0) from st.ctr,
// GHASH from st.y (plus st.aad if aadInline is 1), CTR over n whole blocks
// from src to dst stitched with the GHASH of the ciphertext (eight blocks
// of AES per iteration interleaved with the GHASH of the previous eight),
// then the tailLen-byte (< 16) tail in st.tail (encrypted in place, its
// padding cleared), the length block st.lens, and st.tag.
TEXT ·gcmSeal(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), AX
	MOVQ st+8(FP), BX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), CX
	MOVQ gcm_rounds(AX), R8
	LEAQ gcm_pow+128(AX), R10 // H^8..H^1
	LEAQ gcm_pow(AX), R13     // H^16..H^1
	LEAQ gcm_rk(AX), AX
	MOVQ R8, R9
	SHLQ $5, R9
	ADDQ AX, R9

	VMOVDQU bswapMask<>(SB), Y15
	VMOVDQU gcmPoly<>(SB), Y14

	// Y12 = J0+1, J0+2 (byte-reversed); X13 = E(K, J0).
	VBROADCASTI128 sealState_ctr(BX), Y12
	VPSHUFB Y15, Y12, Y12
	VMOVDQU Y12, Y0
	VPADDD  ctrOneTwo<>(SB), Y12, Y12
	ENC2(sealJ0last)
	VMOVDQU X0, X13

	VMOVDQU sealState_y(BX), X11
	MOVQ aadInline+40(FP), DX
	TESTQ DX, DX
	JZ    sealMain16
	VMOVDQU sealState_aad(BX), X4
	VPSHUFB X15, X4, X4
	GH1

sealMain16:
	// 16 blocks per iteration while at least 16 are left: AES on eight
	// registers, stitched with the GHASH of the previous 256 bytes.
	CMPQ CX, $16
	JB   sealMain
	VMOVDQU Y12, sealState_ctrv(BX)
	VMOVDQU X13, sealState_tag(BX)
	VMOVDQU X11, X14
	CTR16START
	ROUND8(32)
	ROUND8(64)
	ROUND8(96)
	ROUND8(128)
	ROUND8(160)
	ROUND8(192)
	ROUND8(224)
	ROUND8(256)
	ROUND8(288)
	CMPQ R8, $10
	JE   s16FirstLast
	ROUND8(320)
	ROUND8(352)
	ROUND8(384)
	ROUND8(416)

s16FirstLast:
	CTR16FINISH
	MOVQ DI, DX
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $16, CX

s16Loop:
	CMPQ CX, $16
	JB   s16Drain
	CTR16START
	ROUND8(32)
	ROUND8(64)
	G16FIRST
	ROUND8(96)
	G16NEXT(32)
	ROUND8(128)
	G16NEXT(64)
	ROUND8(160)
	G16NEXT(96)
	ROUND8(192)
	G16NEXT(128)
	ROUND8(224)
	G16NEXT(160)
	ROUND8(256)
	G16NEXT(192)
	G16NEXT(224)
	ROUND8(288)
	G16REDUCE
	CMPQ R8, $10
	JE   s16LoopLast
	ROUND8(320)
	ROUND8(352)
	ROUND8(384)
	ROUND8(416)

s16LoopLast:
	CTR16FINISH
	MOVQ DI, DX
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $16, CX
	JMP  s16Loop

s16Drain:
	G16FIRST
	G16NEXT(32)
	G16NEXT(64)
	G16NEXT(96)
	G16NEXT(128)
	G16NEXT(160)
	G16NEXT(192)
	G16NEXT(224)
	G16REDUCE
	// Back to the 8-block code's registers.
	VMOVDQU X14, X11
	VMOVDQU sealState_ctrv(BX), Y12
	VMOVDQU sealState_tag(BX), X13
	VMOVDQU gcmPoly<>(SB), Y14

sealMain:
	CMPQ CX, $8
	JB   sealRest
	CTR8START
	ROUND4(32)
	ROUND4(64)
	ROUND4(96)
	ROUND4(128)
	ROUND4(160)
	ROUND4(192)
	ROUND4(224)
	ROUND4(256)
	ROUND4(288)
	CMPQ R8, $10
	JE   sealFirstLast
	ROUND4(320)
	ROUND4(352)
	ROUND4(384)
	ROUND4(416)

sealFirstLast:
	CTR8FINISH
	MOVQ DI, DX
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $8, CX

sealLoop:
	// DX: the previous 128 bytes of ciphertext, hashed while the next
	// 128 bytes are encrypted.
	CMPQ CX, $8
	JB   sealDrain
	CTR8START
	GHFIRST
	ROUND4(32)
	ROUND4(64)
	GHNEXT(32)
	ROUND4(96)
	ROUND4(128)
	GHNEXT(64)
	ROUND4(160)
	ROUND4(192)
	GHNEXT(96)
	ROUND4(224)
	ROUND4(256)
	GHREDUCE
	ROUND4(288)
	CMPQ R8, $10
	JE   sealLoopLast
	ROUND4(320)
	ROUND4(352)
	ROUND4(384)
	ROUND4(416)

sealLoopLast:
	CTR8FINISH
	MOVQ DI, DX
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $8, CX
	JMP  sealLoop

sealDrain:
	GHFIRST
	GHNEXT(32)
	GHNEXT(64)
	GHNEXT(96)
	GHREDUCE

sealRest:
	// CX < 8 whole blocks left: CTR them, then hash them with one
	// reduction (block j of k times H^(k-j)).
	TESTQ CX, CX
	JZ    sealTail
	MOVQ  DI, R11
	MOVQ  CX, R12

sealRest2:
	CMPQ CX, $2
	JB   sealRest1
	VMOVDQU Y12, Y0
	VPADDD  ctrTwo<>(SB), Y12, Y12
	ENC2(sealRest2last)
	VPXOR   (SI), Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $2, CX
	JMP  sealRest2

sealRest1:
	TESTQ CX, CX
	JZ    sealRestHash
	VMOVDQU Y12, Y0
	VPADDD  ctrOne<>(SB), Y12, Y12
	ENC2(sealRest1last)
	VPXOR   (SI), X0, X0
	VMOVDQU X0, (DI)

sealRestHash:
	MOVQ $8, DX
	SUBQ R12, DX
	SHLQ $4, DX
	ADDQ R10, DX
	VMOVDQU (R11), X4
	VPSHUFB X15, X4, X4
	VPXOR   X11, X4, X4
	KMULFIRST(X4, (DX), 256(DX), X5, X6, X7, X9)
	ADDQ $16, R11
	ADDQ $16, DX
	DECQ R12

sealRestLoop:
	JZ sealRestReduce
	VMOVDQU (R11), X4
	VPSHUFB X15, X4, X4
	KMULACC(X4, (DX), 256(DX), X5, X6, X7, X9)
	ADDQ $16, R11
	ADDQ $16, DX
	DECQ R12
	JMP  sealRestLoop

sealRestReduce:
	KMIDFOLD(X5, X6, X7, X10)
	REDUCE(X5, X6, X14, X10)
	VMOVDQU X5, X11

sealTail:
	// The tail block and the length block, hashed with one reduction
	// (tail times H^2, lengths times H^1); without a tail, the length
	// block alone.
	MOVQ tailLen+48(FP), DX
	VMOVDQU sealState_lens(BX), X1
	VPSHUFB X15, X1, X1
	TESTQ DX, DX
	JZ    sealLens
	VMOVDQU Y12, Y0
	ENC2(sealTailLast)
	VPXOR   sealState_tail(BX), X0, X0
	LEAQ    tailMask<>+16(SB), R11
	SUBQ    DX, R11
	VPAND   (R11), X0, X0
	VMOVDQU X0, sealState_tail(BX)
	VPSHUFB X15, X0, X4
	VPXOR   X11, X4, X4
	KMULFIRST(X4, 96(R10), 352(R10), X5, X6, X7, X9)
	KMULACC(X1, 112(R10), 368(R10), X5, X6, X7, X9)
	KMIDFOLD(X5, X6, X7, X10)
	REDUCE(X5, X6, X14, X10)
	VMOVDQU X5, X11
	JMP sealTag

sealLens:
	VMOVDQU X1, X4
	GH1

sealTag:
	VPSHUFB X15, X11, X11
	VPXOR   X13, X11, X11
	VMOVDQU X11, sealState_tag(BX)
	VZEROUPPER
	RET
