package crypto_test

import (
	"bytes"
	"context"
	"crypto/cipher"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
	"github.com/keelinit/keel/internal/testwait"
)

func allAlgs() []crypto.Algorithm {
	var out []crypto.Algorithm
	for _, c := range aesni.New().Capabilities() {
		out = append(out, c.Alg)
	}
	return out
}

func TestRegisterAesni(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	ps := fw.Providers()
	if len(ps) != 1 {
		t.Fatalf("Providers() = %d entries, want 1", len(ps))
	}
	p := ps[0]
	if p.Name != "aesni" || p.State != crypto.StateOK || p.Kind != crypto.KindAccelerated {
		t.Fatalf("status %+v", p)
	}
	if !p.SelfTest.Passed || p.SelfTest.Skipped || p.SelfTest.FailedVector != "" {
		t.Fatalf("self-test %+v", p.SelfTest)
	}
	// Every claimed algorithm ran at least one vector.
	if p.SelfTest.Vectors < len(p.Capabilities) {
		t.Fatalf("%d vectors for %d algorithms", p.SelfTest.Vectors, len(p.Capabilities))
	}
	if want := len(p.Capabilities) * len(crypto.CalibrationSizes); len(p.Throughput) != want {
		t.Fatalf("%d throughput points, want %d", len(p.Throughput), want)
	}
	for _, tp := range p.Throughput {
		if !(tp.BytesPerSec > 0) {
			t.Errorf("%v at %d B: throughput %v", tp.Alg, tp.Size, tp.BytesPerSec)
		}
	}
	if err := fw.Register(context.Background(), aesni.New()); err == nil {
		t.Fatal("registering the same name twice succeeded")
	}
}

func TestEveryAlgorithmHasVectors(t *testing.T) {
	for _, a := range allAlgs() {
		if n := len(crypto.KnownAnswerVectors(a)); n == 0 {
			t.Errorf("%v: no known-answer vectors", a)
		}
	}
	// Spot-check that the published families are present.
	names := map[string]bool{}
	for _, a := range allAlgs() {
		for _, v := range crypto.KnownAnswerVectors(a) {
			names[strings.SplitN(v.Name, " ", 3)[0]+" "+strings.SplitN(v.Name, " ", 3)[1]] = true
		}
	}
	for _, want := range []string{"RFC 2202", "RFC 4231", "GCM spec", "RFC 8439", "RFC 7634", "SP 800-38A", "RFC 3602", "draft-mcgrew-gcm-test-01 case"} {
		if !names[want] {
			t.Errorf("no vector from %q (have %v)", want, names)
		}
	}
}

// TestKATVectorsAgainstStdlib checks every embedded vector with an
// implementation independent of the provider path (stdlib, computed here).
func TestKATVectorsAgainstStdlib(t *testing.T) {
	for _, a := range allAlgs() {
		for _, v := range crypto.KnownAnswerVectors(a) {
			p := crypto.SessionParams{Alg: a, CipherKey: v.CipherKey, AuthKey: v.AuthKey}
			if err := p.CheckParams(); err != nil {
				t.Errorf("%s: %v", v.Name, err)
				continue
			}
			ct, icv := reference(t, p, v.IV, v.AAD, v.Trailer, v.Plaintext)
			if !bytes.Equal(ct, v.Ciphertext) || !bytes.Equal(icv, v.ICV) {
				t.Errorf("%v %s: stdlib disagrees with the vector", a, v.Name)
			}
		}
	}
}

// brokenAEAD wraps an AEAD and corrupts it in one way.
type brokenAEAD struct {
	cipher.AEAD
	mode string
}

func (b brokenAEAD) Seal(dst, nonce, pt, aad []byte) []byte {
	switch b.mode {
	case "ignore-aad":
		aad = nil
	case "flip":
		out := b.AEAD.Seal(dst, nonce, pt, aad)
		out[len(out)-1] ^= 1
		return out
	}
	return b.AEAD.Seal(dst, nonce, pt, aad)
}

func (b brokenAEAD) Open(dst, nonce, ct, aad []byte) ([]byte, error) {
	if b.mode == "accept-forgery" {
		// Decrypt with the keystream and never check the tag.
		n := len(ct) - 16
		ks := b.AEAD.Seal(nil, nonce, make([]byte, n), aad)
		pt := slices.Clone(ct[:n])
		for i := range n {
			pt[i] ^= ks[i]
		}
		return append(dst, pt...), nil
	}
	if b.mode == "ignore-aad" {
		aad = nil
	}
	return b.AEAD.Open(dst, nonce, ct, aad)
}

type brokenBlock struct{ cipher.Block }

func (b brokenBlock) Encrypt(dst, src []byte) {
	b.Block.Encrypt(dst, src)
	dst[0] ^= 0x80
}

func TestQuarantine(t *testing.T) {
	gcm := func(mode string) func([]byte) (cipher.AEAD, error) {
		return func(key []byte) (cipher.AEAD, error) {
			a, err := stdPrims.NewGCM(key)
			return brokenAEAD{a, mode}, err
		}
	}
	tests := []struct {
		name   string
		prims  cpuprov.Primitives
		vector string // substring of the failing vector
	}{
		{"gcm tag flipped", cpuprov.Primitives{NewAES: stdPrims.NewAES, NewGCM: gcm("flip")}, "aes-gcm-16-128: GCM spec test case 2 (encrypt)"},
		{"gcm ignores AAD", cpuprov.Primitives{NewAES: stdPrims.NewAES, NewGCM: gcm("ignore-aad")}, "aes-gcm-16-128: GCM spec test case 4 (encrypt)"},
		{"gcm accepts forgeries", cpuprov.Primitives{NewAES: stdPrims.NewAES, NewGCM: gcm("accept-forgery")}, "(forged ICV)"},
		{"cbc wrong block", cpuprov.Primitives{NewAES: func(k []byte) (cipher.Block, error) {
			b, err := stdPrims.NewAES(k)
			return brokenBlock{b}, err
		}}, "aes-cbc-128+hmac-sha1-96: SP 800-38A F.2.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fw := newFW(t, crypto.Options{})
			p := cpuprov.New(crypto.ProviderInfo{Name: "broken"}, tc.prims)
			err := fw.Register(context.Background(), p)
			if !errors.Is(err, crypto.ErrQuarantined) {
				t.Fatalf("Register = %v, want ErrQuarantined", err)
			}
			ps := fw.Providers()
			if len(ps) != 1 || ps[0].State != crypto.StateQuarantined || ps[0].SelfTest.Passed {
				t.Fatalf("status %+v", ps)
			}
			if !strings.Contains(ps[0].SelfTest.FailedVector, tc.vector) {
				t.Fatalf("failing vector %q, want it to contain %q", ps[0].SelfTest.FailedVector, tc.vector)
			}
			if !strings.Contains(err.Error(), ps[0].SelfTest.FailedVector) {
				t.Fatalf("error %q does not name the vector", err)
			}
			// Never bound, even as the only provider.
			alg := crypto.Algorithm{Cipher: crypto.CipherNull, Auth: crypto.AuthHMACSHA1_96}
			if _, err := fw.Bind(testKeys(alg, 1), func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrNoProvider) {
				t.Fatalf("Bind on a quarantined provider: %v, want ErrNoProvider", err)
			}
		})
	}
}

// TestBindAllAlgorithms encrypts and decrypts through a binding for every
// algorithm and compares with the stdlib, with ICV adjacent and separate.
func TestBindAllAlgorithms(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	for _, alg := range allAlgs() {
		t.Run(alg.String(), func(t *testing.T) {
			keys := testKeys(alg, 3)
			c := newCollector()
			b, err := fw.Bind(keys, c.done)
			if err != nil {
				t.Fatal(err)
			}
			defer closeBinding(t, b)
			if b.Provider() != "aesni" {
				t.Fatalf("bound to %q", b.Provider())
			}
			var reqs []*crypto.Request
			var pks []*packet
			for i, size := range []int{16, 64, 512, 1420, 4096} {
				pk := makePacket(t, keys, size, uint64(i+1), true)
				pk.req.AuthTrailer = nil
				pks = append(pks, pk)
				reqs = append(reqs, &pk.req)
			}
			submitAll(t, b, reqs)
			c.waitFor(t, len(reqs), 5*time.Second)
			checkPackets(t, c.got)
			// Decrypt with a separate ICV buffer; then a forged one.
			var dec []*crypto.Request
			for _, pk := range pks {
				r := &crypto.Request{Dir: crypto.Decrypt, Data: slices.Clone(pk.req.Data), ICV: slices.Clone(pk.req.ICV), AAD: pk.req.AAD, IV: pk.req.IV, User: pk}
				dec = append(dec, r)
			}
			forged := &crypto.Request{Dir: crypto.Decrypt, Data: slices.Clone(pks[0].req.Data), ICV: slices.Clone(pks[0].req.ICV), AAD: pks[0].req.AAD, IV: pks[0].req.IV}
			forged.ICV[0] ^= 1
			dec = append(dec, forged)
			submitAll(t, b, dec)
			c.waitFor(t, len(reqs)+len(dec), 5*time.Second)
			for i, r := range c.got[len(reqs):] {
				if r == forged {
					if r.Status != crypto.StatusAuthFailed {
						t.Errorf("forged ICV: status %v", r.Status)
					}
					continue
				}
				if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, pks[i].plain) {
					t.Errorf("decrypt %d: status %v, plaintext match %v", i, r.Status, bytes.Equal(r.Data, pks[i].plain))
				}
			}
			st := b.Status()
			if st.Submitted != uint64(len(reqs)+len(dec)) || st.Completed != st.Submitted || st.InFlight != 0 || st.Provider != "aesni" {
				t.Errorf("status %+v", st)
			}
		})
	}
}

func TestInvalidRequestIsNotAFault(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	keys := testKeys(algCBCSHA1, 1)
	c := newCollector()
	b, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b)
	bad := []*crypto.Request{
		{Dir: crypto.Encrypt, Data: make([]byte, 15), ICV: make([]byte, 12), IV: make([]byte, 16)}, // not a block multiple
		{Dir: crypto.Encrypt, Data: make([]byte, 16), ICV: make([]byte, 12), IV: make([]byte, 8)},  // IV
		{Dir: crypto.Encrypt, Data: make([]byte, 16), ICV: make([]byte, 16), IV: make([]byte, 16)}, // ICV
	}
	submitAll(t, b, bad)
	c.waitFor(t, len(bad), 5*time.Second)
	for i, r := range c.got {
		if r.Status != crypto.StatusError || !errors.Is(r.Err, crypto.ErrInvalidRequest) {
			t.Errorf("request %d: %v %v", i, r.Status, r.Err)
		}
	}
	if st := fw.Providers()[0].State; st != crypto.StateOK {
		t.Fatalf("provider state %v after invalid requests", st)
	}
	if st := b.Status(); st.Retried != 0 || st.Failed != 3 {
		t.Fatalf("status %+v", st)
	}
}

func TestBindErrors(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	if _, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrNoProvider) {
		t.Fatalf("no provider: %v", err)
	}
	mustRegister(t, fw, aesni.New())
	keys := testKeys(algGCM128, 1)
	keys.CipherKey = keys.CipherKey[:16] // salt missing
	_, err := fw.Bind(keys, func([]*crypto.Request) {})
	if !errors.Is(err, crypto.ErrKeySize) {
		t.Fatalf("short key: %v", err)
	}
	if strings.Contains(err.Error(), string(keys.CipherKey)) {
		t.Fatal("error contains the key")
	}
	if _, err := fw.Bind(crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 512}, CipherKey: make([]byte, 68)}, func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrUnsupported) {
		t.Fatalf("gcm-512: %v", err)
	}
	// AES-192-GCM (RFC 4106) is valid and aesni claims it.
	b192, err := fw.Bind(crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 192}, CipherKey: make([]byte, 28)}, func([]*crypto.Request) {})
	if err != nil {
		t.Fatalf("gcm-192: %v", err)
	}
	closeBinding(t, b192)
	if _, err := fw.Bind(testKeys(algGCM128, 1), nil); err == nil {
		t.Fatal("nil CompletionFunc accepted")
	}
}

func TestBindingCloseDrainsAndRejects(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	slow := newFake("slow", 1)
	slow.delay.Store(int64(200 * time.Microsecond))
	mustRegister(t, fw, slow)
	slow.delay.Store(int64(200 * time.Microsecond))
	keys := testKeys(algGCM128, 9)
	c := newCollector()
	b, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*crypto.Request
	for i := range 50 {
		reqs = append(reqs, &makePacket(t, keys, 256, uint64(i), true).req)
	}
	submitAll(t, b, reqs)
	if err := b.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if c.count() != len(reqs) {
		t.Fatalf("Close returned with %d of %d delivered", c.count(), len(reqs))
	}
	checkPackets(t, c.got)
	if n := b.Submit(reqs[:1]); n != 0 {
		t.Fatalf("Submit after Close accepted %d", n)
	}
	if err := b.Close(testwait.Context(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if slow.sessions.Load() != 0 {
		t.Fatalf("%d sessions still open", slow.sessions.Load())
	}
	if len(fw.Bindings()) != 0 {
		t.Fatalf("closed binding still listed")
	}
}

func TestBackpressure(t *testing.T) {
	fw := newFW(t, crypto.Options{QueueDepth: 64, RequestTimeout: 100 * time.Millisecond})
	hang := newFake("hang", 1)
	hang.queueCap = 16
	mustRegister(t, fw, hang)
	hang.hangAfter.Store(hang.processed.Load()) // everything from now hangs
	keys := testKeys(algGCM128, 1)
	c := newCollector()
	b, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*crypto.Request
	for i := range 200 {
		reqs = append(reqs, &makePacket(t, keys, 64, uint64(i), false).req)
	}
	total := 0
	for range 10 {
		total += b.Submit(reqs[total:])
	}
	// The fake's queue (16) plus the one request per worker parked as hung
	// bound what the provider accepts; the binding never blocks.
	if total == 0 || total > 64 {
		t.Fatalf("accepted %d, want between 1 and the queue depth 64", total)
	}
	hang.hangAfter.Store(-1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c.count() != total || c.dups != 0 {
		t.Fatalf("delivered %d (dups %d) of %d", c.count(), c.dups, total)
	}
}

func TestUnboundThenBound(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	fake := newFake("fake", 1)
	mustRegister(t, fw, fake)
	keys := testKeys(algGCM128, 2)
	c := newCollector()
	b, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b)
	if err := fw.Deregister(context.Background(), "fake"); err != nil {
		t.Fatal(err)
	}
	if b.Provider() != "" {
		t.Fatalf("still bound to %q", b.Provider())
	}
	pk := makePacket(t, keys, 64, 1, true)
	submitAll(t, b, []*crypto.Request{&pk.req})
	c.waitFor(t, 1, time.Second)
	if c.got[0].Status != crypto.StatusError || !errors.Is(c.got[0].Err, crypto.ErrNoProvider) {
		t.Fatalf("unbound: %v %v", c.got[0].Status, c.got[0].Err)
	}
	mustRegister(t, fw, aesni.New())
	if b.Provider() != "aesni" {
		t.Fatalf("not rebound after a provider arrived: %q", b.Provider())
	}
	pk = makePacket(t, keys, 64, 2, true)
	submitAll(t, b, []*crypto.Request{&pk.req})
	c.waitFor(t, 2, time.Second)
	checkPackets(t, c.got[1:])
}
