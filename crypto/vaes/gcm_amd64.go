package vaes

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/keelinit/keel/crypto/internal/alias"
)

// NonceSize and TagSize are the only GCM parameters this package
// implements: the RFC 4106 ESP layout (salt(4) || IV(8), 16-byte ICV).
const (
	NonceSize = 12
	TagSize   = 16
)

// maxPlaintext is GCM's limit for one message with a 96-bit nonce
// (2^32 - 2 blocks, SP 800-38D section 5.2.1.1).
const maxPlaintext = (1<<32 - 2) * 16

// gcm is AES-GCM with a 12-byte nonce and a 16-byte tag. Its state is
// read-only after newGCM, so one value may be used from several goroutines.
type gcm struct {
	// The tables come first and are multiples of 64 bytes, so that the
	// assembly's 32-byte loads do not cross cache lines (the heap aligns
	// the 1 KiB object to its size class).
	pow    [512]byte     // H^16..H^1, then their Karatsuba lo^hi
	rk     [15 * 32]byte // round keys, each in both 128-bit lanes
	rounds int           // 10 or 14
}

// newGCM returns AES-GCM for a 16 or 32-byte key. It requires the CPU
// features of Supported.
func newGCM(key []byte) (cipher.AEAD, error) {
	g := &gcm{}
	if err := g.expandKey(key); err != nil {
		return nil, err
	}
	var h [16]byte
	var zero [16]byte
	ctrBlocks(&g.rk[0], g.rounds, &zero, &h[0], &h[0], 1) // H = E(K, 0)
	ghashInit(&g.pow, &h)
	clear(h[:])
	return g, nil
}

// rcon are the FIPS-197 round constants.
var rcon = [10]uint32{0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1b, 0x36}

// expandKey is the FIPS-197 key expansion for AES-128 and AES-256. Words
// are kept with their bytes in little-endian order (byte 0 of the word
// in bits 0-7), the order in which AESENC reads a round key from memory,
// so RotWord is a right rotation by 8. SubWord runs on the AES unit:
// no table, nothing depends on the key but the values.
func (g *gcm) expandKey(key []byte) error {
	nk := len(key) / 4
	switch len(key) {
	case 16:
		g.rounds = 10
	case 32:
		g.rounds = 14
	default:
		return fmt.Errorf("vaes: invalid AES-GCM key length %d (want 16 or 32)", len(key))
	}
	var w [60]uint32
	for i := range nk {
		w[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	for i := nk; i < 4*(g.rounds+1); i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			t = bits.RotateLeft32(subWord(t), -8) ^ rcon[i/nk-1]
		case nk > 6 && i%nk == 4:
			t = subWord(t)
		}
		w[i] = w[i-nk] ^ t
	}
	for i := range 4 * (g.rounds + 1) {
		r, c := i/4, i%4
		binary.LittleEndian.PutUint32(g.rk[32*r+4*c:], w[i])
		binary.LittleEndian.PutUint32(g.rk[32*r+16+4*c:], w[i])
	}
	clear(w[:])
	return nil
}

// Wipe zeroes the expanded key and the powers of H (cpuprov calls it when
// the session closes). The AEAD must not be used afterwards.
func (g *gcm) Wipe() {
	clear(g.rk[:])
	clear(g.pow[:])
}

// NonceSize returns 12.
func (g *gcm) NonceSize() int { return NonceSize }

// Overhead returns 16, the tag length.
func (g *gcm) Overhead() int { return TagSize }

// Seal implements cipher.AEAD: it appends the encryption of plaintext
// and the tag to dst. dst and plaintext overlap exactly or not at all.
func (g *gcm) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	if len(nonce) != NonceSize {
		panic("vaes: incorrect nonce length given to GCM")
	}
	if uint64(len(plaintext)) > maxPlaintext {
		panic("vaes: message too large for GCM")
	}
	n := len(plaintext)
	ret, out := alias.AEADOutput("vaes", dst, n+TagSize, plaintext, additionalData)
	var st sealState
	copy(st.ctr[:NonceSize], nonce)
	st.ctr[15] = 1
	aadInline := 0
	if len(additionalData) <= 16 {
		// ESP's 8 or 12 bytes: hashed inside gcmSeal.
		copy(st.aad[:], additionalData)
		aadInline = (len(additionalData) + 15) >> 4
	} else {
		g.ghash(&st.y, additionalData)
	}
	binary.BigEndian.PutUint64(st.lens[:8], uint64(len(additionalData))*8)
	binary.BigEndian.PutUint64(st.lens[8:], uint64(n)*8)
	full := n &^ 15
	copy(st.tail[:], plaintext[full:])
	var src, dstp *byte
	if full > 0 {
		src, dstp = &plaintext[0], &out[0]
	}
	gcmSeal(g, &st, dstp, src, full/16, aadInline, n-full)
	copy(out[full:n], st.tail[:])
	copy(out[n:], st.tag[:])
	clear(st.tail[:])
	return ret
}

// sealState is gcmSeal's block-sized input and output (field offsets
// reach the assembly through go_asm.h).
type sealState struct {
	ctr  [16]byte // in: J0 = nonce || 1
	y    [16]byte // in: GHASH state (of AAD longer than 16 bytes)
	aad  [16]byte // in: AAD of up to 16 bytes, zero-padded
	tail [16]byte // in: plaintext after the whole blocks, zero-padded; out: its ciphertext
	lens [16]byte // in: the GHASH length block
	tag  [16]byte // out (and E(K, J0) while the 16-block loop runs)
	ctrv [32]byte // scratch: the counter pair during the 16-block loop
}

// Open implements cipher.AEAD: it authenticates ciphertext (whose last 16
// bytes are the tag) and additionalData and, only if the tag matches
// (compared in constant time), decrypts into dst. On failure nothing is
// written to dst.
func (g *gcm) Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error) {
	if len(nonce) != NonceSize {
		panic("vaes: incorrect nonce length given to GCM")
	}
	if len(ciphertext) < TagSize || uint64(len(ciphertext)) > maxPlaintext+TagSize {
		return nil, errOpen
	}
	n := len(ciphertext) - TagSize
	ct, tag := ciphertext[:n], ciphertext[n:]
	ret, out := alias.AEADOutput("vaes", dst, n, ct, additionalData)
	var ctr, mask [16]byte
	var want [TagSize]byte
	g.start(&ctr, &mask, nonce)
	g.tag(want[:], &mask, additionalData, ct)
	if subtle.ConstantTimeCompare(want[:], tag) != 1 {
		return nil, errOpen
	}
	g.ctr(&ctr, out, ct)
	return ret, nil
}

// start sets ctr to the first data counter block (nonce || 2) and mask to
// E(K, J0), J0 = nonce || 1.
func (g *gcm) start(ctr, mask *[16]byte, nonce []byte) {
	copy(ctr[:NonceSize], nonce)
	ctr[15] = 1
	ctrBlocks(&g.rk[0], g.rounds, ctr, &mask[0], &mask[0], 1)
}

// ctr encrypts src into dst (same length) from counter block ctr.
func (g *gcm) ctr(ctr *[16]byte, dst, src []byte) {
	full := len(src) &^ 15
	if full > 0 {
		ctrBlocks(&g.rk[0], g.rounds, ctr, &dst[0], &src[0], full/16)
	}
	if rem := len(src) - full; rem > 0 {
		var b [16]byte
		copy(b[:], src[full:])
		ctrBlocks(&g.rk[0], g.rounds, ctr, &b[0], &b[0], 1)
		copy(dst[full:], b[:rem])
		clear(b[:])
	}
}

// tag writes GHASH(aad, ct) XOR mask to out (16 bytes).
func (g *gcm) tag(out []byte, mask *[16]byte, aad, ct []byte) {
	var y, lens [16]byte
	g.ghash(&y, aad)
	g.ghash(&y, ct)
	binary.BigEndian.PutUint64(lens[:8], uint64(len(aad))*8)
	binary.BigEndian.PutUint64(lens[8:], uint64(len(ct))*8)
	ghashBlocks(&g.pow, &y, &lens[0], 1)
	// The state is byte-reflected: reverse it back.
	for i := range TagSize {
		out[i] = y[15-i] ^ mask[i]
	}
}

// ghash absorbs data, zero-padded to whole blocks, into y.
func (g *gcm) ghash(y *[16]byte, data []byte) {
	full := len(data) &^ 15
	if full > 0 {
		ghashBlocks(&g.pow, y, &data[0], full/16)
	}
	if rem := len(data) - full; rem > 0 {
		var b [16]byte
		copy(b[:], data[full:])
		ghashBlocks(&g.pow, y, &b[0], 1)
	}
}
