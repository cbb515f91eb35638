package ipsec

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/crypto"
)

// stdProvider is a minimal synchronous provider on the standard library,
// used only where the framework contract does not reach: AES-192-GCM
// (draft-mcgrew-gcm-test-01 case 7; crypto.Algorithm.Validate admits only
// AES-128/256-GCM).
type stdProvider struct{}

func (stdProvider) Info() crypto.ProviderInfo         { return crypto.ProviderInfo{Name: "test-stdlib"} }
func (stdProvider) Capabilities() []crypto.Capability { return nil }

func (stdProvider) NewSession(p crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	s := &stdSession{alg: p.Alg, done: done}
	key := p.CipherKey
	switch p.Alg.Cipher {
	case crypto.CipherAESGCM:
		b, err := aes.NewCipher(key[:len(key)-4])
		if err != nil {
			return nil, err
		}
		s.aead, _ = cipher.NewGCM(b)
		s.salt = append([]byte(nil), key[len(key)-4:]...)
	case crypto.CipherChaCha20Poly1305:
		a, err := chacha20poly1305.New(key[:32])
		if err != nil {
			return nil, err
		}
		s.aead, s.salt = a, append([]byte(nil), key[32:]...)
	case crypto.CipherAESCBC:
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		s.block = b
	}
	if p.Alg.Auth != crypto.AuthNone {
		var h func() hash.Hash
		switch p.Alg.Auth {
		case crypto.AuthHMACSHA1_96:
			h = sha1.New
		case crypto.AuthHMACSHA256_128:
			h = sha256.New
		case crypto.AuthHMACSHA384_192:
			h = sha512.New384
		default:
			h = sha512.New
		}
		s.mac = hmac.New(h, p.AuthKey)
	}
	return s, nil
}

type stdSession struct {
	alg   crypto.Algorithm
	done  crypto.CompletionFunc
	aead  cipher.AEAD
	salt  []byte
	block cipher.Block
	mac   hash.Hash
}

func (s *stdSession) Close(context.Context) error { return nil }

func (s *stdSession) Submit(reqs []*crypto.Request) int {
	for _, r := range reqs {
		s.do(r)
	}
	s.done(reqs)
	return len(reqs)
}

func (s *stdSession) icv(r *crypto.Request) []byte {
	s.mac.Reset()
	s.mac.Write(r.AAD)
	s.mac.Write(r.IV)
	s.mac.Write(r.Data)
	s.mac.Write(r.AuthTrailer)
	return s.mac.Sum(nil)[:len(r.ICV)]
}

func (s *stdSession) do(r *crypto.Request) {
	r.Status = crypto.StatusOK
	if s.aead != nil {
		nonce := append(append([]byte(nil), s.salt...), r.IV...)
		if r.Dir == crypto.Encrypt {
			out := s.aead.Seal(r.Data[:0], nonce, r.Data, r.AAD)
			copy(r.ICV, out[len(r.Data):])
			return
		}
		ct := append(append([]byte(nil), r.Data...), r.ICV...)
		if _, err := s.aead.Open(r.Data[:0], nonce, ct, r.AAD); err != nil {
			r.Status = crypto.StatusAuthFailed
		}
		return
	}
	if r.Dir == crypto.Encrypt {
		if s.block != nil {
			cipher.NewCBCEncrypter(s.block, r.IV).CryptBlocks(r.Data, r.Data)
		}
		copy(r.ICV, s.icv(r))
		return
	}
	if subtle.ConstantTimeCompare(s.icv(r), r.ICV) != 1 {
		r.Status = crypto.StatusAuthFailed
		return
	}
	if s.block != nil {
		cipher.NewCBCDecrypter(s.block, r.IV).CryptBlocks(r.Data, r.Data)
	}
}
