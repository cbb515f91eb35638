// Package providertest holds test helpers shared by the tests of the
// crypto provider packages (glxsb, virtio): a completion collector that
// checks exactly-once delivery, a Submit loop that rides out
// backpressure, a stdlib reference for ESP outputs, and an allocation
// probe for one request round trip. It is imported only by _test files.
package providertest

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/crypto"
)

// WaitLimit bounds every wait of these helpers; it is generous because
// the CI machine is shared.
const WaitLimit = 30 * time.Second

// CloseAtCleanup closes p (a provider or session) when t's test ends,
// giving it WaitLimit to drain.
func CloseAtCleanup(t testing.TB, p interface{ Close(context.Context) error }) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), WaitLimit)
		defer cancel()
		p.Close(ctx)
	})
}

// RandBytes returns n random bytes.
func RandBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (it crashes the program instead)
	return b
}

// Collector records the completions of a session, in completion order,
// and counts requests completed more than once. Its methods are safe for
// concurrent use. Done panics on a request completed with StatusPending:
// a provider bug that would otherwise surface far from its cause.
type Collector struct {
	mu    sync.Mutex
	seen  map[*crypto.Request]int
	order []*crypto.Request
	dup   int
}

// NewCollector returns an empty Collector.
func NewCollector() *Collector { return &Collector{seen: map[*crypto.Request]int{}} }

// Done is the crypto.CompletionFunc to pass to NewSession.
func (c *Collector) Done(reqs []*crypto.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reqs {
		if r.Status == crypto.StatusPending {
			panic("providertest: request completed with StatusPending")
		}
		c.seen[r]++
		if c.seen[r] > 1 {
			c.dup++
		}
		c.order = append(c.order, r)
	}
}

// Count returns how many completions (duplicates included) were seen.
func (c *Collector) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order)
}

// Dups returns how many completions were of a request already completed.
func (c *Collector) Dups() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dup
}

// Order returns a copy of the completed requests in completion order.
func (c *Collector) Order() []*crypto.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.order)
}

// Wait waits until at least n completions were seen, failing t after
// WaitLimit.
func (c *Collector) Wait(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for c.Count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests completed", c.Count(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// SubmitAll submits reqs to s, retrying the rest while s pushes back,
// failing t if they are not all accepted within WaitLimit.
func SubmitAll(t testing.TB, s crypto.Session, reqs []*crypto.Request) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for len(reqs) > 0 {
		n := s.Submit(reqs)
		reqs = reqs[n:]
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatal("backpressure never released")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// Hash returns the stdlib hash of an HMAC authenticator (nil for
// AuthNone), independently of the providers under test.
func Hash(a crypto.Auth) func() hash.Hash {
	switch a {
	case crypto.AuthHMACSHA1_96:
		return sha1.New
	case crypto.AuthHMACSHA256_128:
		return sha256.New
	case crypto.AuthHMACSHA384_192:
		return sha512.New384
	case crypto.AuthHMACSHA512_256:
		return sha512.New
	}
	return nil
}

// Reference computes the ESP encryption of pt with the standard library:
// the ciphertext and the ICV. For AEADs ckey ends with the 4-byte salt,
// the nonce is salt||iv and trailer is unused; otherwise the ICV is the
// truncated HMAC over aad||iv||ct||trailer (RFC 4303 with ESN high bits
// in trailer).
func Reference(alg crypto.Algorithm, ckey, akey, aad, iv, pt, trailer []byte) (ct, icv []byte) {
	switch alg.Cipher {
	case crypto.CipherAESGCM, crypto.CipherChaCha20Poly1305:
		k := ckey[:len(ckey)-4]
		var a cipher.AEAD
		if alg.Cipher == crypto.CipherAESGCM {
			b, _ := aes.NewCipher(k)
			a, _ = cipher.NewGCM(b)
		} else {
			a, _ = chacha20poly1305.New(k)
		}
		nonce := append(append([]byte(nil), ckey[len(ckey)-4:]...), iv...)
		out := a.Seal(nil, nonce, pt, aad)
		return out[:len(pt)], out[len(pt):]
	}
	ct = append([]byte(nil), pt...)
	if alg.Cipher == crypto.CipherAESCBC {
		b, _ := aes.NewCipher(ckey)
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, pt)
	}
	m := hmac.New(Hash(alg.Auth), akey)
	m.Write(aad)
	m.Write(iv)
	m.Write(ct)
	m.Write(trailer)
	return ct, m.Sum(nil)[:alg.ICVLen()]
}

// AllocsPerRoundTrip returns the average heap allocations of one round
// trip through s: Submit reqs (yielding while s pushes back), then wait on
// done, which s's CompletionFunc must signal once per completed batch
// (one batch per round trip). It warms up with 100 round trips first.
func AllocsPerRoundTrip(s crypto.Session, reqs []*crypto.Request, done <-chan struct{}, runs int) float64 {
	run := func() {
		for s.Submit(reqs) == 0 {
			runtime.Gosched()
		}
		<-done
	}
	for range 100 {
		run()
	}
	return testing.AllocsPerRun(runs, run)
}
