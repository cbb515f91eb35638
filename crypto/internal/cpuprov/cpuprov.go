// Package cpuprov is a generic crypto.Provider for primitives that run on
// the CPU (stdlib AES-NI code for aesni, constant-time software code for
// cryptosoft). The provider supplies block cipher and AEAD constructors;
// cpuprov supplies the ESP request layout, encrypt-then-MAC with pre-keyed
// HMAC state, validation and the session lifecycle.
//
// Requests are processed synchronously inside Session.Submit, and the
// session's CompletionFunc is called once per Submit, after processing and
// before Submit returns, outside the session's lock. Sessions also
// implement crypto.SyncSession: ProcessSync processes a batch the same
// way without calling the CompletionFunc, which lets a crypto.Binding
// deliver it without its completion bookkeeping. Steady-state
// processing does not allocate: CBC modes, HMAC states, nonces and scratch
// buffers are per session and reused.
package cpuprov

import (
	"context"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/subtle"
	"fmt"
	"hash"
	"maps"
	"sync"
	"unsafe"

	"github.com/keelinit/keel/crypto"
)

// Primitives are the in-CPU cipher constructors a provider brings. The
// functions must be safe for concurrent use; the returned values are used
// by one session at a time.
type Primitives struct {
	// NewAES returns an AES block cipher for a 16, 24 or 32-byte key, used
	// for AES-CBC. If the Block also implements CBCBlock, cpuprov uses its
	// EncryptCBC/DecryptCBC (which must not modify iv).
	NewAES func(key []byte) (cipher.Block, error)
	// NewGCM returns AES-GCM with a 12-byte nonce and a 16-byte tag for a
	// 16 or 32-byte key (without salt), and for a 24-byte key if it
	// supports AES-192. Nil: AES-GCM is not claimed.
	NewGCM func(key []byte) (cipher.AEAD, error)
	// NewChaCha20Poly1305 returns ChaCha20-Poly1305 (RFC 8439) for a
	// 32-byte key. Nil: ChaCha20-Poly1305 is not claimed.
	NewChaCha20Poly1305 func(key []byte) (cipher.AEAD, error)
	// NoNull: ESP NULL with HMAC is not claimed (a provider that brings
	// only an AEAD would otherwise claim the same stdlib HMAC code as
	// aesni under its own name).
	NoNull bool
}

// CBCBlock is an optional interface of the Block returned by
// Primitives.NewAES: whole-buffer CBC without per-call allocation. dst and
// src are equal or do not overlap; len(src) is a multiple of 16; iv is
// 16 bytes and is not modified.
type CBCBlock interface {
	EncryptCBC(dst, src, iv []byte)
	DecryptCBC(dst, src, iv []byte)
}

// ivSetter is implemented by the stdlib CBC BlockModes (crypto/cipher).
type ivSetter interface{ SetIV(iv []byte) }

type provider struct {
	info  crypto.ProviderInfo
	prims Primitives
	caps  []crypto.Capability
	algs  map[crypto.Algorithm]bool
}

// New returns a Provider for prims described by info. It claims AES-CBC
// 128/192/256 with every HMAC (if NewAES is set), NULL with every HMAC
// (unless NoNull),
// AES-GCM 128/256 (if NewGCM is set) and AES-GCM 192 (if NewGCM also
// accepts a 24-byte key, probed here with a throwaway all-zero key), and
// ChaCha20-Poly1305 (if NewChaCha20Poly1305 is set). The provider is safe
// for concurrent use.
func New(info crypto.ProviderInfo, prims Primitives) crypto.Provider {
	p := &provider{info: info, prims: prims, algs: map[crypto.Algorithm]bool{}}
	p.info.Params = maps.Clone(info.Params)
	auths := []crypto.Auth{crypto.AuthHMACSHA1_96, crypto.AuthHMACSHA256_128, crypto.AuthHMACSHA384_192, crypto.AuthHMACSHA512_256}
	add := func(a crypto.Algorithm) {
		p.caps = append(p.caps, crypto.Capability{Alg: a})
		p.algs[a] = true
	}
	if prims.NewAES != nil {
		for _, bits := range []int{128, 192, 256} {
			for _, au := range auths {
				add(crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: bits, Auth: au})
			}
		}
	}
	if !prims.NoNull {
		for _, au := range auths {
			add(crypto.Algorithm{Cipher: crypto.CipherNull, Auth: au})
		}
	}
	if prims.NewGCM != nil {
		add(crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128})
		if a, err := prims.NewGCM(make([]byte, 24)); err == nil && a.NonceSize() == 12 && a.Overhead() == 16 {
			add(crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 192})
		}
		add(crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 256})
	}
	if prims.NewChaCha20Poly1305 != nil {
		add(crypto.Algorithm{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256})
	}
	return p
}

// Info returns the static description given to New (Params copied).
func (p *provider) Info() crypto.ProviderInfo {
	i := p.info
	i.Params = maps.Clone(p.info.Params)
	return i
}

// Capabilities returns a copy of the claimed algorithms.
func (p *provider) Capabilities() []crypto.Capability {
	return append([]crypto.Capability(nil), p.caps...)
}

// Errors used for malformed requests: preallocated so that the failure
// path does not allocate either.
var (
	errIVLen    = fmt.Errorf("%w: IV length does not match the algorithm", crypto.ErrInvalidRequest)
	errICVLen   = fmt.Errorf("%w: ICV length does not match the algorithm", crypto.ErrInvalidRequest)
	errBlockLen = fmt.Errorf("%w: AES-CBC data is not a multiple of 16 bytes", crypto.ErrInvalidRequest)
	errClosed   = fmt.Errorf("cpuprov: session: %w", crypto.ErrClosed)
)

// NewSession keys a session for sp. Keys are copied into the cipher and
// HMAC states; the caller may zero sp afterwards.
func (p *provider) NewSession(sp crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	if err := sp.CheckParams(); err != nil {
		return nil, fmt.Errorf("%s: new session: %w", p.info.Name, err)
	}
	if !p.algs[sp.Alg] {
		return nil, fmt.Errorf("%s: new session: %w: %v", p.info.Name, crypto.ErrUnsupported, sp.Alg)
	}
	if done == nil {
		return nil, fmt.Errorf("%s: new session: nil CompletionFunc", p.info.Name)
	}
	s := &session{alg: sp.Alg, done: done, icvLen: sp.Alg.ICVLen(), ivLen: sp.Alg.IVLen()}
	var err error
	switch sp.Alg.Cipher {
	case crypto.CipherAESGCM, crypto.CipherChaCha20Poly1305:
		key := sp.CipherKey[:len(sp.CipherKey)-4]
		copy(s.nonce[:4], sp.CipherKey[len(key):])
		if sp.Alg.Cipher == crypto.CipherAESGCM {
			s.aead, err = p.prims.NewGCM(key)
		} else {
			s.aead, err = p.prims.NewChaCha20Poly1305(key)
		}
		if err == nil && (s.aead.NonceSize() != 12 || s.aead.Overhead() != 16) {
			err = fmt.Errorf("AEAD has nonce %d, tag %d; want 12, 16", s.aead.NonceSize(), s.aead.Overhead())
		}
	case crypto.CipherAESCBC:
		s.block, err = p.prims.NewAES(sp.CipherKey)
		if err == nil {
			err = s.initCBC()
		}
	}
	if err != nil {
		wipe(s.aead)
		wipe(s.block)
		clear(s.nonce[:])
		// The error comes from a constructor given only a key length;
		// it does not contain key material.
		return nil, fmt.Errorf("%s: new session %v: %w", p.info.Name, sp.Alg, err)
	}
	if sp.Alg.Auth != crypto.AuthNone {
		s.mac = hmac.New(sp.Alg.Auth.Hash(), sp.AuthKey)
	}
	return s, nil
}

type session struct {
	alg    crypto.Algorithm
	done   crypto.CompletionFunc
	icvLen int
	ivLen  int // alg.IVLen(), 8 for the AEADs

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup // Submit calls between accept and completion

	aead  cipher.AEAD
	nonce [12]byte // salt || IV; salt set at creation

	block  cipher.Block
	cbc    CBCBlock         // fast whole-buffer CBC, if the Block has it
	enc    cipher.BlockMode // reusable stdlib modes, re-IVed per request
	dec    cipher.BlockMode
	zeroIV [16]byte

	mac     hash.Hash
	sum     [64]byte
	scratch []byte
}

func (s *session) initCBC() error {
	if c, ok := s.block.(CBCBlock); ok {
		s.cbc = c
		return nil
	}
	if s.block.BlockSize() != 16 {
		return fmt.Errorf("AES block size %d", s.block.BlockSize())
	}
	enc := cipher.NewCBCEncrypter(s.block, s.zeroIV[:])
	dec := cipher.NewCBCDecrypter(s.block, s.zeroIV[:])
	_, eok := enc.(ivSetter)
	_, dok := dec.(ivSetter)
	if eok && dok {
		s.enc, s.dec = enc, dec
	}
	// Otherwise CBC is chained by hand over s.block (still no allocation).
	return nil
}

// Submit processes every request in place, then calls the CompletionFunc
// once with reqs. It accepts nothing after Close.
func (s *session) Submit(reqs []*crypto.Request) int {
	if len(reqs) == 0 {
		return 0
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0
	}
	s.running.Add(1)
	s.processBatch(reqs)
	s.mu.Unlock()
	s.done(reqs)
	s.running.Done()
	return len(reqs)
}

// ProcessSync implements crypto.SyncSession: it processes every request
// in place and sets its Status before returning, without calling the
// CompletionFunc. It processes nothing after Close.
func (s *session) ProcessSync(reqs []*crypto.Request) int {
	if len(reqs) == 0 {
		return 0
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0
	}
	s.processBatch(reqs)
	s.mu.Unlock()
	return len(reqs)
}

// processBatch processes reqs; s.mu held, session open. The AEAD case,
// the hot one, is decided once per batch.
func (s *session) processBatch(reqs []*crypto.Request) {
	if s.aead == nil {
		for _, r := range reqs {
			s.process(r)
		}
		return
	}
	for _, r := range reqs {
		switch {
		case len(r.IV) != 8: // AEAD IVLen
			fail(r, errIVLen)
		case len(r.ICV) != 16: // AEAD ICVLen
			fail(r, errICVLen)
		default:
			s.processAEAD(r)
		}
	}
}

// Close waits for Submit calls in progress to deliver their completions,
// then wipes the primitives that can wipe themselves (cryptosoft's expanded
// keys), drops the cipher and HMAC states and zeroes the salt. The stdlib
// keeps its own expanded key schedules, which become garbage here and
// cannot be zeroed from outside. Close is idempotent.
func (s *session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.running.Wait()
	s.mu.Lock()
	clear(s.nonce[:])
	clear(s.sum[:])
	clear(s.scratch[:cap(s.scratch)])
	wipe(s.aead)
	wipe(s.block)
	s.aead, s.block, s.cbc, s.enc, s.dec, s.mac, s.scratch = nil, nil, nil, nil, nil, nil, nil
	s.mu.Unlock()
	return nil
}

// wiper is implemented by primitives that can zero their own expanded key
// schedules (cryptosoft's); the stdlib's cannot be reached.
type wiper interface{ Wipe() }

// wipe zeroes x's key material when x supports it.
func wipe(x any) {
	if w, ok := x.(wiper); ok {
		w.Wipe()
	}
}

func fail(r *crypto.Request, err error) {
	r.Status = crypto.StatusError
	r.Err = err
}

// adjacent reports whether icv starts right after data in one array,
// so that an AEAD can seal and open in place without a copy.
func adjacent(data, icv []byte) bool {
	if len(icv) == 0 || cap(data)-len(data) < len(icv) {
		return false
	}
	return unsafe.Pointer(unsafe.SliceData(data[len(data):len(data)+1])) == unsafe.Pointer(unsafe.SliceData(icv))
}

func (s *session) process(r *crypto.Request) {
	if len(r.IV) != s.ivLen {
		fail(r, errIVLen)
		return
	}
	if len(r.ICV) != s.icvLen {
		fail(r, errICVLen)
		return
	}
	if s.aead != nil {
		s.processAEAD(r)
		return
	}
	if s.alg.Cipher == crypto.CipherAESCBC && len(r.Data)%16 != 0 {
		fail(r, errBlockLen)
		return
	}
	if r.Dir == crypto.Encrypt {
		if s.alg.Cipher == crypto.CipherAESCBC {
			s.cbcEncrypt(r.Data, r.IV)
		}
		copy(r.ICV, s.authenticate(r))
	} else {
		if subtle.ConstantTimeCompare(s.authenticate(r), r.ICV) != 1 {
			r.Status = crypto.StatusAuthFailed
			r.Err = nil
			return
		}
		if s.alg.Cipher == crypto.CipherAESCBC {
			s.cbcDecrypt(r.Data, r.IV)
		}
	}
	r.Status = crypto.StatusOK
	r.Err = nil
}

// authenticate returns the truncated HMAC over AAD || IV || Data ||
// AuthTrailer; the slice aliases s.sum.
func (s *session) authenticate(r *crypto.Request) []byte {
	s.mac.Reset()
	s.mac.Write(r.AAD)
	s.mac.Write(r.IV)
	s.mac.Write(r.Data)
	s.mac.Write(r.AuthTrailer)
	return s.mac.Sum(s.sum[:0])[:s.icvLen]
}

func (s *session) cbcEncrypt(data, iv []byte) {
	switch {
	case s.cbc != nil:
		s.cbc.EncryptCBC(data, data, iv)
	case s.enc != nil:
		s.enc.(ivSetter).SetIV(iv)
		s.enc.CryptBlocks(data, data)
	default:
		prev := iv
		for i := 0; i < len(data); i += 16 {
			b := data[i : i+16]
			subtle.XORBytes(b, b, prev)
			s.block.Encrypt(b, b)
			prev = b
		}
	}
}

func (s *session) cbcDecrypt(data, iv []byte) {
	switch {
	case s.cbc != nil:
		s.cbc.DecryptCBC(data, data, iv)
	case s.dec != nil:
		s.dec.(ivSetter).SetIV(iv)
		s.dec.CryptBlocks(data, data)
	default:
		// Walk backwards so each block's predecessor is still ciphertext.
		for i := len(data) - 16; i >= 0; i -= 16 {
			b := data[i : i+16]
			s.block.Decrypt(b, b)
			if i == 0 {
				subtle.XORBytes(b, b, iv)
			} else {
				subtle.XORBytes(b, b, data[i-16:i])
			}
		}
	}
}

func (s *session) processAEAD(r *crypto.Request) {
	// process or processBatch checked len(r.IV) == 8: a fixed-size
	// move, not a memmove call.
	*(*[8]byte)(s.nonce[4:]) = [8]byte(r.IV)
	n := len(r.Data)
	if r.Dir == crypto.Encrypt {
		if adjacent(r.Data, r.ICV) {
			s.aead.Seal(r.Data[:0], s.nonce[:], r.Data, r.AAD)
		} else {
			out := s.aead.Seal(s.scratch[:0], s.nonce[:], r.Data, r.AAD)
			copy(r.Data, out[:n])
			copy(r.ICV, out[n:])
			s.scratch = out[:0]
		}
		r.Status = crypto.StatusOK
		r.Err = nil
		return
	}
	var err error
	if adjacent(r.Data, r.ICV) {
		_, err = s.aead.Open(r.Data[:0], s.nonce[:], r.Data[:n+len(r.ICV)], r.AAD)
	} else {
		buf := append(append(s.scratch[:0], r.Data...), r.ICV...)
		var pt []byte
		pt, err = s.aead.Open(buf[:0], s.nonce[:], buf, r.AAD)
		if err == nil {
			copy(r.Data, pt)
		}
		s.scratch = buf[:0]
	}
	if err != nil {
		r.Status = crypto.StatusAuthFailed
	} else {
		r.Status = crypto.StatusOK
	}
	r.Err = nil
}
