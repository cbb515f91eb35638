package cpuprov

import (
	"crypto/aes"
	"crypto/cipher"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/internal/testwait"
)

// wipeBlock is an AES block that records whether Wipe was called, standing
// in for cryptosoft's self-wiping primitives.
type wipeBlock struct {
	cipher.Block
	wiped *bool
}

func (w wipeBlock) Wipe() { *w.wiped = true }

type wipeAEAD struct {
	cipher.AEAD
	wiped *bool
}

func (w wipeAEAD) Wipe() { *w.wiped = true }

func TestCloseWipesPrimitives(t *testing.T) {
	var blockWiped, aeadWiped bool
	prims := Primitives{
		NewAES: func(key []byte) (cipher.Block, error) {
			b, err := aes.NewCipher(key)
			return wipeBlock{b, &blockWiped}, err
		},
		NewGCM: func(key []byte) (cipher.AEAD, error) {
			b, err := aes.NewCipher(key)
			if err != nil {
				return nil, err
			}
			g, err := cipher.NewGCM(b)
			return wipeAEAD{g, &aeadWiped}, err
		},
	}
	p := New(crypto.ProviderInfo{Name: "wipetest"}, prims)
	for _, tc := range []struct {
		name  string
		sp    crypto.SessionParams
		wiped *bool
	}{
		{"cbc", crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}, CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, &blockWiped},
		{"gcm", crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: make([]byte, 20)}, &aeadWiped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := p.NewSession(tc.sp, func([]*crypto.Request) {})
			if err != nil {
				t.Fatal(err)
			}
			if *tc.wiped {
				t.Fatal("wiped before Close")
			}
			if err := s.Close(testwait.Context(t)); err != nil {
				t.Fatal(err)
			}
			if !*tc.wiped {
				t.Fatal("Close did not wipe the primitive's key schedule")
			}
		})
	}
}
