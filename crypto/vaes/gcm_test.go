package vaes

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"math/rand/v2"
	"testing"
)

func TestQuick(t *testing.T) {
	if !Supported() {
		t.Skip("no vaes")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kl := range []int{16, 32} {
		for n := 0; n < 300; n++ {
			key := make([]byte, kl)
			for i := range key {
				key[i] = byte(rng.Uint32())
			}
			nonce := make([]byte, 12)
			pt := make([]byte, n)
			aad := make([]byte, n%20)
			for i := range pt {
				pt[i] = byte(rng.Uint32())
			}
			b, _ := aes.NewCipher(key)
			ref, _ := cipher.NewGCM(b)
			g, err := newGCM(key)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.Seal(nil, nonce, pt, aad)
			got := g.Seal(nil, nonce, pt, aad)
			if !bytes.Equal(want, got) {
				t.Fatalf("k%d n=%d\n got %x\nwant %x", kl, n, got, want)
			}
		}
	}
}
