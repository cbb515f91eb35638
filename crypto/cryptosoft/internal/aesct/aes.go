package aesct

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
)

// BlockSize is the AES block size in bytes.
const BlockSize = 16

// ErrKeySize is returned for a key that is not 16, 24 or 32 bytes long.
var ErrKeySize = errors.New("aesct: invalid AES key size")

// Cipher is a keyed bitsliced AES block cipher. It implements cipher.Block
// and multi-block CBC. A Cipher is immutable after NewCipher, so it is safe
// for concurrent use; after Wipe it must not be used.
type Cipher struct {
	nr int
	sk [120]uint64 // bitsliced round keys, (nr+1)*8 words used
}

var _ cipher.Block = (*Cipher)(nil)

// NewCipher expands key (16, 24 or 32 bytes) into a new Cipher. The key is
// not retained; the caller may zero it afterwards. The error never contains
// key material.
func NewCipher(key []byte) (*Cipher, error) {
	c := new(Cipher)
	if err := c.init(key); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cipher) init(key []byte) error {
	switch len(key) {
	case 16, 24, 32:
	default:
		return fmt.Errorf("%w: %d bytes", ErrKeySize, len(key))
	}
	c.nr = expandKey(&c.sk, key)
	return nil
}

// Wipe zeroes the round keys. The Cipher must not be used afterwards.
func (c *Cipher) Wipe() {
	clear(c.sk[:])
	c.nr = 0
}

// BlockSize returns 16.
func (c *Cipher) BlockSize() int { return BlockSize }

// load4 loads up to four 16-byte blocks from src (len(src) is a multiple of
// 16, at most 64; missing blocks are zero) into the bitsliced state q.
func load4(q *[8]uint64, src []byte) {
	var w [16]uint32
	for i := 0; i < len(src)/4; i++ {
		w[i] = binary.LittleEndian.Uint32(src[4*i:])
	}
	load4w(q, &w)
}

func load4w(q *[8]uint64, w *[16]uint32) {
	for i := 0; i < 4; i++ {
		q[i], q[i+4] = interleaveIn(w[4*i], w[4*i+1], w[4*i+2], w[4*i+3])
	}
	ortho(q)
}

// store4 writes the first len(dst)/16 blocks of the bitsliced state q to
// dst (len(dst) is a multiple of 16, at most 64).
func store4(dst []byte, q *[8]uint64) {
	var w [16]uint32
	store4w(&w, q)
	for i := 0; i < len(dst)/4; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], w[i])
	}
}

func store4w(w *[16]uint32, q *[8]uint64) {
	ortho(q)
	for i := 0; i < 4; i++ {
		w[4*i], w[4*i+1], w[4*i+2], w[4*i+3] = interleaveOut(q[i], q[i+4])
	}
}

// Encrypt encrypts the first block of src into dst. dst and src must
// overlap entirely or not at all (cipher.Block contract).
func (c *Cipher) Encrypt(dst, src []byte) {
	if len(src) < BlockSize {
		panic("aesct: input not full block")
	}
	if len(dst) < BlockSize {
		panic("aesct: output not full block")
	}
	var q [8]uint64
	load4(&q, src[:BlockSize])
	encryptSliced(c.nr, c.sk[:], &q)
	store4(dst[:BlockSize], &q)
}

// Decrypt decrypts the first block of src into dst (cipher.Block
// contract).
func (c *Cipher) Decrypt(dst, src []byte) {
	if len(src) < BlockSize {
		panic("aesct: input not full block")
	}
	if len(dst) < BlockSize {
		panic("aesct: output not full block")
	}
	var q [8]uint64
	load4(&q, src[:BlockSize])
	decryptSliced(c.nr, c.sk[:], &q)
	store4(dst[:BlockSize], &q)
}

// EncryptBlocks encrypts len(src)/16 whole blocks from src to dst in ECB
// fashion, four at a time (used by tests and benchmarks).
func (c *Cipher) EncryptBlocks(dst, src []byte) {
	var q [8]uint64
	for len(src) >= BlockSize {
		n := min(len(src)&^(BlockSize-1), 4*BlockSize)
		load4(&q, src[:n])
		encryptSliced(c.nr, c.sk[:], &q)
		store4(dst[:n], &q)
		src, dst = src[n:], dst[n:]
	}
}

// cbcArgs panics unless len(iv) == 16, src is whole blocks and dst is
// at least as long as src (the EncryptCBC and DecryptCBC contract).
func cbcArgs(dst, src, iv []byte) {
	if len(iv) != BlockSize {
		panic("aesct: CBC IV is not 16 bytes")
	}
	if len(src)%BlockSize != 0 {
		panic("aesct: CBC input not full blocks")
	}
	if len(dst) < len(src) {
		panic("aesct: CBC output smaller than input")
	}
}

// EncryptCBC encrypts src into dst in CBC mode with iv, which is not
// modified. len(src) must be a multiple of 16, len(dst) >= len(src) and
// len(iv) == 16; dst and src may overlap exactly. CBC encryption is serial,
// so each block costs one full bitsliced AES evaluation.
func (c *Cipher) EncryptCBC(dst, src, iv []byte) {
	cbcArgs(dst, src, iv)
	var w [16]uint32
	var q [8]uint64
	c0 := binary.LittleEndian.Uint32(iv[0:])
	c1 := binary.LittleEndian.Uint32(iv[4:])
	c2 := binary.LittleEndian.Uint32(iv[8:])
	c3 := binary.LittleEndian.Uint32(iv[12:])
	for len(src) >= BlockSize {
		w[0] = c0 ^ binary.LittleEndian.Uint32(src[0:])
		w[1] = c1 ^ binary.LittleEndian.Uint32(src[4:])
		w[2] = c2 ^ binary.LittleEndian.Uint32(src[8:])
		w[3] = c3 ^ binary.LittleEndian.Uint32(src[12:])
		q[0], q[4] = interleaveIn(w[0], w[1], w[2], w[3])
		q[1], q[2], q[3], q[5], q[6], q[7] = 0, 0, 0, 0, 0, 0
		ortho(&q)
		encryptSliced(c.nr, c.sk[:], &q)
		ortho(&q)
		c0, c1, c2, c3 = interleaveOut(q[0], q[4])
		binary.LittleEndian.PutUint32(dst[0:], c0)
		binary.LittleEndian.PutUint32(dst[4:], c1)
		binary.LittleEndian.PutUint32(dst[8:], c2)
		binary.LittleEndian.PutUint32(dst[12:], c3)
		src, dst = src[BlockSize:], dst[BlockSize:]
	}
}

// DecryptCBC decrypts src into dst in CBC mode with iv, which is not
// modified. len(src) must be a multiple of 16, len(dst) >= len(src) and
// len(iv) == 16; dst and src may overlap exactly. Four blocks are decrypted
// in parallel per bitsliced evaluation.
func (c *Cipher) DecryptCBC(dst, src, iv []byte) {
	cbcArgs(dst, src, iv)
	var w, cw [16]uint32
	var q [8]uint64
	var prev [4]uint32
	for i := range prev {
		prev[i] = binary.LittleEndian.Uint32(iv[4*i:])
	}
	for len(src) > 0 {
		n := min(len(src), 4*BlockSize)
		nw := n / 4
		for i := 0; i < nw; i++ {
			cw[i] = binary.LittleEndian.Uint32(src[4*i:])
		}
		for i := nw; i < 16; i++ {
			cw[i] = 0
		}
		load4w(&q, &cw)
		decryptSliced(c.nr, c.sk[:], &q)
		store4w(&w, &q)
		// Chain: P_i = D(C_i) ^ C_(i-1), with C_(-1) = prev.
		for i := 0; i < 4; i++ {
			w[i] ^= prev[i]
		}
		for i := 4; i < nw; i++ {
			w[i] ^= cw[i-4]
		}
		copy(prev[:], cw[nw-4:nw])
		for i := 0; i < nw; i++ {
			binary.LittleEndian.PutUint32(dst[4*i:], w[i])
		}
		src, dst = src[n:], dst[n:]
	}
}

// EncryptCBCMulti CBC-encrypts len(src) independent messages, src[i] into
// dst[i] with iv[i], running four messages in the four lanes of each
// bitsliced evaluation (CBC encryption of one message is serial and uses
// one lane only). Each message follows the EncryptCBC rules (whole blocks,
// len(dst[i]) >= len(src[i]), exact or no overlap, 16-byte iv[i], not
// modified); the slices of dst, src and iv must have the same length.
// Messages may have different lengths. It does not allocate.
func (c *Cipher) EncryptCBCMulti(dst, src, iv [][]byte) {
	if len(dst) != len(src) || len(iv) != len(src) {
		panic("aesct: EncryptCBCMulti: dst, src and iv counts differ")
	}
	for i := range src {
		if len(iv[i]) != BlockSize || len(src[i])%BlockSize != 0 || len(dst[i]) < len(src[i]) {
			panic("aesct: EncryptCBCMulti: bad message or IV length")
		}
	}
	for g := 0; g < len(src); g += 4 {
		n := min(len(src)-g, 4)
		var prev, w [16]uint32
		var q [8]uint64
		blocks := 0
		for l := 0; l < n; l++ {
			for k := 0; k < 4; k++ {
				prev[4*l+k] = binary.LittleEndian.Uint32(iv[g+l][4*k:])
			}
			blocks = max(blocks, len(src[g+l])/BlockSize)
		}
		for b := 0; b < blocks; b++ {
			off := b * BlockSize
			for l := 0; l < 4; l++ {
				if l < n && off < len(src[g+l]) {
					s := src[g+l][off : off+BlockSize]
					for k := 0; k < 4; k++ {
						w[4*l+k] = prev[4*l+k] ^ binary.LittleEndian.Uint32(s[4*k:])
					}
				} else {
					w[4*l], w[4*l+1], w[4*l+2], w[4*l+3] = 0, 0, 0, 0
				}
			}
			load4w(&q, &w)
			encryptSliced(c.nr, c.sk[:], &q)
			store4w(&w, &q)
			for l := 0; l < n; l++ {
				if off < len(src[g+l]) {
					d := dst[g+l][off : off+BlockSize]
					for k := 0; k < 4; k++ {
						prev[4*l+k] = w[4*l+k]
						binary.LittleEndian.PutUint32(d[4*k:], w[4*l+k])
					}
				}
			}
		}
	}
}
