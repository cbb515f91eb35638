// Package aesct is a constant-time, bitsliced AES (in the style of
// BearSSL's aes_ct64) with CBC, a 4-block CTR keystream, a constant-time
// GHASH (in the style of BearSSL's ghash_ctmul64) and AES-GCM.
//
// Constant-time design: every operation on key or data bits is a fixed
// sequence of AND, XOR, NOT, shifts by constant amounts and integer
// multiplications. There are no table lookups and no branches indexed by
// secret data. The S-box is evaluated as a Boolean circuit (Boyar and
// Peralta's, 32 AND and 83 XOR/XNOR gates) over 8 bit planes; the state
// of four 16-byte blocks is held "bitsliced" in eight uint64 words, so
// that one evaluation of the circuit computes all 64 S-boxes of four
// blocks at once. ShiftRows
// and MixColumns are constant shifts/rotations of those words. The key
// schedule uses the same bitsliced S-box (SubWord) and branches only on the
// public round index and key length. Loops run over public lengths only.
package aesct

// The layout of the bitsliced state: q[i] holds bit i of every byte of
// four blocks. Within a 64-bit word, bits 16*r..16*r+15 hold row r of the
// AES state; within a row, nibble c is column c and bit b of that nibble is
// block b.

// sbox applies the AES S-box to the 64 bytes held bitsliced in q, with the
// Boyar–Peralta circuit (no lookups: constant-time).
func sbox(q *[8]uint64) {
	q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7] = sboxV(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7])
}

// sboxV is sbox on eight bit-plane values (bit 0 first), so that the round
// function can keep the state in registers.
func sboxV(q0, q1, q2, q3, q4, q5, q6, q7 uint64) (r0, r1, r2, r3, r4, r5, r6, r7 uint64) {
	x0 := q7
	x1 := q6
	x2 := q5
	x3 := q4
	x4 := q3
	x5 := q2
	x6 := q1
	x7 := q0

	// Top linear transformation.
	y14 := x3 ^ x5
	y13 := x0 ^ x6
	y9 := x0 ^ x3
	y8 := x0 ^ x5
	t0 := x1 ^ x2
	y1 := t0 ^ x7
	y4 := y1 ^ x3
	y12 := y13 ^ y14
	y2 := y1 ^ x0
	y5 := y1 ^ x6
	y3 := y5 ^ y8
	t1 := x4 ^ y12
	y15 := t1 ^ x5
	y20 := t1 ^ x1
	y6 := y15 ^ x7
	y10 := y15 ^ t0
	y11 := y20 ^ y9
	y7 := x7 ^ y11
	y17 := y10 ^ y11
	y19 := y10 ^ y8
	y16 := t0 ^ y11
	y21 := y13 ^ y16
	y18 := x0 ^ y16

	// Non-linear section.
	t2 := y12 & y15
	t3 := y3 & y6
	t4 := t3 ^ t2
	t5 := y4 & x7
	t6 := t5 ^ t2
	t7 := y13 & y16
	t8 := y5 & y1
	t9 := t8 ^ t7
	t10 := y2 & y7
	t11 := t10 ^ t7
	t12 := y9 & y11
	t13 := y14 & y17
	t14 := t13 ^ t12
	t15 := y8 & y10
	t16 := t15 ^ t12
	t17 := t4 ^ t14
	t18 := t6 ^ t16
	t19 := t9 ^ t14
	t20 := t11 ^ t16
	t21 := t17 ^ y20
	t22 := t18 ^ y19
	t23 := t19 ^ y21
	t24 := t20 ^ y18

	t25 := t21 ^ t22
	t26 := t21 & t23
	t27 := t24 ^ t26
	t28 := t25 & t27
	t29 := t28 ^ t22
	t30 := t23 ^ t24
	t31 := t22 ^ t26
	t32 := t31 & t30
	t33 := t32 ^ t24
	t34 := t23 ^ t33
	t35 := t27 ^ t33
	t36 := t24 & t35
	t37 := t36 ^ t34
	t38 := t27 ^ t36
	t39 := t29 & t38
	t40 := t25 ^ t39

	t41 := t40 ^ t37
	t42 := t29 ^ t33
	t43 := t29 ^ t40
	t44 := t33 ^ t37
	t45 := t42 ^ t41
	z0 := t44 & y15
	z1 := t37 & y6
	z2 := t33 & x7
	z3 := t43 & y16
	z4 := t40 & y1
	z5 := t29 & y7
	z6 := t42 & y11
	z7 := t45 & y17
	z8 := t41 & y10
	z9 := t44 & y12
	z10 := t37 & y3
	z11 := t33 & y4
	z12 := t43 & y13
	z13 := t40 & y5
	z14 := t29 & y2
	z15 := t42 & y9
	z16 := t45 & y14
	z17 := t41 & y8

	// Bottom linear transformation.
	t46 := z15 ^ z16
	t47 := z10 ^ z11
	t48 := z5 ^ z13
	t49 := z9 ^ z10
	t50 := z2 ^ z12
	t51 := z2 ^ z5
	t52 := z7 ^ z8
	t53 := z0 ^ z3
	t54 := z6 ^ z7
	t55 := z16 ^ z17
	t56 := z12 ^ t48
	t57 := t50 ^ t53
	t58 := z4 ^ t46
	t59 := z3 ^ t54
	t60 := t46 ^ t57
	t61 := z14 ^ t57
	t62 := t52 ^ t58
	t63 := t49 ^ t58
	t64 := z4 ^ t59
	t65 := t61 ^ t62
	t66 := z1 ^ t63
	s0 := t59 ^ t63
	s6 := t56 ^ ^t62
	s7 := t48 ^ ^t60
	t67 := t64 ^ t65
	s3 := t53 ^ t66
	s4 := t51 ^ t66
	s5 := t47 ^ t65
	s1 := t64 ^ ^s3
	s2 := t55 ^ ^t67

	return s7, s6, s5, s4, s3, s2, s1, s0
}

// invAffine maps every byte y to A⁻¹(y ⊕ 0x63), where A is the linear part
// of the S-box affine transform. Since S(x) = A(x⁻¹) ⊕ 0x63,
// invAffine∘S∘invAffine is the inverse S-box.
func invAffine(q *[8]uint64) {
	q0 := ^q[0]
	q1 := ^q[1]
	q2 := q[2]
	q3 := q[3]
	q4 := q[4]
	q5 := ^q[5]
	q6 := ^q[6]
	q7 := q[7]
	q[7] = q1 ^ q4 ^ q6
	q[6] = q0 ^ q3 ^ q5
	q[5] = q7 ^ q2 ^ q4
	q[4] = q6 ^ q1 ^ q3
	q[3] = q5 ^ q0 ^ q2
	q[2] = q4 ^ q7 ^ q1
	q[1] = q3 ^ q6 ^ q0
	q[0] = q2 ^ q5 ^ q7
}

// invSbox applies the inverse S-box (constant-time, no lookups).
func invSbox(q *[8]uint64) {
	invAffine(q)
	sbox(q)
	invAffine(q)
}

func swapn(cl, ch uint64, s uint, x, y *uint64) {
	a, b := *x, *y
	*x = (a & cl) | ((b & cl) << s)
	*y = ((a & ch) >> s) | (b & ch)
}

// ortho transposes between the "interleaved" and the bitsliced layouts
// (it is an involution).
func ortho(q *[8]uint64) {
	const (
		l2, h2 = 0x5555555555555555, 0xAAAAAAAAAAAAAAAA
		l4, h4 = 0x3333333333333333, 0xCCCCCCCCCCCCCCCC
		l8, h8 = 0x0F0F0F0F0F0F0F0F, 0xF0F0F0F0F0F0F0F0
	)
	swapn(l2, h2, 1, &q[0], &q[1])
	swapn(l2, h2, 1, &q[2], &q[3])
	swapn(l2, h2, 1, &q[4], &q[5])
	swapn(l2, h2, 1, &q[6], &q[7])

	swapn(l4, h4, 2, &q[0], &q[2])
	swapn(l4, h4, 2, &q[1], &q[3])
	swapn(l4, h4, 2, &q[4], &q[6])
	swapn(l4, h4, 2, &q[5], &q[7])

	swapn(l8, h8, 4, &q[0], &q[4])
	swapn(l8, h8, 4, &q[1], &q[5])
	swapn(l8, h8, 4, &q[2], &q[6])
	swapn(l8, h8, 4, &q[3], &q[7])
}

// interleaveIn spreads the four little-endian words of one block into two
// 64-bit words (even bytes of each column in q0, odd in q1).
func interleaveIn(w0, w1, w2, w3 uint32) (q0, q1 uint64) {
	x0, x1, x2, x3 := uint64(w0), uint64(w1), uint64(w2), uint64(w3)
	x0 |= x0 << 16
	x1 |= x1 << 16
	x2 |= x2 << 16
	x3 |= x3 << 16
	x0 &= 0x0000FFFF0000FFFF
	x1 &= 0x0000FFFF0000FFFF
	x2 &= 0x0000FFFF0000FFFF
	x3 &= 0x0000FFFF0000FFFF
	x0 |= x0 << 8
	x1 |= x1 << 8
	x2 |= x2 << 8
	x3 |= x3 << 8
	x0 &= 0x00FF00FF00FF00FF
	x1 &= 0x00FF00FF00FF00FF
	x2 &= 0x00FF00FF00FF00FF
	x3 &= 0x00FF00FF00FF00FF
	return x0 | (x2 << 8), x1 | (x3 << 8)
}

// interleaveOut is the inverse of interleaveIn.
func interleaveOut(q0, q1 uint64) (w0, w1, w2, w3 uint32) {
	x0 := q0 & 0x00FF00FF00FF00FF
	x1 := q1 & 0x00FF00FF00FF00FF
	x2 := (q0 >> 8) & 0x00FF00FF00FF00FF
	x3 := (q1 >> 8) & 0x00FF00FF00FF00FF
	x0 |= x0 >> 8
	x1 |= x1 >> 8
	x2 |= x2 >> 8
	x3 |= x3 >> 8
	x0 &= 0x0000FFFF0000FFFF
	x1 &= 0x0000FFFF0000FFFF
	x2 &= 0x0000FFFF0000FFFF
	x3 &= 0x0000FFFF0000FFFF
	return uint32(x0) | uint32(x0>>16), uint32(x1) | uint32(x1>>16),
		uint32(x2) | uint32(x2>>16), uint32(x3) | uint32(x3>>16)
}

func rotr32(x uint64) uint64 { return x<<32 | x>>32 }
func rotr16(x uint64) uint64 { return x>>16 | x<<48 }

// ShiftRows rotates row r of a bit plane (a 16-bit group of four column
// nibbles) by r nibbles. Each rotation is two "delta swaps" (swap the bit
// groups selected by a mask with those a fixed distance above): first
// nibbles two apart (row 1: columns 0,2; row 2: both pairs; row 3: columns
// 1,3), then adjacent nibbles (rows 1 and 3: both pairs). Constant masks
// and shifts only.
const (
	srMask8 = 0x00F000FF000F0000
	srMask4 = 0x0F0F00000F0F0000
)

// shiftRow is ShiftRows on one bit plane.
func shiftRow(x uint64) uint64 {
	t := ((x >> 8) ^ x) & srMask8
	x ^= t ^ (t << 8)
	t = ((x >> 4) ^ x) & srMask4
	return x ^ t ^ (t << 4)
}

// invShiftRow is InvShiftRows on one bit plane: the same swaps in reverse
// order.
func invShiftRow(x uint64) uint64 {
	t := ((x >> 4) ^ x) & srMask4
	x ^= t ^ (t << 4)
	t = ((x >> 8) ^ x) & srMask8
	return x ^ t ^ (t << 8)
}

// encryptSliced encrypts the bitsliced state q with the expanded key sk of
// nr rounds. The state is kept in local variables (registers) across the
// rounds.
//
// MixColumns: out_r = 2·a_r ⊕ 3·a_(r+1) ⊕ a_(r+2) ⊕ a_(r+3)
// = 2·(a_r ⊕ a_(r+1)) ⊕ a_(r+1) ⊕ (a_(r+2) ⊕ a_(r+3)). Rotating a plane by 16
// bits moves to the next row, by 32 bits to the row after that.
// Multiplication by 2 (xtime) is a fixed XOR pattern of bit planes:
// bit 0 ← bit 7, bits 1, 3, 4 ← bit (i-1) ⊕ bit 7, others ← bit (i-1).
func encryptSliced(nr int, sk []uint64, q *[8]uint64) {
	sk = sk[:(nr+1)*8]
	q0, q1, q2, q3 := q[0]^sk[0], q[1]^sk[1], q[2]^sk[2], q[3]^sk[3]
	q4, q5, q6, q7 := q[4]^sk[4], q[5]^sk[5], q[6]^sk[6], q[7]^sk[7]
	for u := 1; u < nr; u++ {
		q0, q1, q2, q3, q4, q5, q6, q7 = sboxV(q0, q1, q2, q3, q4, q5, q6, q7)
		q0, q1, q2, q3 = shiftRow(q0), shiftRow(q1), shiftRow(q2), shiftRow(q3)
		q4, q5, q6, q7 = shiftRow(q4), shiftRow(q5), shiftRow(q6), shiftRow(q7)
		r0, r1, r2, r3 := rotr16(q0), rotr16(q1), rotr16(q2), rotr16(q3)
		r4, r5, r6, r7 := rotr16(q4), rotr16(q5), rotr16(q6), rotr16(q7)
		k := sk[u*8 : u*8+8]
		q0, q1, q2, q3, q4, q5, q6, q7 =
			q7^r7^r0^rotr32(q0^r0)^k[0],
			q0^r0^q7^r7^r1^rotr32(q1^r1)^k[1],
			q1^r1^r2^rotr32(q2^r2)^k[2],
			q2^r2^q7^r7^r3^rotr32(q3^r3)^k[3],
			q3^r3^q7^r7^r4^rotr32(q4^r4)^k[4],
			q4^r4^r5^rotr32(q5^r5)^k[5],
			q5^r5^r6^rotr32(q6^r6)^k[6],
			q6^r6^r7^rotr32(q7^r7)^k[7]
	}
	q0, q1, q2, q3, q4, q5, q6, q7 = sboxV(q0, q1, q2, q3, q4, q5, q6, q7)
	k := sk[nr*8 : nr*8+8]
	q[0], q[1], q[2], q[3] = shiftRow(q0)^k[0], shiftRow(q1)^k[1], shiftRow(q2)^k[2], shiftRow(q3)^k[3]
	q[4], q[5], q[6], q[7] = shiftRow(q4)^k[4], shiftRow(q5)^k[5], shiftRow(q6)^k[6], shiftRow(q7)^k[7]
}

// invMixV is InvMixColumns on eight bit-plane values:
// out_r = 14·a ⊕ 11·b ⊕ 13·c ⊕ 9·d with b, c, d the next rows, rewritten as
// 8·(a⊕b⊕c⊕d) ⊕ 4·(a⊕c) ⊕ 2·(a⊕b) ⊕ (b⊕c⊕d), i.e. with s = a⊕b⊕c⊕d,
// x·(x·(x·s ⊕ (a⊕c)) ⊕ (a⊕b)) ⊕ (b⊕c⊕d) (Horner), all fixed XORs.
func invMixV(a0, a1, a2, a3, a4, a5, a6, a7 uint64) (o0, o1, o2, o3, o4, o5, o6, o7 uint64) {
	b0, c0 := rotr16(a0), rotr32(a0)
	w0 := b0 ^ c0 ^ rotr16(c0)
	s0, t0, u0 := a0^w0, a0^c0, a0^b0
	b1, c1 := rotr16(a1), rotr32(a1)
	w1 := b1 ^ c1 ^ rotr16(c1)
	s1, t1, u1 := a1^w1, a1^c1, a1^b1
	b2, c2 := rotr16(a2), rotr32(a2)
	w2 := b2 ^ c2 ^ rotr16(c2)
	s2, t2, u2 := a2^w2, a2^c2, a2^b2
	b3, c3 := rotr16(a3), rotr32(a3)
	w3 := b3 ^ c3 ^ rotr16(c3)
	s3, t3, u3 := a3^w3, a3^c3, a3^b3
	b4, c4 := rotr16(a4), rotr32(a4)
	w4 := b4 ^ c4 ^ rotr16(c4)
	s4, t4, u4 := a4^w4, a4^c4, a4^b4
	b5, c5 := rotr16(a5), rotr32(a5)
	w5 := b5 ^ c5 ^ rotr16(c5)
	s5, t5, u5 := a5^w5, a5^c5, a5^b5
	b6, c6 := rotr16(a6), rotr32(a6)
	w6 := b6 ^ c6 ^ rotr16(c6)
	s6, t6, u6 := a6^w6, a6^c6, a6^b6
	b7, c7 := rotr16(a7), rotr32(a7)
	w7 := b7 ^ c7 ^ rotr16(c7)
	s7, t7, u7 := a7^w7, a7^c7, a7^b7
	h := s7
	s0, s1, s2, s3, s4, s5, s6, s7 = h^t0, s0^h^t1, s1^t2, s2^h^t3, s3^h^t4, s4^t5, s5^t6, s6^t7
	h = s7
	s0, s1, s2, s3, s4, s5, s6, s7 = h^u0, s0^h^u1, s1^u2, s2^h^u3, s3^h^u4, s4^u5, s5^u6, s6^u7
	h = s7
	return h ^ w0, s0 ^ h ^ w1, s1 ^ w2, s2 ^ h ^ w3, s3 ^ h ^ w4, s4 ^ w5, s5 ^ w6, s6 ^ w7
}

// invAffineV is invAffine on values.
func invAffineV(q0, q1, q2, q3, q4, q5, q6, q7 uint64) (r0, r1, r2, r3, r4, r5, r6, r7 uint64) {
	q0, q1, q5, q6 = ^q0, ^q1, ^q5, ^q6
	return q2 ^ q5 ^ q7, q3 ^ q6 ^ q0, q4 ^ q7 ^ q1, q5 ^ q0 ^ q2, q6 ^ q1 ^ q3, q7 ^ q2 ^ q4, q0 ^ q3 ^ q5, q1 ^ q4 ^ q6
}

// decryptSliced decrypts the bitsliced state q, keeping it in local
// variables across the rounds.
func decryptSliced(nr int, sk []uint64, q *[8]uint64) {
	sk = sk[:(nr+1)*8]
	k := sk[nr*8 : nr*8+8]
	q0, q1, q2, q3 := q[0]^k[0], q[1]^k[1], q[2]^k[2], q[3]^k[3]
	q4, q5, q6, q7 := q[4]^k[4], q[5]^k[5], q[6]^k[6], q[7]^k[7]
	for u := nr - 1; u > 0; u-- {
		q0, q1, q2, q3 = invShiftRow(q0), invShiftRow(q1), invShiftRow(q2), invShiftRow(q3)
		q4, q5, q6, q7 = invShiftRow(q4), invShiftRow(q5), invShiftRow(q6), invShiftRow(q7)
		q0, q1, q2, q3, q4, q5, q6, q7 = invAffineV(q0, q1, q2, q3, q4, q5, q6, q7)
		q0, q1, q2, q3, q4, q5, q6, q7 = sboxV(q0, q1, q2, q3, q4, q5, q6, q7)
		q0, q1, q2, q3, q4, q5, q6, q7 = invAffineV(q0, q1, q2, q3, q4, q5, q6, q7)
		k = sk[u*8 : u*8+8]
		q0, q1, q2, q3, q4, q5, q6, q7 = invMixV(q0^k[0], q1^k[1], q2^k[2], q3^k[3], q4^k[4], q5^k[5], q6^k[6], q7^k[7])
	}
	q0, q1, q2, q3 = invShiftRow(q0), invShiftRow(q1), invShiftRow(q2), invShiftRow(q3)
	q4, q5, q6, q7 = invShiftRow(q4), invShiftRow(q5), invShiftRow(q6), invShiftRow(q7)
	q0, q1, q2, q3, q4, q5, q6, q7 = invAffineV(q0, q1, q2, q3, q4, q5, q6, q7)
	q0, q1, q2, q3, q4, q5, q6, q7 = sboxV(q0, q1, q2, q3, q4, q5, q6, q7)
	q0, q1, q2, q3, q4, q5, q6, q7 = invAffineV(q0, q1, q2, q3, q4, q5, q6, q7)
	q[0], q[1], q[2], q[3] = q0^sk[0], q1^sk[1], q2^sk[2], q3^sk[3]
	q[4], q[5], q[6], q[7] = q4^sk[4], q5^sk[5], q6^sk[6], q7^sk[7]
}

var rcon = [10]uint32{0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1B, 0x36}

// subWord applies the S-box to the four bytes of x via the bitsliced
// circuit (constant-time).
func subWord(x uint32) uint32 {
	var q [8]uint64
	q[0] = uint64(x)
	ortho(&q)
	sbox(&q)
	ortho(&q)
	r := uint32(q[0])
	clear(q[:])
	return r
}

// expandKey computes the bitsliced round keys of key (16, 24 or 32 bytes)
// into sk and returns the number of rounds. Branches depend only on the
// public key length and round index.
func expandKey(sk *[120]uint64, key []byte) int {
	var nr int
	switch len(key) {
	case 16:
		nr = 10
	case 24:
		nr = 12
	case 32:
		nr = 14
	default:
		return 0
	}
	nk := len(key) / 4
	nkf := (nr + 1) * 4
	var w [60]uint32
	for i := 0; i < nk; i++ {
		w[i] = uint32(key[4*i]) | uint32(key[4*i+1])<<8 | uint32(key[4*i+2])<<16 | uint32(key[4*i+3])<<24
	}
	tmp := w[nk-1]
	for i, j, k := nk, 0, 0; i < nkf; i++ {
		if j == 0 {
			tmp = tmp<<24 | tmp>>8
			tmp = subWord(tmp) ^ rcon[k]
		} else if nk > 6 && j == 4 {
			tmp = subWord(tmp)
		}
		tmp ^= w[i-nk]
		w[i] = tmp
		if j++; j == nk {
			j = 0
			k++
		}
	}
	var q [8]uint64
	for i, v := 0, 0; i < nkf; i, v = i+4, v+8 {
		q[0], q[4] = interleaveIn(w[i], w[i+1], w[i+2], w[i+3])
		q[1], q[2], q[3] = q[0], q[0], q[0]
		q[5], q[6], q[7] = q[4], q[4], q[4]
		ortho(&q)
		c0 := (q[0] & 0x1111111111111111) | (q[1] & 0x2222222222222222) |
			(q[2] & 0x4444444444444444) | (q[3] & 0x8888888888888888)
		c1 := (q[4] & 0x1111111111111111) | (q[5] & 0x2222222222222222) |
			(q[6] & 0x4444444444444444) | (q[7] & 0x8888888888888888)
		// Expand: replicate each bit of a nibble across the nibble, so
		// that every block slot of the state gets the same round key.
		for h, c := range [2]uint64{c0, c1} {
			x0 := c & 0x1111111111111111
			x1 := (c & 0x2222222222222222) >> 1
			x2 := (c & 0x4444444444444444) >> 2
			x3 := (c & 0x8888888888888888) >> 3
			sk[v+4*h+0] = x0<<4 - x0
			sk[v+4*h+1] = x1<<4 - x1
			sk[v+4*h+2] = x2<<4 - x2
			sk[v+4*h+3] = x3<<4 - x3
		}
	}
	clear(w[:])
	clear(q[:])
	return nr
}
