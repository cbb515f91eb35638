//go:build amd64

package vaes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/providertest"
)

var (
	algGCM128 = crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	algGCM256 = crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 256}
)

// TestAdmitted: the framework admits vaes after its known-answer
// self-tests (the GCM and ESP vectors of crypto/kat through vaes's own
// sessions, adjacent and separate ICV, and a forged ICV) and calibration.
func TestAdmitted(t *testing.T) {
	requireCPU(t)
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	info := p.Info()
	if info.Name != Name || info.Kind != crypto.KindAccelerated || info.Priority != Priority {
		t.Fatalf("info %+v", info)
	}
	caps := p.Capabilities()
	if len(caps) != 2 || caps[0].Alg != algGCM128 || caps[1].Alg != algGCM256 {
		t.Fatalf("capabilities %+v, want AES-GCM-128 and -256 only", caps)
	}
	fw := crypto.New(crypto.Options{CalibrationBudget: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer fw.Close(context.Background())
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	st := fw.Providers()[0]
	if st.State != crypto.StateOK || !st.SelfTest.Passed || st.SelfTest.Vectors < 10 {
		t.Fatalf("status %+v", st)
	}
}

// sessionOf returns a vaes session for alg with a random key, the key and
// a collector of its completions.
func sessionOf(t testing.TB, p crypto.Provider, alg crypto.Algorithm) (crypto.Session, []byte, *providertest.Collector) {
	t.Helper()
	key := providertest.RandBytes(alg.CipherKeyLen())
	col := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: alg, CipherKey: key}, col.Done)
	if err != nil {
		t.Fatal(err)
	}
	providertest.CloseAtCleanup(t, s)
	return s, key, col
}

// TestSessionsESP: ESP requests through vaes sessions (RFC 4106: key ||
// salt, nonce salt || IV) match the stdlib reference, ICV adjacent or
// apart, and decrypt back; a forged ICV ends in StatusAuthFailed and,
// since vaes verifies before decrypting, leaves the ciphertext as it was.
func TestSessionsESP(t *testing.T) {
	requireCPU(t)
	p, _ := New()
	for _, alg := range []crypto.Algorithm{algGCM128, algGCM256} {
		s, key, _ := sessionOf(t, p, alg)
		for _, size := range []int{0, 1, 64, 127, 512, 1420, 8192, 9000} {
			for _, aadLen := range []int{8, 12} {
				pt, aad, iv := providertest.RandBytes(size), providertest.RandBytes(aadLen), providertest.RandBytes(8)
				wantCT, wantICV := providertest.Reference(alg, key, nil, aad, iv, pt, nil)
				adj := append(bytes.Clone(pt), make([]byte, 16)...)
				r1 := &crypto.Request{Dir: crypto.Encrypt, Data: adj[:size], ICV: adj[size:], AAD: aad, IV: iv}
				r2 := &crypto.Request{Dir: crypto.Encrypt, Data: bytes.Clone(pt), ICV: make([]byte, 16), AAD: aad, IV: iv}
				s.Submit([]*crypto.Request{r1, r2})
				for _, r := range []*crypto.Request{r1, r2} {
					if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, wantCT) || !bytes.Equal(r.ICV, wantICV) {
						t.Fatalf("%v %d B aad %d: encrypt status %v, differs from the stdlib reference", alg, size, aadLen, r.Status)
					}
				}
				r2.ICV[size%16] ^= 0x80
				r1.Dir, r2.Dir = crypto.Decrypt, crypto.Decrypt
				s.Submit([]*crypto.Request{r1, r2})
				if r1.Status != crypto.StatusOK || !bytes.Equal(r1.Data, pt) {
					t.Fatalf("%v %d B: decrypt status %v", alg, size, r1.Status)
				}
				if r2.Status != crypto.StatusAuthFailed || !bytes.Equal(r2.Data, wantCT) {
					t.Fatalf("%v %d B: forged ICV: status %v, data changed %v", alg, size, r2.Status, !bytes.Equal(r2.Data, wantCT))
				}
			}
		}
	}
}

// TestConcurrentNoClobber: many goroutines seal and open at once, on
// their own sessions and on one AEAD shared by all, with random sizes and
// preemption left on (run it with -race and GODEBUG=asyncpreemptoff=0);
// every result is compared with the stdlib's. A register the assembly
// failed to preserve, or state shared between calls, shows as a
// mismatch.
func TestConcurrentNoClobber(t *testing.T) {
	requireCPU(t)
	p, _ := New()
	sharedKey := providertest.RandBytes(32)
	shared, ref := mustGCM(t, sharedKey), stdGCM(t, sharedKey)
	const workers, rounds = 16, 150
	seed := uint64(time.Now().UnixNano())
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		alg := []crypto.Algorithm{algGCM128, algGCM256}[w%2]
		s, key, _ := sessionOf(t, p, alg)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range rounds {
				size := rng.IntN(maxDiffLen + 1)
				if i%3 == 0 {
					size = 1420
				}
				pt, aad, iv := providertest.RandBytes(size), providertest.RandBytes(8+4*(i%2)), providertest.RandBytes(8)
				wantCT, wantICV := providertest.Reference(alg, key, nil, aad, iv, pt, nil)
				r := &crypto.Request{Dir: crypto.Encrypt, Data: bytes.Clone(pt), ICV: make([]byte, 16), AAD: aad, IV: iv}
				s.Submit([]*crypto.Request{r})
				if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, wantCT) || !bytes.Equal(r.ICV, wantICV) {
					errs <- fmt.Errorf("worker %d round %d (%d B, seed %d): session result differs from the stdlib", w, i, size, seed)
					return
				}
				r.Dir = crypto.Decrypt
				s.Submit([]*crypto.Request{r})
				if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, pt) {
					errs <- fmt.Errorf("worker %d round %d (%d B, seed %d): decrypt status %v", w, i, size, seed, r.Status)
					return
				}
				nonce := providertest.RandBytes(NonceSize)
				got := shared.Seal(nil, nonce, pt, aad)
				if want := ref.Seal(nil, nonce, pt, aad); !bytes.Equal(got, want) {
					errs <- fmt.Errorf("worker %d round %d (%d B, seed %d): shared AEAD differs from the stdlib", w, i, size, seed)
					return
				}
				if back, err := shared.Open(got[:0], nonce, got, aad); err != nil || !bytes.Equal(back, pt) {
					errs <- fmt.Errorf("worker %d round %d: shared Open: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestWipe: closing a session zeroes the expanded key and the powers of H
// (cpuprov calls Wipe); a wiped AEAD's state is all zero.
func TestWipe(t *testing.T) {
	requireCPU(t)
	g := mustGCM(t, providertest.RandBytes(16))
	if g.rk == [len(g.rk)]byte{} || g.pow == [len(g.pow)]byte{} {
		t.Fatal("key schedule or powers empty before Wipe")
	}
	g.Wipe()
	if g.rk != [len(g.rk)]byte{} || g.pow != [len(g.pow)]byte{} {
		t.Fatal("Wipe left key material")
	}
}
