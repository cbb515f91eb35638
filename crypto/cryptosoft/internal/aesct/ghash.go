package aesct

import "encoding/binary"

// Constant-time GHASH in the style of BearSSL's ghash_ctmul64.
//
// bmul64 is a carry-less 64x64 multiplication truncated to 64 bits, built
// from ordinary integer multiplications of operands masked so that only
// every fourth bit is set. Each output bit position then receives at most
// 15 partial products within the low 64 bits (16 at bit 60, whose carry
// falls off the word), so the carries of the integer additions land in the
// "holes" and are masked away. Integer multiplication is constant-time on
// the targets Go supports (no early exit on amd64/arm64). The high half of
// the 128-bit carry-less product is obtained from the bit-reversed
// operands. A 128x128 product uses Karatsuba (3 x 2 bmul64); the reduction
// modulo x^128 + x^7 + x^2 + x + 1 is a fixed sequence of shifts and XORs.
// No secret-dependent branch or memory index is involved.

func bmul64(x, y uint64) uint64 {
	const m0, m1, m2, m3 = 0x1111111111111111, 0x2222222222222222, 0x4444444444444444, 0x8888888888888888
	x0, x1, x2, x3 := x&m0, x&m1, x&m2, x&m3
	y0, y1, y2, y3 := y&m0, y&m1, y&m2, y&m3
	z0 := (x0 * y0) ^ (x1 * y3) ^ (x2 * y2) ^ (x3 * y1)
	z1 := (x0 * y1) ^ (x1 * y0) ^ (x2 * y3) ^ (x3 * y2)
	z2 := (x0 * y2) ^ (x1 * y1) ^ (x2 * y0) ^ (x3 * y3)
	z3 := (x0 * y3) ^ (x1 * y2) ^ (x2 * y1) ^ (x3 * y0)
	return (z0 & m0) | (z1 & m1) | (z2 & m2) | (z3 & m3)
}

func rev64(x uint64) uint64 {
	x = ((x & 0x5555555555555555) << 1) | ((x >> 1) & 0x5555555555555555)
	x = ((x & 0x3333333333333333) << 2) | ((x >> 2) & 0x3333333333333333)
	x = ((x & 0x0F0F0F0F0F0F0F0F) << 4) | ((x >> 4) & 0x0F0F0F0F0F0F0F0F)
	x = ((x & 0x00FF00FF00FF00FF) << 8) | ((x >> 8) & 0x00FF00FF00FF00FF)
	x = ((x & 0x0000FFFF0000FFFF) << 16) | ((x >> 16) & 0x0000FFFF0000FFFF)
	return (x << 32) | (x >> 32)
}

// ghashKey is the hash subkey H with its precomputed bit-reversed and
// Karatsuba-middle forms.
type ghashKey struct {
	h0, h1, h2    uint64
	h0r, h1r, h2r uint64
}

func (k *ghashKey) init(h *[16]byte) {
	k.h1 = binary.BigEndian.Uint64(h[0:])
	k.h0 = binary.BigEndian.Uint64(h[8:])
	k.h0r = rev64(k.h0)
	k.h1r = rev64(k.h1)
	k.h2 = k.h0 ^ k.h1
	k.h2r = k.h0r ^ k.h1r
}

func (k *ghashKey) wipe() { *k = ghashKey{} }

// mul sets (y1, y0) = (y1, y0) · H in GF(2^128) (GCM bit order).
func (k *ghashKey) mul(y1, y0 uint64) (uint64, uint64) {
	y0r := rev64(y0)
	y1r := rev64(y1)
	y2 := y0 ^ y1
	y2r := y0r ^ y1r

	z0 := bmul64(y0, k.h0)
	z1 := bmul64(y1, k.h1)
	z2 := bmul64(y2, k.h2)
	z0h := bmul64(y0r, k.h0r)
	z1h := bmul64(y1r, k.h1r)
	z2h := bmul64(y2r, k.h2r)
	z2 ^= z0 ^ z1
	z2h ^= z0h ^ z1h
	z0h = rev64(z0h) >> 1
	z1h = rev64(z1h) >> 1
	z2h = rev64(z2h) >> 1

	v0 := z0
	v1 := z0h ^ z2
	v2 := z1 ^ z2h
	v3 := z1h

	v3 = (v3 << 1) | (v2 >> 63)
	v2 = (v2 << 1) | (v1 >> 63)
	v1 = (v1 << 1) | (v0 >> 63)
	v0 = v0 << 1

	v2 ^= v0 ^ (v0 >> 1) ^ (v0 >> 2) ^ (v0 >> 7)
	v1 ^= (v0 << 63) ^ (v0 << 62) ^ (v0 << 57)
	v3 ^= v1 ^ (v1 >> 1) ^ (v1 >> 2) ^ (v1 >> 7)
	v2 ^= (v1 << 63) ^ (v1 << 62) ^ (v1 << 57)
	return v3, v2
}

// update absorbs data into the GHASH state (y1, y0); a final partial block
// is zero-padded. The loop length depends only on the public len(data).
func (k *ghashKey) update(y1, y0 uint64, data []byte) (uint64, uint64) {
	for len(data) >= 16 {
		y1 ^= binary.BigEndian.Uint64(data[0:])
		y0 ^= binary.BigEndian.Uint64(data[8:])
		y1, y0 = k.mul(y1, y0)
		data = data[16:]
	}
	if len(data) > 0 {
		var tmp [16]byte
		copy(tmp[:], data)
		y1 ^= binary.BigEndian.Uint64(tmp[0:])
		y0 ^= binary.BigEndian.Uint64(tmp[8:])
		y1, y0 = k.mul(y1, y0)
	}
	return y1, y0
}
