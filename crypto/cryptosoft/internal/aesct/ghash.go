package aesct

import (
	"encoding/binary"
	"math/bits"
)

// Constant-time GHASH (NIST SP 800-38D), after BearSSL's ghash_ctmul64
// but with full 64x64→128 products.
//
// clmul64 is a carry-less 64x64 multiplication built from ordinary integer
// multiplications (bits.Mul64) of operands masked so that only every fifth
// bit is set; the integer carries land in the four-bit "holes" between
// positions of one class and are masked away. Integer multiplication is
// constant-time on the targets Go supports in practice (amd64 MULQ, arm64
// MUL/UMULH; no early exit). A 128x128 product uses Karatsuba (3 clmul64);
// the reduction modulo x^128 + x^7 + x^2 + x + 1 in GCM's reflected bit
// order is a fixed sequence of shifts and XORs, as in BearSSL. No
// secret-dependent branch or memory index is involved.

// mod5Mask<i> selects the bit positions p ≡ i (mod 5) of a word.
const (
	mod5Mask0 = 0x1084210842108421
	mod5Mask1 = 0x2108421084210842
	mod5Mask2 = 0x4210842108421084
	mod5Mask3 = 0x8421084210842108
	mod5Mask4 = 0x0842108421084210
)

// split5 splits y into its five position classes.
func split5(y uint64) [5]uint64 {
	return [5]uint64{y & mod5Mask0, y & mod5Mask1, y & mod5Mask2, y & mod5Mask3, y & mod5Mask4}
}

// clmul64 returns the 128-bit carry-less product of x and y, where ym holds
// y split by the masks mod5Mask<i> (ym[i] = y & mod5Mask<i>). x is split the same way:
// x_i·y_j (an ordinary 64x64→128 multiplication, bits.Mul64) has its
// meaningful bits at positions ≡ i+j (mod 5). At most 13 partial products
// meet at such a position, so their integer sum (< 16) never carries into
// the next position of the same class, five bits up: masking each class
// recovers the XOR (carry-less) sum exactly. 25 multiplications, no
// branches, no lookups.
func clmul64(x uint64, ym *[5]uint64) (hi, lo uint64) {
	x0, x1, x2, x3, x4 := x&mod5Mask0, x&mod5Mask1, x&mod5Mask2, x&mod5Mask3, x&mod5Mask4
	y0, y1, y2, y3, y4 := ym[0], ym[1], ym[2], ym[3], ym[4]
	h00, l00 := bits.Mul64(x0, y0)
	h01, l01 := bits.Mul64(x1, y4)
	h02, l02 := bits.Mul64(x2, y3)
	h03, l03 := bits.Mul64(x3, y2)
	h04, l04 := bits.Mul64(x4, y1)
	hc0 := h00 ^ h01 ^ h02 ^ h03 ^ h04
	lc0 := l00 ^ l01 ^ l02 ^ l03 ^ l04
	h10, l10 := bits.Mul64(x0, y1)
	h11, l11 := bits.Mul64(x1, y0)
	h12, l12 := bits.Mul64(x2, y4)
	h13, l13 := bits.Mul64(x3, y3)
	h14, l14 := bits.Mul64(x4, y2)
	hc1 := h10 ^ h11 ^ h12 ^ h13 ^ h14
	lc1 := l10 ^ l11 ^ l12 ^ l13 ^ l14
	h20, l20 := bits.Mul64(x0, y2)
	h21, l21 := bits.Mul64(x1, y1)
	h22, l22 := bits.Mul64(x2, y0)
	h23, l23 := bits.Mul64(x3, y4)
	h24, l24 := bits.Mul64(x4, y3)
	hc2 := h20 ^ h21 ^ h22 ^ h23 ^ h24
	lc2 := l20 ^ l21 ^ l22 ^ l23 ^ l24
	h30, l30 := bits.Mul64(x0, y3)
	h31, l31 := bits.Mul64(x1, y2)
	h32, l32 := bits.Mul64(x2, y1)
	h33, l33 := bits.Mul64(x3, y0)
	h34, l34 := bits.Mul64(x4, y4)
	hc3 := h30 ^ h31 ^ h32 ^ h33 ^ h34
	lc3 := l30 ^ l31 ^ l32 ^ l33 ^ l34
	h40, l40 := bits.Mul64(x0, y4)
	h41, l41 := bits.Mul64(x1, y3)
	h42, l42 := bits.Mul64(x2, y2)
	h43, l43 := bits.Mul64(x3, y1)
	h44, l44 := bits.Mul64(x4, y0)
	hc4 := h40 ^ h41 ^ h42 ^ h43 ^ h44
	lc4 := l40 ^ l41 ^ l42 ^ l43 ^ l44
	// Low word: position p has class p mod 5; high word: position 64+p
	// has class (p+4) mod 5, i.e. mod5Mask<(c+1)%5> selects class c.
	lo = lc0&mod5Mask0 | lc1&mod5Mask1 | lc2&mod5Mask2 | lc3&mod5Mask3 | lc4&mod5Mask4
	hi = hc0&mod5Mask1 | hc1&mod5Mask2 | hc2&mod5Mask3 | hc3&mod5Mask4 | hc4&mod5Mask0
	return hi, lo
}

// ghashKey is the hash subkey H with its precomputed bit-reversed and
// Karatsuba-middle forms.
type ghashKey struct {
	// h0, h1, h2 are the low and high halves of H and their XOR
	// (Karatsuba), each split by position class mod 5 for clmul64.
	h0, h1, h2 [5]uint64
}

func (k *ghashKey) init(h *[16]byte) {
	h1 := binary.BigEndian.Uint64(h[0:])
	h0 := binary.BigEndian.Uint64(h[8:])
	k.h0, k.h1, k.h2 = split5(h0), split5(h1), split5(h0^h1)
}

func (k *ghashKey) wipe() { *k = ghashKey{} }

// mul sets (y1, y0) = (y1, y0) · H in GF(2^128) (GCM bit order).
func (k *ghashKey) mul(y1, y0 uint64) (uint64, uint64) {
	a1, a0 := clmul64(y0, &k.h0)
	b1, b0 := clmul64(y1, &k.h1)
	c1, c0 := clmul64(y0^y1, &k.h2)
	c0 ^= a0 ^ b0
	c1 ^= a1 ^ b1

	// The 256-bit product (v3:v2:v1:v0), then reflected-order reduction.
	v0 := a0
	v1 := a1 ^ c0
	v2 := b0 ^ c1
	v3 := b1

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
