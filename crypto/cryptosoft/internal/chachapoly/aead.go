package chachapoly

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/keelinit/keel/crypto/internal/alias"
)

// AEAD parameters (RFC 8439).
const (
	KeySize   = 32
	NonceSize = 12
	TagSize   = 16
	// maxPlaintext keeps the 32-bit block counter (starting at 1) from
	// wrapping: (2^32 - 1) blocks of 64 bytes.
	maxPlaintext = (1<<32 - 1) * 64
)

// Errors.
var (
	ErrKeySize = errors.New("chachapoly: invalid key size")
	ErrOpen    = errors.New("chachapoly: message authentication failed")
)

// AEAD is ChaCha20-Poly1305 (RFC 8439 section 2.8). It implements
// cipher.AEAD, is immutable after New and safe for concurrent use; after
// Wipe it must not be used.
type AEAD struct {
	key [8]uint32
}

var _ cipher.AEAD = (*AEAD)(nil)

// New returns ChaCha20-Poly1305 keyed with a 32-byte key. The key is not
// retained. The error never contains key material.
func New(key []byte) (*AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrKeySize, len(key), KeySize)
	}
	a := new(AEAD)
	for i := range a.key {
		a.key[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	return a, nil
}

// Wipe zeroes the key. The AEAD must not be used afterwards.
func (a *AEAD) Wipe() { clear(a.key[:]) }

// NonceSize returns 12.
func (a *AEAD) NonceSize() int { return NonceSize }

// Overhead returns the tag size, 16.
func (a *AEAD) Overhead() int { return TagSize }

func (a *AEAD) setup(s *chachaState, p *poly1305, nonce []byte) {
	s.k = a.key
	s.n[0] = binary.LittleEndian.Uint32(nonce[0:])
	s.n[1] = binary.LittleEndian.Uint32(nonce[4:])
	s.n[2] = binary.LittleEndian.Uint32(nonce[8:])
	// The one-time Poly1305 key is the first 32 bytes of block 0.
	var blk [64]byte
	s.block(&blk, 0)
	p.init((*[32]byte)(blk[:32]))
	clear(blk[:])
}

func (a *AEAD) mac(p *poly1305, out *[16]byte, aad, ct []byte) {
	p.write(aad)
	p.pad16()
	p.write(ct)
	p.pad16()
	var lens [16]byte
	binary.LittleEndian.PutUint64(lens[0:], uint64(len(aad)))
	binary.LittleEndian.PutUint64(lens[8:], uint64(len(ct)))
	p.write(lens[:])
	p.sum(out)
}

// Seal encrypts and authenticates plaintext with the 12-byte nonce and
// aad, appending ciphertext and 16-byte tag to dst. To encrypt in place
// use plaintext[:0] as dst; any other overlap panics, as does a wrong nonce
// length (cipher.AEAD contract).
func (a *AEAD) Seal(dst, nonce, plaintext, aad []byte) []byte {
	if len(nonce) != NonceSize {
		panic("chachapoly: incorrect nonce length given to ChaCha20-Poly1305")
	}
	if uint64(len(plaintext)) > maxPlaintext {
		panic("chachapoly: plaintext too large")
	}
	ret, out := alias.AEADOutput("chachapoly", dst, len(plaintext)+TagSize, plaintext, aad)
	var s chachaState
	var p poly1305
	a.setup(&s, &p, nonce)
	s.xorKeyStream(out[:len(plaintext)], plaintext, 1)
	var tag [16]byte
	a.mac(&p, &tag, aad, out[:len(plaintext)])
	copy(out[len(plaintext):], tag[:])
	s = chachaState{}
	return ret
}

// Open verifies the tag at the end of ciphertext in constant time and
// only then decrypts, appending the plaintext to dst. To decrypt in place
// use ciphertext[:0] as dst. On failure it returns ErrOpen and leaves dst's
// bytes unmodified. A wrong nonce length panics.
func (a *AEAD) Open(dst, nonce, ciphertext, aad []byte) ([]byte, error) {
	if len(nonce) != NonceSize {
		panic("chachapoly: incorrect nonce length given to ChaCha20-Poly1305")
	}
	if len(ciphertext) < TagSize || uint64(len(ciphertext)) > maxPlaintext+TagSize {
		return nil, ErrOpen
	}
	tag := ciphertext[len(ciphertext)-TagSize:]
	ct := ciphertext[:len(ciphertext)-TagSize]
	ret, out := alias.AEADOutput("chachapoly", dst, len(ct), ct, aad)
	var s chachaState
	var p poly1305
	a.setup(&s, &p, nonce)
	var want [16]byte
	a.mac(&p, &want, aad, ct)
	if subtle.ConstantTimeCompare(want[:], tag) != 1 {
		s = chachaState{}
		return nil, ErrOpen
	}
	s.xorKeyStream(out, ct, 1)
	s = chachaState{}
	return ret, nil
}
