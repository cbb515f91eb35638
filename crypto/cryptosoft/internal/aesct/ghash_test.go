package aesct

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// clmulRef is a bit-by-bit carry-less multiplication (reference).
func clmulRef(x, y uint64) (hi, lo uint64) {
	for i := 0; i < 64; i++ {
		if y>>i&1 == 1 {
			lo ^= x << i
			if i > 0 {
				hi ^= x >> (64 - i)
			}
		}
	}
	return
}

func TestClmul64(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cases := [][2]uint64{{0, 0}, {1, 1}, {^uint64(0), ^uint64(0)}, {1 << 63, 1 << 63}, {^uint64(0), 1}}
	for i := 0; i < 2000; i++ {
		cases = append(cases, [2]uint64{rng.Uint64(), rng.Uint64()})
	}
	for _, c := range cases {
		ys := split5(c[1])
		hi, lo := clmul64(c[0], &ys)
		whi, wlo := clmulRef(c[0], c[1])
		if hi != whi || lo != wlo {
			t.Fatalf("clmul64(%#x, %#x) = %#x:%#x, want %#x:%#x", c[0], c[1], hi, lo, whi, wlo)
		}
	}
}

// gfMulRef multiplies in GF(2^128) with GCM's bit order, bit by bit
// (SP 800-38D algorithm 1), on (hi, lo) big-endian halves.
func gfMulRef(x1, x0, y1, y0 uint64) (uint64, uint64) {
	var z1, z0 uint64
	v1, v0 := y1, y0
	for i := 0; i < 128; i++ {
		var bit uint64
		if i < 64 {
			bit = x1 >> (63 - i) & 1
		} else {
			bit = x0 >> (127 - i) & 1
		}
		if bit == 1 {
			z1 ^= v1
			z0 ^= v0
		}
		lsb := v0 & 1
		v0 = v0>>1 | v1<<63
		v1 >>= 1
		if lsb == 1 {
			v1 ^= 0xe1 << 56
		}
	}
	return z1, z0
}

func TestGHASHMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 500; i++ {
		var h [16]byte
		binary.BigEndian.PutUint64(h[:], rng.Uint64())
		binary.BigEndian.PutUint64(h[8:], rng.Uint64())
		var k ghashKey
		k.init(&h)
		y1, y0 := rng.Uint64(), rng.Uint64()
		g1, g0 := k.mul(y1, y0)
		w1, w0 := gfMulRef(y1, y0, binary.BigEndian.Uint64(h[:]), binary.BigEndian.Uint64(h[8:]))
		if g1 != w1 || g0 != w0 {
			t.Fatalf("mul mismatch: got %x:%x want %x:%x", g1, g0, w1, w0)
		}
	}
}

func BenchmarkGHASH(b *testing.B) {
	var h [16]byte
	h[3] = 0x42
	var k ghashKey
	k.init(&h)
	data := make([]byte, 1424)
	b.SetBytes(int64(len(data)))
	var y1, y0 uint64
	for b.Loop() {
		y1, y0 = k.update(y1, y0, data)
	}
	_, _ = y1, y0
}

// The previous GHASH (BearSSL ghash_ctmul64: 64-bit-truncated products
// with bit reversal for the high halves), kept to benchmark against.
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

func mulCtmul64(h1, h0, y1, y0 uint64) (uint64, uint64) {
	h0r, h1r := bits.Reverse64(h0), bits.Reverse64(h1)
	h2, h2r := h0^h1, h0r^h1r
	y0r, y1r := bits.Reverse64(y0), bits.Reverse64(y1)
	y2, y2r := y0^y1, y0r^y1r
	z0, z1, z2 := bmul64(y0, h0), bmul64(y1, h1), bmul64(y2, h2)
	z0h, z1h, z2h := bmul64(y0r, h0r), bmul64(y1r, h1r), bmul64(y2r, h2r)
	z2 ^= z0 ^ z1
	z2h ^= z0h ^ z1h
	z0h = bits.Reverse64(z0h) >> 1
	z1h = bits.Reverse64(z1h) >> 1
	z2h = bits.Reverse64(z2h) >> 1
	v0, v1, v2, v3 := z0, z0h^z2, z1^z2h, z1h
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

func BenchmarkGHASHCtmul64(b *testing.B) {
	data := make([]byte, 1424)
	b.SetBytes(int64(len(data)))
	var y1, y0 uint64
	for b.Loop() {
		for d := data; len(d) >= 16; d = d[16:] {
			y1 ^= binary.BigEndian.Uint64(d)
			y0 ^= binary.BigEndian.Uint64(d[8:])
			y1, y0 = mulCtmul64(0x42<<32, 0, y1, y0)
		}
	}
}

func TestCtmul64Reference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 200; i++ {
		h1, h0, y1, y0 := rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64()
		g1, g0 := mulCtmul64(h1, h0, y1, y0)
		w1, w0 := gfMulRef(y1, y0, h1, h0)
		if g1 != w1 || g0 != w0 {
			t.Fatal("ctmul64 reference mismatch")
		}
	}
}
