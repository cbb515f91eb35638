package chachapoly

import (
	"encoding/binary"
	"math/bits"
)

// poly1305 is the one-time authenticator of RFC 8439 section 2.5 with a
// 130-bit accumulator in three 64-bit limbs (h2 holds the top bits and
// stays small). r is clamped; s is the final addend.
type poly1305 struct {
	r0, r1     uint64
	s0, s1     uint64
	h0, h1, h2 uint64
	buf        [16]byte
	n          int // bytes buffered in buf
}

const (
	rMask0 = 0x0FFFFFFC0FFFFFFF
	rMask1 = 0x0FFFFFFC0FFFFFFC
)

func (p *poly1305) init(key *[32]byte) {
	p.r0 = binary.LittleEndian.Uint64(key[0:]) & rMask0
	p.r1 = binary.LittleEndian.Uint64(key[8:]) & rMask1
	p.s0 = binary.LittleEndian.Uint64(key[16:])
	p.s1 = binary.LittleEndian.Uint64(key[24:])
	p.h0, p.h1, p.h2 = 0, 0, 0
	p.n = 0
}

// blocks absorbs whole 16-byte blocks of m; hibit is 1 for full blocks
// (the 2^128 padding bit) and 0 for an already padded final block.
func (p *poly1305) blocks(m []byte, hibit uint64) {
	h0, h1, h2 := p.h0, p.h1, p.h2
	r0, r1 := p.r0, p.r1
	for len(m) >= 16 {
		var c uint64
		h0, c = bits.Add64(h0, binary.LittleEndian.Uint64(m[0:]), 0)
		h1, c = bits.Add64(h1, binary.LittleEndian.Uint64(m[8:]), c)
		h2 += c + hibit

		// h * r, with h2 < 8 and the top 4 bits of r0, r1 clear, so the
		// 128-bit partial sums below never overflow.
		h0r0hi, h0r0lo := bits.Mul64(h0, r0)
		h1r0hi, h1r0lo := bits.Mul64(h1, r0)
		h2r0hi, h2r0lo := bits.Mul64(h2, r0)
		h0r1hi, h0r1lo := bits.Mul64(h0, r1)
		h1r1hi, h1r1lo := bits.Mul64(h1, r1)
		h2r1hi, h2r1lo := bits.Mul64(h2, r1)
		_, _ = h2r0hi, h2r1hi // zero: h2 < 8, r < 2^60

		m0lo, m0hi := h0r0lo, h0r0hi
		m1lo, c := bits.Add64(h1r0lo, h0r1lo, 0)
		m1hi, _ := bits.Add64(h1r0hi, h0r1hi, c)
		m2lo, c := bits.Add64(h2r0lo, h1r1lo, 0)
		m2hi, _ := bits.Add64(h2r0hi, h1r1hi, c)
		m3lo := h2r1lo

		t0 := m0lo
		t1, c := bits.Add64(m1lo, m0hi, 0)
		t2, c := bits.Add64(m2lo, m1hi, c)
		t3, _ := bits.Add64(m3lo, m2hi, c)

		// Reduce with 2^130 = 5 (mod p): h = (t mod 2^130) + 5 * (t >> 130),
		// adding c*4 (the bits above 2^130 in place, shifted) then c.
		h0, h1, h2 = t0, t1, t2&3
		cc0, cc1 := t2&^3, t3
		h0, c = bits.Add64(h0, cc0, 0)
		h1, c = bits.Add64(h1, cc1, c)
		h2 += c
		cc0 = cc0>>2 | cc1<<62
		cc1 >>= 2
		h0, c = bits.Add64(h0, cc0, 0)
		h1, c = bits.Add64(h1, cc1, c)
		h2 += c
		m = m[16:]
	}
	p.h0, p.h1, p.h2 = h0, h1, h2
}

// write absorbs m, buffering partial blocks.
func (p *poly1305) write(m []byte) {
	if p.n > 0 {
		k := copy(p.buf[p.n:], m)
		p.n += k
		m = m[k:]
		if p.n < 16 {
			return
		}
		p.blocks(p.buf[:], 1)
		p.n = 0
	}
	if full := len(m) &^ 15; full > 0 {
		p.blocks(m[:full], 1)
		m = m[full:]
	}
	if len(m) > 0 {
		p.n = copy(p.buf[:], m)
	}
}

// pad16 zero-pads the data absorbed so far to a 16-byte boundary (the
// AEAD construction of RFC 8439 section 2.8).
func (p *poly1305) pad16() {
	if p.n > 0 {
		clear(p.buf[p.n:])
		p.blocks(p.buf[:], 1)
		p.n = 0
	}
}

// sum finishes the MAC into out and wipes the state.
func (p *poly1305) sum(out *[16]byte) {
	if p.n > 0 {
		// Final partial block: append 0x01 and zero-pad, no 2^128 bit.
		p.buf[p.n] = 1
		clear(p.buf[p.n+1:])
		p.blocks(p.buf[:], 0)
	}
	h0, h1, h2 := p.h0, p.h1, p.h2
	// Fully reduce: compute h - p = h - (2^130 - 5) and select it, with a
	// mask rather than a branch, when there was no borrow (h >= p).
	t0, b := bits.Sub64(h0, 0xFFFFFFFFFFFFFFFB, 0)
	t1, b := bits.Sub64(h1, 0xFFFFFFFFFFFFFFFF, b)
	_, b = bits.Sub64(h2, 3, b)
	mask := b - 1 // all ones if h >= p
	h0 = (h0 &^ mask) | (t0 & mask)
	h1 = (h1 &^ mask) | (t1 & mask)
	// tag = (h + s) mod 2^128
	h0, c := bits.Add64(h0, p.s0, 0)
	h1, _ = bits.Add64(h1, p.s1, c)
	binary.LittleEndian.PutUint64(out[0:], h0)
	binary.LittleEndian.PutUint64(out[8:], h1)
	*p = poly1305{}
}
