package aesct

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"math/bits"

	"github.com/keelinit/keel/crypto/internal/alias"
)

// GCM parameters.
const (
	NonceSize = 12
	TagSize   = 16
	// maxPlaintext is the GCM limit of 2^32 - 2 blocks.
	maxPlaintext = (1<<32 - 2) * BlockSize
)

// ErrOpen is returned by Open when the tag does not verify.
var ErrOpen = errors.New("aesct: message authentication failed")

// GCM is AES-GCM (NIST SP 800-38D) with a 12-byte nonce and a 16-byte tag
// over the bitsliced AES and the constant-time GHASH. It implements
// cipher.AEAD. A GCM is immutable after NewGCM and safe for concurrent use;
// after Wipe it must not be used.
type GCM struct {
	c Cipher
	h ghashKey
}

var _ cipher.AEAD = (*GCM)(nil)

// NewGCM returns AES-GCM keyed with key (16, 24 or 32 bytes, no salt). The
// key is not retained. The error never contains key material.
func NewGCM(key []byte) (*GCM, error) {
	g := new(GCM)
	if err := g.c.init(key); err != nil {
		return nil, err
	}
	var h [16]byte
	g.c.Encrypt(h[:], h[:])
	g.h.init(&h)
	clear(h[:])
	return g, nil
}

// Wipe zeroes the key schedule and hash subkey. The GCM must not be used
// afterwards.
func (g *GCM) Wipe() {
	g.c.Wipe()
	g.h.wipe()
}

// NonceSize returns 12.
func (g *GCM) NonceSize() int { return NonceSize }

// Overhead returns the tag size, 16.
func (g *GCM) Overhead() int { return TagSize }

// Keystream4 computes four AES-CTR keystream blocks into ks for the counter
// blocks prefix || be32(ctr+i), i = 0..3, with the 32-bit counter wrapping
// as GCM's inc32 does. It is one bitsliced AES evaluation.
func (c *Cipher) Keystream4(ks *[64]byte, prefix *[12]byte, ctr uint32) {
	n0 := binary.LittleEndian.Uint32(prefix[0:])
	n1 := binary.LittleEndian.Uint32(prefix[4:])
	n2 := binary.LittleEndian.Uint32(prefix[8:])
	c.keystream4(ks, n0, n1, n2, ctr)
}

func (c *Cipher) keystream4(ks *[64]byte, n0, n1, n2, ctr uint32) {
	var w [16]uint32
	var q [8]uint64
	for i := 0; i < 4; i++ {
		w[4*i], w[4*i+1], w[4*i+2] = n0, n1, n2
		w[4*i+3] = bits.ReverseBytes32(ctr + uint32(i))
	}
	load4w(&q, &w)
	encryptSliced(c.nr, c.sk[:], &q)
	store4w(&w, &q)
	for i := range w {
		binary.LittleEndian.PutUint32(ks[4*i:], w[i])
	}
}

// first computes E(J0) (the tag mask) and the keystream of counters 2..4
// in a single bitsliced evaluation: ks[0:16] is the mask, ks[16:64] the
// keystream for the first 48 bytes of data.
func (g *GCM) first(ks *[64]byte, nonce []byte) (n0, n1, n2 uint32) {
	n0 = binary.LittleEndian.Uint32(nonce[0:])
	n1 = binary.LittleEndian.Uint32(nonce[4:])
	n2 = binary.LittleEndian.Uint32(nonce[8:])
	g.c.keystream4(ks, n0, n1, n2, 1)
	return
}

// ctr XORs src into dst with the keystream. ks[16:64] holds the keystream
// of counters 2..4; further blocks start at counter 5.
func (g *GCM) ctr(dst, src []byte, ks *[64]byte, n0, n1, n2 uint32) {
	n := min(len(src), 48)
	subtle.XORBytes(dst[:n], src[:n], ks[16:16+n])
	dst, src = dst[n:], src[n:]
	ctr := uint32(5)
	for len(src) > 0 {
		g.c.keystream4(ks, n0, n1, n2, ctr)
		ctr += 4
		n = min(len(src), 64)
		subtle.XORBytes(dst[:n], src[:n], ks[:n])
		dst, src = dst[n:], src[n:]
	}
}

// tag computes GHASH(aad, ct) ⊕ mask into out.
func (g *GCM) tag(out []byte, aad, ct []byte, mask []byte) {
	var y1, y0 uint64
	y1, y0 = g.h.update(y1, y0, aad)
	y1, y0 = g.h.update(y1, y0, ct)
	y1 ^= uint64(len(aad)) * 8
	y0 ^= uint64(len(ct)) * 8
	y1, y0 = g.h.mul(y1, y0)
	binary.BigEndian.PutUint64(out[0:], y1^binary.BigEndian.Uint64(mask[0:]))
	binary.BigEndian.PutUint64(out[8:], y0^binary.BigEndian.Uint64(mask[8:]))
}

// Seal encrypts and authenticates plaintext with nonce (12 bytes) and
// additional data aad, appends the ciphertext and 16-byte tag to dst and
// returns the result. To encrypt in place use plaintext[:0] as dst; any
// other overlap of dst's new bytes and plaintext panics, as does a wrong
// nonce length (cipher.AEAD contract).
func (g *GCM) Seal(dst, nonce, plaintext, aad []byte) []byte {
	if len(nonce) != NonceSize {
		panic("aesct: incorrect nonce length given to GCM")
	}
	if uint64(len(plaintext)) > maxPlaintext {
		panic("aesct: message too large for GCM")
	}
	ret, out := alias.AEADOutput("aesct", dst, len(plaintext)+TagSize, plaintext, aad)
	var ks [64]byte
	n0, n1, n2 := g.first(&ks, nonce)
	var mask [16]byte
	copy(mask[:], ks[:16])
	g.ctr(out, plaintext, &ks, n0, n1, n2)
	g.tag(out[len(plaintext):], aad, out[:len(plaintext)], mask[:])
	clear(ks[:])
	clear(mask[:])
	return ret
}

// Open verifies the 16-byte tag at the end of ciphertext over the
// ciphertext and aad in constant time and only then decrypts, appending
// the plaintext to dst. To decrypt in place use ciphertext[:0] as dst. On
// failure it returns ErrOpen and leaves dst's bytes unmodified (so an
// in-place ciphertext is left intact). A wrong nonce length panics.
func (g *GCM) Open(dst, nonce, ciphertext, aad []byte) ([]byte, error) {
	if len(nonce) != NonceSize {
		panic("aesct: incorrect nonce length given to GCM")
	}
	if len(ciphertext) < TagSize || uint64(len(ciphertext)) > maxPlaintext+TagSize {
		return nil, ErrOpen
	}
	tag := ciphertext[len(ciphertext)-TagSize:]
	ct := ciphertext[:len(ciphertext)-TagSize]
	ret, out := alias.AEADOutput("aesct", dst, len(ct), ct, aad)
	var ks [64]byte
	n0, n1, n2 := g.first(&ks, nonce)
	var want [16]byte
	g.tag(want[:], aad, ct, ks[:16])
	if subtle.ConstantTimeCompare(want[:], tag) != 1 {
		clear(ks[:])
		return nil, ErrOpen
	}
	g.ctr(out, ct, &ks, n0, n1, n2)
	clear(ks[:])
	return ret, nil
}
