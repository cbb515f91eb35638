package aesct

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"testing"
)

var benchSizes = []int{64, 512, 1420}

type cbcBlock interface {
	EncryptCBC(dst, src, iv []byte)
	DecryptCBC(dst, src, iv []byte)
}

// stdCBC adapts crypto/cipher's CBC modes to the EncryptCBC/DecryptCBC
// shape (what an aesni-style provider does per request).
type stdCBC struct{ b cipher.Block }

func (s stdCBC) EncryptCBC(dst, src, iv []byte) {
	cipher.NewCBCEncrypter(s.b, iv).CryptBlocks(dst, src)
}
func (s stdCBC) DecryptCBC(dst, src, iv []byte) {
	cipher.NewCBCDecrypter(s.b, iv).CryptBlocks(dst, src)
}

// BenchmarkGCM compares Seal and Open of cryptosoft's AES-GCM with
// crypto/cipher's (AES-NI/PCLMULQDQ where available) in the same run.
func BenchmarkGCM(b *testing.B) {
	for _, bits := range []int{128, 256} {
		key := make([]byte, bits/8)
		blk, _ := aes.NewCipher(key)
		std, _ := cipher.NewGCM(blk)
		soft, _ := NewGCM(key)
		for _, op := range []string{"Seal", "Open"} {
			for _, n := range benchSizes {
				for _, impl := range []struct {
					name string
					a    cipher.AEAD
				}{{"impl=cryptosoft", soft}, {"impl=stdlib", std}} {
					b.Run(fmt.Sprintf("AES-%d/%s/%d/%s", bits, op, n, impl.name), func(b *testing.B) {
						benchAEAD(b, impl.a, op, n)
					})
				}
			}
		}
	}
}

func benchAEAD(b *testing.B, a cipher.AEAD, op string, n int) {
	nonce := make([]byte, a.NonceSize())
	aad := make([]byte, 8)
	buf := make([]byte, n+a.Overhead())
	sealed := a.Seal(nil, nonce, buf[:n], aad)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	if op == "Seal" {
		for b.Loop() {
			a.Seal(buf[:0], nonce, buf[:n], aad)
		}
		return
	}
	for b.Loop() {
		copy(buf, sealed)
		if _, err := a.Open(buf[:0], nonce, buf, aad); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCBC compares CBC encryption and decryption with crypto/cipher.
func BenchmarkCBC(b *testing.B) {
	for _, bits := range []int{128, 256} {
		key := make([]byte, bits/8)
		blk, _ := aes.NewCipher(key)
		soft, _ := NewCipher(key)
		iv := make([]byte, 16)
		for _, op := range []string{"Encrypt", "Decrypt"} {
			for _, n := range benchSizes {
				n := n &^ 15
				for _, impl := range []struct {
					name string
					c    cbcBlock
				}{{"impl=cryptosoft", soft}, {"impl=stdlib", stdCBC{blk}}} {
					b.Run(fmt.Sprintf("AES-%d/%s/%d/%s", bits, op, n, impl.name), func(b *testing.B) {
						buf := make([]byte, n)
						b.SetBytes(int64(n))
						for b.Loop() {
							if op == "Encrypt" {
								impl.c.EncryptCBC(buf, buf, iv)
							} else {
								impl.c.DecryptCBC(buf, buf, iv)
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkCBCEncryptMulti measures four independent messages encrypted in
// the four lanes (bytes counted over all four).
func BenchmarkCBCEncryptMulti(b *testing.B) {
	c, _ := NewCipher(make([]byte, 16))
	for _, n := range benchSizes {
		n := n &^ 15
		b.Run(fmt.Sprintf("AES-128/x4/%d", n), func(b *testing.B) {
			var dst, iv [][]byte
			for i := 0; i < 4; i++ {
				dst = append(dst, make([]byte, n))
				iv = append(iv, make([]byte, 16))
			}
			b.SetBytes(int64(4 * n))
			b.ReportAllocs()
			for b.Loop() {
				c.EncryptCBCMulti(dst, dst, iv)
			}
		})
	}
}
