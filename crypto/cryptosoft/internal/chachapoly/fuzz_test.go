package chachapoly

import (
	"bytes"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

// FuzzSeal is a differential test against x/crypto/chacha20poly1305 on
// arbitrary keys, nonces, AAD and messages. Seeds: testdata/fuzz/FuzzSeal.
func FuzzSeal(f *testing.F) {
	f.Add([]byte("key"), []byte("nonce"), []byte("aad"), []byte("message"))
	f.Fuzz(func(t *testing.T, key, nonce, aad, msg []byte) {
		key, nonce = fit(key, KeySize), fit(nonce, NonceSize)
		ref, _ := chacha20poly1305.New(key)
		a, err := New(key)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.Seal(nil, nonce, msg, aad)
		buf := append(make([]byte, 0, len(msg)+TagSize), msg...)
		got := a.Seal(buf[:0], nonce, buf, aad)
		if !bytes.Equal(got, want) {
			t.Fatalf("Seal mismatch:\n got %x\nwant %x", got, want)
		}
		pt, err := a.Open(got[:0], nonce, got, aad)
		if err != nil || !bytes.Equal(pt, msg) {
			t.Fatalf("Open round trip: %v", err)
		}
	})
}

// FuzzOpen feeds arbitrary ciphertexts to Open; ours and x/crypto's must
// agree. Seeds: testdata/fuzz/FuzzOpen.
func FuzzOpen(f *testing.F) {
	f.Add([]byte("key"), []byte("nonce"), []byte(""), make([]byte, 20))
	f.Fuzz(func(t *testing.T, key, nonce, aad, ct []byte) {
		key, nonce = fit(key, KeySize), fit(nonce, NonceSize)
		ref, _ := chacha20poly1305.New(key)
		a, _ := New(key)
		if len(ct) > 0 && ct[0]&1 == 1 {
			ct = ref.Seal(nil, nonce, ct, aad)
		}
		want, werr := ref.Open(nil, nonce, ct, aad)
		got, gerr := a.Open(nil, nonce, ct, aad)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Open disagrees: got %x,%v want %x,%v", got, gerr, want, werr)
		}
	})
}
