package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/ike/wire"
)

// ErrIntegrity is what Open returns for a message that fails its integrity
// check or decryption: the message must be dropped silently (§2.21.2).
var ErrIntegrity = errors.New("ike: SK payload integrity check failed")

// Protector seals and opens the SK payloads of one direction of an IKE SA.
type Protector struct {
	encr  Encr
	integ Integ
	key   []byte // SK_e, with the AEAD salt at its end
	ikey  []byte // SK_a
	aead  cipher.AEAD
	block cipher.Block

	mu  sync.Mutex
	ctr uint64 // the AEAD's explicit IV: a counter, never reused under key
}

// aeadIVLen is the explicit IV of AES-GCM (RFC 5282 §3.1) and
// ChaCha20-Poly1305 (RFC 7634 §2) in IKEv2.
const aeadIVLen = 8

// NewProtector returns the Protector for encryption key ek and integrity
// key ik (nil for an AEAD) of suite s. It copies the keys.
func NewProtector(s Suite, ek, ik []byte) (*Protector, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	if len(ek) != s.Encr.KeyLen || len(ik) != s.Integ.KeyLen {
		return nil, fmt.Errorf("ike: key lengths %d/%d, suite wants %d/%d", len(ek), len(ik), s.Encr.KeyLen, s.Integ.KeyLen)
	}
	p := &Protector{encr: s.Encr, integ: s.Integ, key: append([]byte(nil), ek...), ikey: append([]byte(nil), ik...)}
	var err error
	switch s.Encr.ID {
	case wire.ENCR_AES_GCM_16:
		var b cipher.Block
		if b, err = aes.NewCipher(p.key[:len(p.key)-4]); err == nil {
			p.aead, err = cipher.NewGCM(b)
		}
	case wire.ENCR_CHACHA20_POLY1305:
		p.aead, err = chacha20poly1305.New(p.key[:32])
	case wire.ENCR_AES_CBC:
		p.block, err = aes.NewCipher(p.key)
	default:
		err = fmt.Errorf("ike: unsupported encryption transform %d", s.Encr.ID)
	}
	if err != nil {
		p.Zero()
		return nil, err
	}
	return p, nil
}

// BodyLen returns the SK body length Seal produces for n plaintext bytes.
func (p *Protector) BodyLen(n int) int {
	if p.aead != nil {
		return aeadIVLen + n + 1 + p.aead.Overhead() // no padding, one pad-length octet
	}
	return aes.BlockSize + (n/aes.BlockSize+1)*aes.BlockSize + p.integ.ICVLen
}

// Seal appends to msg (the IKE header and the SK payload header, their
// length fields already final: see wire.SealMessage) the SK body
// protecting plaintext: IV, ciphertext of plaintext | padding | pad length,
// and the integrity checksum. For an AEAD the associated data is msg
// (RFC 5282 §5.1); otherwise the checksum covers msg, IV and ciphertext.
func (p *Protector) Seal(msg, plaintext []byte) ([]byte, error) {
	if p.key == nil {
		return nil, errors.New("ike: Protector used after Zero")
	}
	if p.aead != nil {
		p.mu.Lock()
		if p.ctr == ^uint64(0) {
			p.mu.Unlock()
			return nil, errors.New("ike: SK explicit IV space exhausted; rekey the IKE SA")
		}
		p.ctr++
		iv := p.ctr
		p.mu.Unlock()
		aad := msg
		msg = binary.BigEndian.AppendUint64(msg, iv)
		nonce := p.nonce(msg[len(msg)-aeadIVLen:])
		pt := append(append(make([]byte, 0, len(plaintext)+1), plaintext...), 0)
		// aad aliases msg's prefix: Seal reads it before appending.
		out := p.aead.Seal(msg, nonce, pt, aad[:len(aad):len(aad)])
		wipe(pt)
		return out, nil
	}
	bs := aes.BlockSize
	pad := bs - 1 - len(plaintext)%bs
	start := len(msg)
	msg = append(msg, make([]byte, bs)...)
	if _, err := io.ReadFull(rand.Reader, msg[start:]); err != nil {
		return nil, fmt.Errorf("ike: SK IV: %w", err)
	}
	ct := len(msg)
	msg = append(msg, plaintext...)
	msg = append(msg, make([]byte, pad)...)
	msg = append(msg, byte(pad))
	cipher.NewCBCEncrypter(p.block, msg[start:ct]).CryptBlocks(msg[ct:], msg[ct:])
	return append(msg, p.mac(msg)...), nil
}

// Open checks and decrypts the SK body of a received message raw (the
// whole datagram, the SK payload last) and returns the plaintext payload
// chain without padding. Any failure is ErrIntegrity or a length error.
func (p *Protector) Open(raw []byte, body []byte) ([]byte, error) {
	if p.key == nil {
		return nil, errors.New("ike: Protector used after Zero")
	}
	if len(body) > len(raw) {
		return nil, errors.New("ike: SK body longer than the message")
	}
	aad := raw[:len(raw)-len(body)]
	var pt []byte
	if p.aead != nil {
		if len(body) < aeadIVLen+p.aead.Overhead()+1 {
			return nil, fmt.Errorf("ike: SK body of %d bytes is too short", len(body))
		}
		var err error
		pt, err = p.aead.Open(nil, p.nonce(body[:aeadIVLen]), body[aeadIVLen:], aad)
		if err != nil {
			return nil, ErrIntegrity
		}
	} else {
		bs, icv := aes.BlockSize, p.integ.ICVLen
		n := len(body) - bs - icv
		if n < bs || n%bs != 0 {
			return nil, fmt.Errorf("ike: SK body of %d bytes: ciphertext not a positive multiple of the block size", len(body))
		}
		want := p.mac(raw[:len(raw)-icv])
		if subtle.ConstantTimeCompare(want, raw[len(raw)-icv:]) != 1 {
			return nil, ErrIntegrity
		}
		pt = make([]byte, n)
		cipher.NewCBCDecrypter(p.block, body[:bs]).CryptBlocks(pt, body[bs:bs+n])
	}
	padLen := int(pt[len(pt)-1])
	if padLen+1 > len(pt) {
		wipe(pt)
		return nil, fmt.Errorf("ike: SK pad length %d exceeds the %d-byte plaintext", padLen, len(pt))
	}
	return pt[:len(pt)-1-padLen], nil
}

func (p *Protector) nonce(iv []byte) []byte {
	salt := p.key[len(p.key)-4:]
	return append(append(make([]byte, 0, 12), salt...), iv...)
}

func (p *Protector) mac(data []byte) []byte {
	var h func() hash.Hash
	switch p.integ.ID {
	case wire.AUTH_HMAC_SHA2_256_128:
		h = sha256.New
	case wire.AUTH_HMAC_SHA2_384_192:
		h = sha512.New384
	default:
		h = sha512.New
	}
	m := hmac.New(h, p.ikey)
	m.Write(data)
	return m.Sum(nil)[:p.integ.ICVLen]
}

// Zero wipes the Protector's key copies; Seal and Open fail afterwards.
// The cipher objects of the standard library keep expanded key schedules
// that cannot be wiped from outside; they are dropped.
func (p *Protector) Zero() {
	wipe(p.key)
	wipe(p.ikey)
	p.key, p.ikey, p.aead, p.block = nil, nil, nil, nil
}

// String prints the transform, never the keys.
func (p *Protector) String() string {
	return fmt.Sprintf("Protector(encr %d/%d, integ %d, keys redacted)", p.encr.ID, p.encr.KeyBits, p.integ.ID)
}

// GoString is String.
func (p *Protector) GoString() string { return p.String() }
