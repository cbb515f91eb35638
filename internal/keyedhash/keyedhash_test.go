package keyedhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// TestSum: Sum is HMAC-SHA-256 (crypto/hmac is the reference)
// for keys shorter than, equal to and longer than a block and messages
// in any number of parts, so ledger key ids written before it still
// match; it is the same from every pooled hasher (nothing carried over).
func TestSum(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range 2000 {
		key := make([]byte, rng.IntN(150))
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		var parts [][]byte
		for range rng.IntN(5) {
			p := make([]byte, rng.IntN(200))
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			parts = append(parts, p)
		}
		m := hmac.New(sha256.New, key)
		for _, p := range parts {
			m.Write(p)
		}
		var want [32]byte
		m.Sum(want[:0])
		if got := Sum(key, parts...); got != want {
			t.Fatalf("seed %d case %d: key %d bytes, %d parts: %x, want %x", seed, i, len(key), len(parts), got, want)
		}
	}
}
