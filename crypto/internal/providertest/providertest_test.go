package providertest

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

// named is a provider under another name (two aesni in one framework).
type named struct {
	crypto.Provider
	name string
}

func (n named) Info() crypto.ProviderInfo {
	i := n.Provider.Info()
	i.Name = n.name
	return i
}

// TestReference checks the stdlib reference against published ESP
// vectors (testdata/reference_vectors.json, copied from
// /work/shared/vectors/esp): the AEAD nonce is salt||IV taken from the
// end of the key material.
func TestReference(t *testing.T) {
	raw, err := os.ReadFile("testdata/reference_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		CBC []struct{ Key, IV, Plaintext, Ciphertext string } `json:"rfc3602_aes_cbc_raw"`
		GCM []struct {
			Key, Salt, AAD, Plaintext, Ciphertext, Tag string
			ESPIV                                      string `json:"esp_iv"`
		} `json:"draft_mcgrew_gcm_test_01"`
		ChaCha []struct{ Keymat, IV, AAD, Plaintext, Ciphertext, Tag string } `json:"rfc7634_chacha20poly1305_esp"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	h := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatalf("bad hex %q: %v", s, err)
		}
		return b
	}
	type vec struct {
		name                       string
		alg                        crypto.Algorithm
		ckey, aad, iv, pt, ct, tag []byte
	}
	var vecs []vec
	for _, v := range f.CBC {
		vecs = append(vecs, vec{"rfc3602", crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}, h(v.Key), nil, h(v.IV), h(v.Plaintext), h(v.Ciphertext), nil})
	}
	for _, v := range f.GCM {
		vecs = append(vecs, vec{"gcm", crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, append(h(v.Key), h(v.Salt)...), h(v.AAD), h(v.ESPIV), h(v.Plaintext), h(v.Ciphertext), h(v.Tag)})
	}
	for _, v := range f.ChaCha {
		vecs = append(vecs, vec{"rfc7634", crypto.Algorithm{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256}, h(v.Keymat), h(v.AAD), h(v.IV), h(v.Plaintext), h(v.Ciphertext), h(v.Tag)})
	}
	if len(vecs) != 3 {
		t.Fatalf("%d vectors, want 3", len(vecs))
	}
	for _, v := range vecs {
		ct, icv := Reference(v.alg, v.ckey, make([]byte, 20), v.aad, v.iv, v.pt, nil)
		if !bytes.Equal(ct, v.ct) {
			t.Errorf("%s: ciphertext %x, want %x", v.name, ct, v.ct)
		}
		if v.tag != nil && !bytes.Equal(icv, v.tag) {
			t.Errorf("%s: ICV %x, want %x", v.name, icv, v.tag)
		}
		if len(icv) != v.alg.ICVLen() {
			t.Errorf("%s: ICV of %d bytes, want %d", v.name, len(icv), v.alg.ICVLen())
		}
	}
}

func TestCollector(t *testing.T) {
	c := NewCollector()
	a, b := &crypto.Request{Status: crypto.StatusOK}, &crypto.Request{Status: crypto.StatusError}
	c.Done([]*crypto.Request{a, b})
	c.Done([]*crypto.Request{a})
	c.Wait(t, 3)
	if got := c.Order(); c.Count() != 3 || c.Dups() != 1 || got[0] != a || got[1] != b || got[2] != a {
		t.Fatalf("count %d dups %d order %v", c.Count(), c.Dups(), got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a StatusPending completion did not panic")
		}
	}()
	c.Done([]*crypto.Request{{}})
}

// pushback is a session that accepts at most one request per Submit and
// refuses every other call, completing synchronously.
type pushback struct {
	mu     sync.Mutex
	calls  int
	accept []*crypto.Request
}

func (s *pushback) Submit(reqs []*crypto.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls%2 == 1 || len(reqs) == 0 {
		return 0
	}
	s.accept = append(s.accept, reqs[0])
	return 1
}

func (s *pushback) Close(ctx context.Context) error { return nil }

func TestSubmitAll(t *testing.T) {
	s := &pushback{}
	reqs := []*crypto.Request{{}, {}, {}}
	SubmitAll(t, s, reqs)
	if len(s.accept) != 3 || s.accept[0] != reqs[0] || s.accept[2] != reqs[2] || s.calls != 6 {
		t.Fatalf("accepted %d in %d calls", len(s.accept), s.calls)
	}
}

// TestRebindWatch: Wait returns at once for a binding already on the
// provider, wakes on the framework's rebind to another one, and gives up
// after its limit when no rebind comes.
func TestRebindWatch(t *testing.T) {
	w := NewRebindWatch()
	fw := crypto.New(crypto.Options{SkipSelfTests: true, CalibrationBudget: time.Millisecond, Hysteresis: 1e9, OnRebind: w.OnRebind,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer fw.Close(context.Background())
	alg := crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	if err := fw.Register(context.Background(), named{aesni.New(), "one"}); err != nil {
		t.Fatal(err)
	}
	b, err := fw.Bind(crypto.SessionParams{Alg: alg, CipherKey: RandBytes(20)}, func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	if err := fw.Register(context.Background(), named{aesni.New(), "two"}); err != nil {
		t.Fatal(err)
	}
	if !w.Wait(b, "one", WaitLimit) {
		t.Fatal("binding not on one")
	}
	if w.Wait(b, "two", 10*time.Millisecond) {
		t.Fatal("Wait for a provider the binding is not on returned true")
	}
	blocked := make(chan struct{})
	w.mu.Lock()
	w.blocked = blocked
	w.mu.Unlock()
	done := make(chan bool)
	go func() { done <- w.Wait(b, "two", WaitLimit) }()
	<-blocked // the rebind comes while Wait waits for it
	if err := fw.Deregister(context.Background(), "one"); err != nil {
		t.Fatal(err)
	}
	// Woken by the rebind, not by its own limit (which it would survive,
	// the binding being on two by then).
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("Wait did not see the rebind to two")
		}
	case <-time.After(WaitLimit / 2):
		t.Fatal("Wait was not woken by the rebind")
	}
}
