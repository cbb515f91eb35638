// Package cryptosoft is Keel's portable software crypto provider: AES
// (128/192/256) as a bitsliced, constant-time block cipher in the style of
// BearSSL's aes_ct64, AES-CBC (four blocks in parallel when decrypting),
// AES-GCM with a constant-time GHASH (BearSSL ghash_ctmul64 style) and
// ChaCha20-Poly1305 (RFC 8439), all pure Go written here; HMAC and SHA come
// from the standard library. The ESP request layout, encrypt-then-MAC and
// the session lifecycle come from the shared CPU provider (cpuprov).
//
// Constant-time by construction: no table lookup and no branch is indexed
// by key or data. AES evaluates the S-box as a Boolean circuit over
// bit-sliced state (four blocks per evaluation), ShiftRows/MixColumns are
// fixed shifts and XORs, and the key schedule uses the same circuit. GHASH
// multiplies carry-less with masked integer multiplications ("holes" absorb
// the carries). ChaCha20 is add-rotate-xor; Poly1305 uses bits.Mul64 and
// bits.Add64 with a masked final reduction. Tags are compared with
// crypto/subtle, and AEAD Open verifies before it decrypts. See
// internal/aesct and internal/chachapoly for the details.
//
// Importing the package registers the "cryptosoft" module (kind
// crypto-provider, depending on the crypto module); loading it registers
// the provider with the Framework carried by the load context.
package cryptosoft

import (
	"context"
	"crypto/cipher"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/cryptosoft/internal/aesct"
	"github.com/keelinit/keel/crypto/cryptosoft/internal/chachapoly"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
	"github.com/keelinit/keel/modules"
)

// Name is the provider and module name.
const Name = "cryptosoft"

// ModuleVersion is the cryptosoft module's MODULE_VERSION.
const ModuleVersion = 1

// Priority is cryptosoft's static priority hint, below aesni's; it only
// breaks ties in measured throughput.
const Priority = 10

func init() {
	modules.Register(crypto.ProviderModule(Name, ModuleVersion,
		"portable constant-time software crypto provider (bitsliced AES, ct GHASH, ChaCha20-Poly1305)",
		func(context.Context) (crypto.Provider, error) { return New(), nil }))
}

// New returns a new cryptosoft provider (kind software). It claims AES-CBC
// 128/192/256 and NULL with every HMAC, AES-GCM 128/256 and
// ChaCha20-Poly1305. Safe for concurrent use.
func New() crypto.Provider {
	return cpuprov.New(crypto.ProviderInfo{
		Name:     Name,
		Kind:     crypto.KindSoftware,
		Priority: Priority,
		Params: map[string]string{
			"aes":   "bitsliced ct64 (4 blocks/evaluation)",
			"ghash": "ctmul64",
			"aead":  "aes-gcm, chacha20-poly1305 (rfc8439)",
		},
	}, cpuprov.Primitives{
		NewAES:              NewAES,
		NewGCM:              NewGCM,
		NewChaCha20Poly1305: NewChaCha20Poly1305,
	})
}

// CBCBlock is the multi-block CBC interface that the Block returned by
// NewAES implements (the same shape as cpuprov's). dst and src are equal
// or do not overlap; len(src) is a multiple of 16 and len(dst) >= len(src);
// iv is 16 bytes and is not modified. Anything else panics.
type CBCBlock interface {
	cipher.Block
	EncryptCBC(dst, src, iv []byte)
	DecryptCBC(dst, src, iv []byte)
}

// CBCMultiEncrypter is also implemented by the Block NewAES returns:
// EncryptCBCMulti CBC-encrypts len(src) independent messages (src[i] to
// dst[i] with iv[i], each under the CBCBlock rules, lengths may differ),
// four at a time in the four lanes of the bitsliced AES. CBC encryption of
// a single message is serial and uses one lane, so a batch of requests of
// one session encrypts up to 4x faster this way. It does not allocate.
type CBCMultiEncrypter interface {
	EncryptCBCMulti(dst, src, iv [][]byte)
}

// Wiper is implemented by every value NewAES, NewGCM and
// NewChaCha20Poly1305 return: Wipe zeroes the expanded key, after which the
// value must not be used. It must not run concurrently with other methods.
type Wiper interface{ Wipe() }

// NewAES returns the constant-time bitsliced AES for a 16, 24 or 32-byte
// key. The result implements CBCBlock, CBCMultiEncrypter and Wiper, is immutable and safe for
// concurrent use. The key is not retained; errors never contain key
// material.
func NewAES(key []byte) (cipher.Block, error) {
	c, err := aesct.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewGCM returns constant-time AES-GCM (12-byte nonce, 16-byte tag) for a
// 16, 24 or 32-byte key without salt. Seal and Open follow cipher.AEAD
// (exact-overlap in place, panics on a wrong nonce length); Open verifies
// the tag in constant time before decrypting and leaves dst untouched on
// failure. The result implements Wiper and is safe for concurrent use.
func NewGCM(key []byte) (cipher.AEAD, error) {
	g, err := aesct.NewGCM(key)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// NewChaCha20Poly1305 returns ChaCha20-Poly1305 (RFC 8439, 12-byte nonce,
// 16-byte tag) for a 32-byte key, with the same Seal/Open semantics as
// NewGCM. The result implements Wiper and is safe for concurrent use.
func NewChaCha20Poly1305(key []byte) (cipher.AEAD, error) {
	a, err := chachapoly.New(key)
	if err != nil {
		return nil, err
	}
	return a, nil
}
