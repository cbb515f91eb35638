package aesct

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"testing"
)

// fit returns b truncated or zero-extended to n bytes.
func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

func keyFor(sel uint8, key []byte) []byte { return fit(key, []int{16, 24, 32}[int(sel)%3]) }

// FuzzGCM is a differential test of Seal and Open against crypto/cipher's
// GCM on arbitrary keys, nonces, AAD and messages. Seeds:
// testdata/fuzz/FuzzGCM.
func FuzzGCM(f *testing.F) {
	f.Add(uint8(0), []byte("0123456789abcdef"), []byte("nonce-012345"), []byte("aad"), []byte("hello, world"))
	f.Fuzz(func(t *testing.T, sel uint8, key, nonce, aad, msg []byte) {
		key, nonce = keyFor(sel, key), fit(nonce, NonceSize)
		blk, _ := aes.NewCipher(key)
		ref, _ := cipher.NewGCM(blk)
		g, err := NewGCM(key)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.Seal(nil, nonce, msg, aad)
		buf := append(make([]byte, 0, len(msg)+TagSize), msg...)
		got := g.Seal(buf[:0], nonce, buf, aad)
		if !bytes.Equal(got, want) {
			t.Fatalf("Seal mismatch:\n got %x\nwant %x", got, want)
		}
		pt, err := g.Open(got[:0], nonce, got, aad)
		if err != nil || !bytes.Equal(pt, msg) {
			t.Fatalf("Open round trip: %v", err)
		}
	})
}

// FuzzGCMOpen feeds arbitrary ciphertexts to Open: ours and the stdlib's
// must agree on acceptance and plaintext. Seeds: testdata/fuzz/FuzzGCMOpen.
func FuzzGCMOpen(f *testing.F) {
	f.Add(uint8(1), []byte("k"), []byte("n"), []byte(""), make([]byte, 40))
	f.Fuzz(func(t *testing.T, sel uint8, key, nonce, aad, ct []byte) {
		key, nonce = keyFor(sel, key), fit(nonce, NonceSize)
		blk, _ := aes.NewCipher(key)
		ref, _ := cipher.NewGCM(blk)
		g, _ := NewGCM(key)
		// Make some inputs authentic so both branches are exercised.
		if len(ct) > 0 && ct[0]&1 == 1 {
			ct = ref.Seal(nil, nonce, ct, aad)
		}
		want, werr := ref.Open(nil, nonce, ct, aad)
		got, gerr := g.Open(nil, nonce, ct, aad)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Open disagrees: got %x,%v want %x,%v", got, gerr, want, werr)
		}
	})
}

// FuzzCBC is a differential test of EncryptCBC/DecryptCBC and the block
// functions against crypto/aes + crypto/cipher. Seeds: testdata/fuzz/FuzzCBC.
func FuzzCBC(f *testing.F) {
	f.Add(uint8(2), []byte("0123456789abcdef0123456789abcdef"), []byte("iv"), []byte("sixteen byte msgsixteen byte msg"))
	f.Fuzz(func(t *testing.T, sel uint8, key, iv, msg []byte) {
		key, iv = keyFor(sel, key), fit(iv, BlockSize)
		msg = msg[:len(msg)&^15]
		ref, _ := aes.NewCipher(key)
		c, _ := NewCipher(key)
		want := make([]byte, len(msg))
		cipher.NewCBCEncrypter(ref, iv).CryptBlocks(want, msg)
		got := bytes.Clone(msg)
		c.EncryptCBC(got, got, iv)
		if !bytes.Equal(got, want) {
			t.Fatalf("EncryptCBC mismatch")
		}
		// Decrypt the message itself (as if it were a ciphertext) too.
		cipher.NewCBCDecrypter(ref, iv).CryptBlocks(want, msg)
		c.DecryptCBC(got, msg, iv)
		if !bytes.Equal(got, want) {
			t.Fatalf("DecryptCBC mismatch")
		}
	})
}
