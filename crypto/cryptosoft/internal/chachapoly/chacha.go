// Package chachapoly is a portable, constant-time ChaCha20-Poly1305 AEAD
// (RFC 8439) in pure Go.
//
// Constant-time design: ChaCha20 is add-rotate-xor on 32-bit words with
// fixed rotation counts; Poly1305 uses 64-bit limbs with bits.Mul64 /
// bits.Add64 (full-width multiplies and carries, constant-time on Go's
// targets), a partial reduction by a fixed shift-and-add sequence and a
// final reduction selected with masks, not branches. Tags are compared with
// crypto/subtle. No table lookups exist at all; branches and loop bounds
// depend only on public lengths.
package chachapoly

import (
	"encoding/binary"
	"math/bits"
)

const (
	c0 = 0x61707865
	c1 = 0x3320646e
	c2 = 0x79622d32
	c3 = 0x6b206574
)

func qr(a, b, c, d uint32) (uint32, uint32, uint32, uint32) {
	a += b
	d ^= a
	d = bits.RotateLeft32(d, 16)
	c += d
	b ^= c
	b = bits.RotateLeft32(b, 12)
	a += b
	d ^= a
	d = bits.RotateLeft32(d, 8)
	c += d
	b ^= c
	b = bits.RotateLeft32(b, 7)
	return a, b, c, d
}

// chachaState is the key and nonce part of the ChaCha20 input block.
type chachaState struct {
	k [8]uint32
	n [3]uint32
}

// block computes the 64-byte ChaCha20 block for counter ctr into out.
func (s *chachaState) block(out *[64]byte, ctr uint32) {
	x0, x1, x2, x3 := uint32(c0), uint32(c1), uint32(c2), uint32(c3)
	x4, x5, x6, x7 := s.k[0], s.k[1], s.k[2], s.k[3]
	x8, x9, x10, x11 := s.k[4], s.k[5], s.k[6], s.k[7]
	x12, x13, x14, x15 := ctr, s.n[0], s.n[1], s.n[2]
	for i := 0; i < 10; i++ {
		x0, x4, x8, x12 = qr(x0, x4, x8, x12)
		x1, x5, x9, x13 = qr(x1, x5, x9, x13)
		x2, x6, x10, x14 = qr(x2, x6, x10, x14)
		x3, x7, x11, x15 = qr(x3, x7, x11, x15)
		x0, x5, x10, x15 = qr(x0, x5, x10, x15)
		x1, x6, x11, x12 = qr(x1, x6, x11, x12)
		x2, x7, x8, x13 = qr(x2, x7, x8, x13)
		x3, x4, x9, x14 = qr(x3, x4, x9, x14)
	}
	binary.LittleEndian.PutUint32(out[0:], x0+c0)
	binary.LittleEndian.PutUint32(out[4:], x1+c1)
	binary.LittleEndian.PutUint32(out[8:], x2+c2)
	binary.LittleEndian.PutUint32(out[12:], x3+c3)
	binary.LittleEndian.PutUint32(out[16:], x4+s.k[0])
	binary.LittleEndian.PutUint32(out[20:], x5+s.k[1])
	binary.LittleEndian.PutUint32(out[24:], x6+s.k[2])
	binary.LittleEndian.PutUint32(out[28:], x7+s.k[3])
	binary.LittleEndian.PutUint32(out[32:], x8+s.k[4])
	binary.LittleEndian.PutUint32(out[36:], x9+s.k[5])
	binary.LittleEndian.PutUint32(out[40:], x10+s.k[6])
	binary.LittleEndian.PutUint32(out[44:], x11+s.k[7])
	binary.LittleEndian.PutUint32(out[48:], x12+ctr)
	binary.LittleEndian.PutUint32(out[52:], x13+s.n[0])
	binary.LittleEndian.PutUint32(out[56:], x14+s.n[1])
	binary.LittleEndian.PutUint32(out[60:], x15+s.n[2])
}

// xorKeyStream XORs src into dst with the keystream starting at block
// counter ctr. It returns the next counter.
func (s *chachaState) xorKeyStream(dst, src []byte, ctr uint32) uint32 {
	var ks [64]byte
	for len(src) >= 64 {
		s.block(&ks, ctr)
		ctr++
		for i := 0; i < 64; i += 8 {
			binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(src[i:])^binary.LittleEndian.Uint64(ks[i:]))
		}
		dst, src = dst[64:], src[64:]
	}
	if len(src) > 0 {
		s.block(&ks, ctr)
		ctr++
		for i := range src {
			dst[i] = src[i] ^ ks[i]
		}
	}
	clear(ks[:])
	return ctr
}
