package chachapoly

import (
	"crypto/cipher"
	"fmt"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

// BenchmarkChaCha20Poly1305 compares Seal and Open with
// golang.org/x/crypto/chacha20poly1305 (assembly on amd64) in the same run.
func BenchmarkChaCha20Poly1305(b *testing.B) {
	key := make([]byte, 32)
	std, _ := chacha20poly1305.New(key)
	soft, _ := New(key)
	for _, op := range []string{"Seal", "Open"} {
		for _, n := range []int{64, 512, 1420} {
			for _, impl := range []struct {
				name string
				a    cipher.AEAD
			}{{"impl=cryptosoft", soft}, {"impl=xcrypto", std}} {
				b.Run(fmt.Sprintf("%s/%d/%s", op, n, impl.name), func(b *testing.B) {
					nonce := make([]byte, 12)
					aad := make([]byte, 8)
					buf := make([]byte, n+16)
					sealed := impl.a.Seal(nil, nonce, buf[:n], aad)
					b.SetBytes(int64(n))
					b.ReportAllocs()
					if op == "Seal" {
						for b.Loop() {
							impl.a.Seal(buf[:0], nonce, buf[:n], aad)
						}
						return
					}
					for b.Loop() {
						copy(buf, sealed)
						if _, err := impl.a.Open(buf[:0], nonce, buf, aad); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
