package crypto_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"hash"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/internal/testwait"
)

var (
	algGCM128  = crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	algGCM256  = crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 256}
	algChaCha  = crypto.Algorithm{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256}
	algCBCSHA1 = crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newFW returns a framework with a short calibration, closed at cleanup.
func newFW(t testing.TB, opts crypto.Options) *crypto.Framework {
	t.Helper()
	if opts.CalibrationBudget == 0 {
		opts.CalibrationBudget = 2 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.RequestTimeout == 0 {
		// Generous: the CI machine is shared and heavily loaded, and a
		// false timeout degrades a provider. Timeout tests set their own.
		opts.RequestTimeout = 2 * time.Second
	}
	fw := crypto.New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fw.Close(ctx); err != nil {
			t.Errorf("framework close: %v", err)
		}
	})
	return fw
}

func mustRegister(t testing.TB, fw *crypto.Framework, p crypto.Provider) {
	t.Helper()
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatalf("register %s: %v", p.Info().Name, err)
	}
}

// testKeys returns deterministic keys for alg, distinct per seed.
func testKeys(alg crypto.Algorithm, seed byte) crypto.SessionParams {
	p := crypto.SessionParams{Alg: alg, CipherKey: make([]byte, alg.CipherKeyLen()), AuthKey: make([]byte, alg.Auth.KeyLen())}
	for i := range p.CipherKey {
		p.CipherKey[i] = seed + byte(i)*7
	}
	for i := range p.AuthKey {
		p.AuthKey[i] = seed ^ byte(i)*13
	}
	return p
}

// reference computes the expected ciphertext||ICV of an encrypt request
// with the stdlib, independently of cpuprov.
func reference(t testing.TB, p crypto.SessionParams, iv, aad, trailer, plain []byte) (ct, icv []byte) {
	t.Helper()
	alg := p.Alg
	switch alg.Cipher {
	case crypto.CipherAESGCM, crypto.CipherChaCha20Poly1305:
		key := p.CipherKey[:len(p.CipherKey)-4]
		nonce := append(slices.Clone(p.CipherKey[len(key):]), iv...)
		var a cipher.AEAD
		if alg.Cipher == crypto.CipherAESGCM {
			b, _ := aes.NewCipher(key)
			a, _ = cipher.NewGCM(b)
		} else {
			a, _ = chacha20poly1305.New(key)
		}
		out := a.Seal(nil, nonce, plain, aad)
		return out[:len(plain)], out[len(plain):]
	}
	ct = slices.Clone(plain)
	if alg.Cipher == crypto.CipherAESCBC {
		b, _ := aes.NewCipher(p.CipherKey)
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, ct)
	}
	var hf func() hash.Hash
	switch alg.Auth {
	case crypto.AuthHMACSHA1_96:
		hf = sha1.New
	case crypto.AuthHMACSHA256_128:
		hf = sha256.New
	case crypto.AuthHMACSHA384_192:
		hf = sha512.New384
	default:
		hf = sha512.New
	}
	m := hmac.New(hf, p.AuthKey)
	m.Write(aad)
	m.Write(iv)
	m.Write(ct)
	m.Write(trailer)
	return ct, m.Sum(nil)[:alg.ICVLen()]
}

// packet is a test request with its own buffer (Data directly followed by
// ICV) and its expected result.
type packet struct {
	req     crypto.Request
	buf     []byte
	plain   []byte
	wantCT  []byte
	wantICV []byte
	sub     int // submitter
	idx     int // index within the submitter's sequence
}

func makePacket(t testing.TB, p crypto.SessionParams, size int, seq uint64, withRef bool) *packet {
	alg := p.Alg
	size -= size % alg.BlockSize()
	pk := &packet{buf: make([]byte, size+alg.ICVLen())}
	for i := range size {
		pk.buf[i] = byte(seq) + byte(i)
	}
	pk.plain = slices.Clone(pk.buf[:size])
	iv := make([]byte, alg.IVLen())
	if len(iv) >= 8 {
		binary.BigEndian.PutUint64(iv, seq)
	}
	aad := binary.BigEndian.AppendUint64(nil, seq)
	pk.req = crypto.Request{Dir: crypto.Encrypt, Data: pk.buf[: size : size+alg.ICVLen()], ICV: pk.buf[size:], AAD: aad, IV: iv}
	pk.req.User = pk
	if withRef {
		pk.wantCT, pk.wantICV = reference(t, p, iv, aad, nil, pk.plain)
	}
	return pk
}

// collector records deliveries of one binding and checks the guarantees.
type collector struct {
	mu         sync.Mutex
	got        []*crypto.Request
	seen       map[*crypto.Request]int
	dups       int
	concurrent int
	inCall     bool
	notify     chan struct{}
}

func newCollector() *collector {
	return &collector{seen: map[*crypto.Request]int{}, notify: make(chan struct{}, 1)}
}

func (c *collector) done(rs []*crypto.Request) {
	c.mu.Lock()
	if c.inCall {
		c.concurrent++
	}
	c.inCall = true
	for _, r := range rs {
		if c.seen[r] > 0 {
			c.dups++
		}
		c.seen[r]++
		c.got = append(c.got, r)
	}
	c.inCall = false
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) waitFor(t testing.TB, n int, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for c.count() < n {
		select {
		case <-c.notify:
		case <-time.After(time.Millisecond):
		case <-deadline.C:
			t.Fatalf("delivered %d of %d requests within %v", c.count(), n, d)
		}
	}
}

// closeBinding closes b, failing tb if Close is still waiting for
// deliveries after testwait.Timeout (a lost completion).
func closeBinding(tb testing.TB, b *crypto.Binding) {
	tb.Helper()
	if err := b.Close(testwait.Context(tb)); errors.Is(err, context.DeadlineExceeded) {
		tb.Errorf("binding %d: %v", b.ID(), err)
	}
}

// submitAll submits reqs, retrying on backpressure, and returns when all
// were accepted.
func submitAll(t testing.TB, b *crypto.Binding, reqs []*crypto.Request) {
	t.Helper()
	deadline := time.Now().Add(testwait.Timeout)
	for len(reqs) > 0 {
		n := b.Submit(reqs)
		reqs = reqs[n:]
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("backpressure did not clear")
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// checkPackets verifies status and content of delivered encrypt packets.
func checkPackets(t testing.TB, rs []*crypto.Request) {
	t.Helper()
	bad := 0
	for _, r := range rs {
		pk := r.User.(*packet)
		if r.Status != crypto.StatusOK {
			if bad++; bad < 5 {
				t.Errorf("packet %d/%d: status %v: %v", pk.sub, pk.idx, r.Status, r.Err)
			}
			continue
		}
		if pk.wantCT != nil && (!bytes.Equal(r.Data, pk.wantCT) || !bytes.Equal(r.ICV, pk.wantICV)) {
			if bad++; bad < 5 {
				t.Errorf("packet %d/%d: wrong ciphertext or ICV", pk.sub, pk.idx)
			}
		}
	}
}
