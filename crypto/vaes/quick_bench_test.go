package vaes

import (
	"crypto/aes"
	"crypto/cipher"
	"testing"
)

func BenchmarkQuick(b *testing.B) {
	key := make([]byte, 16)
	blk, _ := aes.NewCipher(key)
	ref, _ := cipher.NewGCM(blk)
	g, _ := newGCM(key)
	for _, sz := range []int{1420, 8192} {
		buf := make([]byte, sz+16)
		nonce := make([]byte, 12)
		aad := make([]byte, 8)
		b.Run("std", func(b *testing.B) {
			b.SetBytes(int64(sz))
			for b.Loop() {
				ref.Seal(buf[:0], nonce, buf[:sz], aad)
			}
		})
		b.Run("vaes", func(b *testing.B) {
			b.SetBytes(int64(sz))
			for b.Loop() {
				g.Seal(buf[:0], nonce, buf[:sz], aad)
			}
		})
	}
}
