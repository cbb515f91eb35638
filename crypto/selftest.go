package crypto

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The known-answer vectors run at every registration. kat/vectors.json
// holds published vectors (NIST SP 800-38A, RFC 2202, RFC 4231, the GCM
// specification, RFC 8439, and the ESP vectors of draft-mcgrew-gcm-test-01,
// RFC 3602 and RFC 7634); kat/composite.json holds encrypt-then-MAC ESP
// vectors assembled from those pieces. kat/gen_vectors.py documents and
// re-verifies both.
//
//go:embed kat/vectors.json kat/composite.json
var katFS embed.FS

// KATVector is one known-answer vector in the framework's request layout.
type KATVector struct {
	Name      string
	Alg       Algorithm
	CipherKey []byte // includes the salt for AEADs
	AuthKey   []byte
	IV        []byte
	AAD       []byte
	Trailer   []byte
	Plaintext []byte
	// Ciphertext equals Plaintext for CipherNull.
	Ciphertext []byte
	ICV        []byte
}

var (
	katOnce sync.Once
	katVecs map[Algorithm][]KATVector
	katErr  error
)

// KnownAnswerVectors returns the embedded self-test vectors for alg (nil
// if none). The result is shared: callers must not modify it.
func KnownAnswerVectors(alg Algorithm) []KATVector {
	katOnce.Do(loadKATs)
	return katVecs[alg]
}

type hexb []byte

func (h *hexb) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := hex.DecodeString(s)
	*h = v
	return err
}

func loadKATs() {
	katVecs = map[Algorithm][]KATVector{}
	var pub struct {
		HMAC []struct {
			Name, Hash     string
			Key, Data, MAC hexb
		}
		AEAD []struct {
			Name, Alg                              string
			Key, Nonce, AAD, Plaintext, Ciphertext hexb
			Tag                                    hexb
		}
	}
	raw, err := katFS.ReadFile("kat/vectors.json")
	if err == nil {
		err = json.Unmarshal(raw, &pub)
	}
	if err != nil {
		katErr = fmt.Errorf("kat/vectors.json: %w", err)
		return
	}
	for _, v := range pub.HMAC {
		auth, hf := authForHash(v.Hash)
		if hf == nil {
			katErr = fmt.Errorf("kat/vectors.json: %s: hash %q", v.Name, v.Hash)
			return
		}
		key, ok := espHMACKey(v.Key, hf, auth.KeyLen())
		if !ok || len(v.MAC) < auth.ICVLen() {
			continue // not expressible with an ESP-length key or ICV
		}
		a := Algorithm{Cipher: CipherNull, Auth: auth}
		katVecs[a] = append(katVecs[a], KATVector{
			Name: v.Name, Alg: a, AuthKey: key,
			Plaintext: v.Data, Ciphertext: v.Data, ICV: v.MAC[:auth.ICVLen()],
		})
	}
	for _, v := range pub.AEAD {
		var a Algorithm
		switch v.Alg {
		case "aes-gcm":
			a = Algorithm{Cipher: CipherAESGCM, KeyBits: len(v.Key) * 8}
		case "chacha20-poly1305":
			a = Algorithm{Cipher: CipherChaCha20Poly1305, KeyBits: 256}
		}
		if a.Validate() != nil || len(v.Nonce) != 12 {
			continue // e.g. AES-192-GCM, which ESP here does not use
		}
		katVecs[a] = append(katVecs[a], KATVector{
			Name: v.Name, Alg: a,
			CipherKey: slices.Concat(v.Key, v.Nonce[:4]), IV: v.Nonce[4:], AAD: v.AAD,
			Plaintext: v.Plaintext, Ciphertext: v.Ciphertext, ICV: v.Tag,
		})
	}
	var comp struct {
		Composite []struct {
			Name, Cipher, Auth                           string
			KeyBits                                      int  `json:"key_bits"`
			CipherKey                                    hexb `json:"cipher_key"`
			AuthKey                                      hexb `json:"auth_key"`
			IV, AAD, Trailer, Plaintext, Ciphertext, ICV hexb
		}
	}
	raw, err = katFS.ReadFile("kat/composite.json")
	if err == nil {
		err = json.Unmarshal(raw, &comp)
	}
	if err != nil {
		katErr = fmt.Errorf("kat/composite.json: %w", err)
		return
	}
	for _, v := range comp.Composite {
		a := Algorithm{KeyBits: v.KeyBits}
		switch v.Cipher {
		case "aes-cbc":
			a.Cipher = CipherAESCBC
		case "null":
			a.Cipher = CipherNull
		}
		for x := AuthHMACSHA1_96; x <= AuthHMACSHA512_256; x++ {
			if x.String() == v.Auth {
				a.Auth = x
			}
		}
		if err := a.Validate(); err != nil {
			katErr = fmt.Errorf("kat/composite.json: %s: %w", v.Name, err)
			return
		}
		katVecs[a] = append(katVecs[a], KATVector{
			Name: v.Name, Alg: a, CipherKey: v.CipherKey, AuthKey: v.AuthKey,
			IV: v.IV, AAD: v.AAD, Trailer: v.Trailer,
			Plaintext: v.Plaintext, Ciphertext: v.Ciphertext, ICV: v.ICV,
		})
	}
}

func authForHash(name string) (Auth, func() hash.Hash) {
	switch name {
	case "sha1":
		return AuthHMACSHA1_96, sha1.New
	case "sha256":
		return AuthHMACSHA256_128, sha256.New
	case "sha384":
		return AuthHMACSHA384_192, sha512.New384
	case "sha512":
		return AuthHMACSHA512_256, sha512.New
	}
	return AuthNone, nil
}

// espHMACKey rewrites an RFC test key as an equivalent key of ESP length
// (RFC 2104 section 2: a key longer than the hash block is replaced by its
// hash, and every key is zero-padded to the block size, so zero-padding to
// the ESP length gives the same HMAC). ok is false if the key cannot be
// expressed at that length.
func espHMACKey(key []byte, hf func() hash.Hash, espLen int) ([]byte, bool) {
	h := hf()
	if len(key) > h.BlockSize() {
		h.Write(key)
		key = h.Sum(nil)
	}
	if len(key) > espLen {
		return nil, false
	}
	out := make([]byte, espLen)
	copy(out, key)
	return out, true
}

// batchWaiter collects completions of a session used synchronously by the
// self-tests and the calibration.
type batchWaiter struct {
	got atomic.Int64
	ch  chan struct{}
}

func newBatchWaiter() *batchWaiter { return &batchWaiter{ch: make(chan struct{}, 1)} }

func (w *batchWaiter) done(rs []*Request) {
	w.got.Add(int64(len(rs)))
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// run submits reqs (retrying on backpressure) and waits until all have
// completed, at most timeout in total.
func (w *batchWaiter) run(ctx context.Context, s Session, reqs []*Request, timeout time.Duration) error {
	target := w.got.Load() + int64(len(reqs))
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for off := 0; off < len(reqs); {
		n := s.Submit(reqs[off:])
		off += n
		if n > 0 {
			continue
		}
		select {
		case <-w.ch:
		case <-time.After(50 * time.Microsecond):
		case <-deadline.C:
			return fmt.Errorf("%d of %d requests not accepted within %v: %w", len(reqs)-off, len(reqs), timeout, ErrTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for w.got.Load() < target {
		select {
		case <-w.ch:
		case <-deadline.C:
			return fmt.Errorf("%d of %d requests not completed within %v: %w", target-w.got.Load(), len(reqs), timeout, ErrTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// selfTest runs every vector of every claimed algorithm through p's own
// sessions: encrypt (ICV adjacent to Data), decrypt (ICV in a separate
// buffer) and a forged ICV that must be rejected.
func (f *Framework) selfTest(ctx context.Context, p Provider, caps []Capability) SelfTestResult {
	katOnce.Do(loadKATs)
	res := SelfTestResult{}
	if katErr != nil {
		res.FailedVector = "embedded vectors"
		res.Error = katErr.Error()
		return res
	}
	timeout := f.selfTestTimeout()
	for _, c := range caps {
		ran := 0
		for _, v := range katVecs[c.Alg] {
			if c.MaxData > 0 && len(v.Plaintext) > c.MaxData {
				continue
			}
			step, err := runKAT(ctx, p, v, timeout)
			if err != nil {
				res.FailedVector = fmt.Sprintf("%v: %s (%s)", c.Alg, v.Name, step)
				res.Error = fmt.Sprintf("self-test %s: %v", res.FailedVector, err)
				return res
			}
			ran++
			res.Vectors++
		}
		if ran == 0 {
			res.FailedVector = c.Alg.String()
			res.Error = fmt.Sprintf("self-test %v: no known-answer vector for this algorithm and MaxData %d", c.Alg, c.MaxData)
			return res
		}
	}
	res.Passed = true
	return res
}

// selfTestTimeout bounds one self-test or calibration batch: generous,
// since admission is not latency-critical and emulated devices are slow.
func (f *Framework) selfTestTimeout() time.Duration {
	return max(5*f.opts.RequestTimeout, 2*time.Second)
}

var errKATMismatch = errors.New("output differs from the known answer")

func runKAT(ctx context.Context, p Provider, v KATVector, timeout time.Duration) (string, error) {
	w := newBatchWaiter()
	s, err := p.NewSession(SessionParams{Alg: v.Alg, CipherKey: v.CipherKey, AuthKey: v.AuthKey}, w.done)
	if err != nil {
		return "new session", err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		s.Close(cctx)
		cancel()
	}()
	n, icvLen := len(v.Plaintext), len(v.ICV)
	encBuf := slices.Concat(v.Plaintext, make([]byte, icvLen))
	enc := &Request{Dir: Encrypt, Data: encBuf[: n : n+icvLen], ICV: encBuf[n:], AAD: v.AAD, IV: v.IV, AuthTrailer: v.Trailer}
	dec := &Request{Dir: Decrypt, Data: slices.Clone(v.Ciphertext), ICV: slices.Clone(v.ICV), AAD: v.AAD, IV: v.IV, AuthTrailer: v.Trailer}
	forged := slices.Clone(v.ICV)
	forged[len(forged)-1] ^= 0x01
	bad := &Request{Dir: Decrypt, Data: slices.Clone(v.Ciphertext), ICV: forged, AAD: v.AAD, IV: v.IV, AuthTrailer: v.Trailer}
	if err := w.run(ctx, s, []*Request{enc, dec, bad}, timeout); err != nil {
		return "submit", err
	}
	if enc.Status != StatusOK {
		return "encrypt", fmt.Errorf("status %v: %v", enc.Status, enc.Err)
	}
	if !bytes.Equal(enc.Data, v.Ciphertext) || !bytes.Equal(enc.ICV, v.ICV) {
		return "encrypt", errKATMismatch
	}
	if dec.Status != StatusOK {
		return "decrypt", fmt.Errorf("status %v: %v", dec.Status, dec.Err)
	}
	if !bytes.Equal(dec.Data, v.Plaintext) {
		return "decrypt", errKATMismatch
	}
	if bad.Status != StatusAuthFailed {
		return "forged ICV", fmt.Errorf("status %v, want %v", bad.Status, StatusAuthFailed)
	}
	return "", nil
}
