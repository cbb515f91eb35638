package cryptosoft

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/modules"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

type espVectors struct {
	GCM []struct {
		Case                                       int
		Key, Salt, AAD, Plaintext, Ciphertext, Tag string
		ESPIV                                      string `json:"esp_iv"`
	} `json:"draft_mcgrew_gcm_test_01"`
	ChaCha []struct {
		Case, Keymat, IV, AAD, Plaintext, Ciphertext, Tag string
	} `json:"rfc7634_chacha20poly1305_esp"`
}

func loadESP(t *testing.T) *espVectors {
	b, err := os.ReadFile("testdata/esp_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v espVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("testdata/esp_vectors.json: %v", err)
	}
	if len(v.GCM) != 14 || len(v.ChaCha) == 0 || v.GCM[0].ESPIV == "" {
		t.Fatalf("testdata/esp_vectors.json: %d GCM, %d ChaCha vectors", len(v.GCM), len(v.ChaCha))
	}
	return &v
}

// run submits one request on a fresh session and returns it completed.
// The provider completes synchronously inside Submit (cpuprov).
func run(t *testing.T, p crypto.Provider, sp crypto.SessionParams, r *crypto.Request) {
	t.Helper()
	var got []*crypto.Request
	s, err := p.NewSession(sp, func(done []*crypto.Request) { got = append(got, done...) })
	if err != nil {
		t.Fatalf("NewSession(%v): %v", sp.Alg, err)
	}
	defer func() { s.Close(testwait.Context(t)) }()
	if n := s.Submit([]*crypto.Request{r}); n != 1 {
		t.Fatalf("Submit accepted %d", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if len(got) != 1 || got[0] != r {
		t.Fatalf("completions: %d", len(got))
	}
}

// packet lays out Data and ICV adjacently, as in an ESP packet.
func packet(data []byte, icvLen int) (d, icv []byte) {
	buf := make([]byte, len(data)+icvLen)
	copy(buf, data)
	return buf[:len(data)], buf[len(data):]
}

func TestInfoAndCapabilities(t *testing.T) {
	p := New()
	info := p.Info()
	if info.Name != Name || info.Kind != crypto.KindSoftware || info.Priority != Priority {
		t.Fatalf("Info = %+v", info)
	}
	var algs []crypto.Algorithm
	for _, c := range p.Capabilities() {
		if err := c.Alg.Validate(); err != nil {
			t.Errorf("claims invalid %v: %v", c.Alg, err)
		}
		algs = append(algs, c.Alg)
	}
	for _, want := range []crypto.Algorithm{
		{Cipher: crypto.CipherAESGCM, KeyBits: 128},
		{Cipher: crypto.CipherAESGCM, KeyBits: 256},
		{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256},
		{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96},
		{Cipher: crypto.CipherAESCBC, KeyBits: 192, Auth: crypto.AuthHMACSHA256_128},
		{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA512_256},
		{Cipher: crypto.CipherNull, Auth: crypto.AuthHMACSHA256_128},
	} {
		if !slices.Contains(algs, want) {
			t.Errorf("capability %v missing", want)
		}
	}
}

func TestConstructors(t *testing.T) {
	b, err := NewAES(make([]byte, 24))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(CBCBlock); !ok {
		t.Error("NewAES result does not implement CBCBlock")
	}
	if _, ok := b.(CBCMultiEncrypter); !ok {
		t.Error("NewAES result does not implement CBCMultiEncrypter")
	}
	g, err := NewGCM(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChaCha20Poly1305(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{b, g, c} {
		if _, ok := v.(Wiper); !ok {
			t.Errorf("%T does not implement Wiper", v)
		}
	}
	for _, n := range []int{0, 8, 20, 33} {
		if b, err := NewAES(make([]byte, n)); err == nil || b != nil {
			t.Errorf("NewAES(%d bytes) = %v, %v", n, b, err)
		}
		if g, err := NewGCM(make([]byte, n)); err == nil || g != nil {
			t.Errorf("NewGCM(%d bytes) = %v, %v", n, g, err)
		}
		if c, err := NewChaCha20Poly1305(make([]byte, n)); err == nil || c != nil {
			t.Errorf("NewChaCha20Poly1305(%d bytes) = %v, %v", n, c, err)
		}
	}
}

// TestESPVectors runs the ESP AEAD vectors through provider sessions:
// draft-mcgrew-gcm-test-01 (AES-GCM, RFC 4106 layout) and RFC 7634
// appendix A (ChaCha20-Poly1305), encrypt, decrypt and a forged ICV.
func TestESPVectors(t *testing.T) {
	v := loadESP(t)
	p := New()
	type tc struct {
		name                         string
		alg                          crypto.Algorithm
		keymat, iv, aad, pt, ct, tag []byte
	}
	var cases []tc
	for _, g := range v.GCM {
		key := unhex(t, g.Key)
		cases = append(cases, tc{
			name:   fmt.Sprintf("draft-mcgrew-gcm-test-01 #%d", g.Case),
			alg:    crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 8 * len(key)},
			keymat: append(key, unhex(t, g.Salt)...), iv: unhex(t, g.ESPIV), aad: unhex(t, g.AAD),
			pt: unhex(t, g.Plaintext), ct: unhex(t, g.Ciphertext), tag: unhex(t, g.Tag),
		})
	}
	for _, c := range v.ChaCha {
		cases = append(cases, tc{
			name: "RFC 7634 " + c.Case, alg: crypto.Algorithm{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256},
			keymat: unhex(t, c.Keymat), iv: unhex(t, c.IV), aad: unhex(t, c.AAD),
			pt: unhex(t, c.Plaintext), ct: unhex(t, c.Ciphertext), tag: unhex(t, c.Tag),
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.alg.Cipher == crypto.CipherAESGCM && c.alg.KeyBits == 192 {
				t.Skip("AES-GCM-192 is not an ESP algorithm of the framework")
			}
			sp := crypto.SessionParams{Alg: c.alg, CipherKey: c.keymat}
			data, icv := packet(c.pt, 16)
			r := &crypto.Request{Dir: crypto.Encrypt, Data: data, ICV: icv, AAD: c.aad, IV: c.iv}
			run(t, p, sp, r)
			if r.Status != crypto.StatusOK || !bytes.Equal(data, c.ct) || !bytes.Equal(icv, c.tag) {
				t.Fatalf("encrypt: status %v err %v\n data %x\n want %x\n icv %x want %x", r.Status, r.Err, data, c.ct, icv, c.tag)
			}
			r = &crypto.Request{Dir: crypto.Decrypt, Data: data, ICV: icv, AAD: c.aad, IV: c.iv}
			run(t, p, sp, r)
			if r.Status != crypto.StatusOK || !bytes.Equal(data, c.pt) {
				t.Fatalf("decrypt: status %v err %v", r.Status, r.Err)
			}
			data, icv = packet(c.ct, 16)
			copy(icv, c.tag)
			icv[15] ^= 0x40
			r = &crypto.Request{Dir: crypto.Decrypt, Data: data, ICV: icv, AAD: c.aad, IV: c.iv}
			run(t, p, sp, r)
			if r.Status != crypto.StatusAuthFailed {
				t.Fatalf("forged ICV: status %v, want auth-failed", r.Status)
			}
			if !bytes.Equal(data, c.ct) {
				t.Fatal("forged ICV: Data was modified")
			}
		})
	}
}

// TestDifferentialProviders processes identical random requests for every
// algorithm cryptosoft claims through cryptosoft and aesni (stdlib) and
// requires identical Data and ICV, and a successful round trip.
func TestDifferentialProviders(t *testing.T) {
	soft, ref := New(), aesni.New()
	rng := rand.New(rand.NewPCG(11, 12))
	rb := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, c := range soft.Capabilities() {
		alg := c.Alg
		t.Run(alg.String(), func(t *testing.T) {
			for it := 0; it < 8; it++ {
				sp := crypto.SessionParams{Alg: alg, CipherKey: rb(alg.CipherKeyLen()), AuthKey: rb(alg.Auth.KeyLen())}
				n := rng.IntN(1500)
				if alg.Cipher == crypto.CipherAESCBC {
					n &^= 15
				}
				pt := rb(n)
				aad, iv := rb(8+4*rng.IntN(2)), rb(alg.IVLen())
				var trailer []byte
				if !alg.IsAEAD() && rng.IntN(2) == 0 {
					trailer = rb(4)
				}
				var outs [2][]byte
				for i, p := range []crypto.Provider{soft, ref} {
					data, icv := packet(pt, alg.ICVLen())
					r := &crypto.Request{Dir: crypto.Encrypt, Data: data, ICV: icv, AAD: aad, IV: iv, AuthTrailer: trailer}
					run(t, p, sp, r)
					if r.Status != crypto.StatusOK {
						t.Fatalf("%s encrypt: %v %v", p.Info().Name, r.Status, r.Err)
					}
					outs[i] = append(bytes.Clone(data), icv...)
				}
				if !bytes.Equal(outs[0], outs[1]) {
					t.Fatalf("len %d: cryptosoft and aesni disagree", n)
				}
				data, icv := packet(outs[0][:n], alg.ICVLen())
				copy(icv, outs[0][n:])
				r := &crypto.Request{Dir: crypto.Decrypt, Data: data, ICV: icv, AAD: aad, IV: iv, AuthTrailer: trailer}
				run(t, soft, sp, r)
				if r.Status != crypto.StatusOK || !bytes.Equal(data, pt) {
					t.Fatalf("len %d: decrypt: %v %v", n, r.Status, r.Err)
				}
			}
		})
	}
}

func quietFramework(t *testing.T) *crypto.Framework {
	fw := crypto.New(crypto.Options{
		CalibrationBudget: 5 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fw.Close(ctx)
	})
	return fw
}

// TestAdmission registers cryptosoft with a real Framework: every
// known-answer self-test must pass and every algorithm be calibrated.
func TestAdmission(t *testing.T) {
	fw := quietFramework(t)
	ctx := context.Background()
	if err := fw.Register(ctx, New()); err != nil {
		t.Fatalf("Register: %v", err)
	}
	var st *crypto.ProviderStatus
	for _, s := range fw.Providers() {
		if s.Name == Name {
			st = &s
		}
	}
	if st == nil {
		t.Fatal("cryptosoft not listed")
	}
	if st.State != crypto.StateOK || !st.SelfTest.Passed || st.SelfTest.Vectors == 0 {
		t.Fatalf("status %+v", st.SelfTest)
	}
	if len(st.Throughput) == 0 {
		t.Fatal("no calibration")
	}
	for _, th := range st.Throughput {
		if th.BytesPerSec <= 0 {
			t.Errorf("%v at %d B: throughput %v", th.Alg, th.Size, th.BytesPerSec)
		}
	}
	if err := fw.Deregister(ctx, Name); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
}

// TestModule loads the registered cryptosoft module (and its crypto
// dependency) with a modules.Loader and checks the provider arrives in
// the framework and leaves on unload.
func TestModule(t *testing.T) {
	var m *modules.Module
	for _, x := range modules.Registered() {
		if x.Name == Name {
			m = &x
		}
	}
	if m == nil {
		t.Fatal("module cryptosoft not registered")
	}
	if m.Kind != modules.KindCryptoProvider || m.Version != ModuleVersion ||
		!slices.ContainsFunc(m.Depends, func(d modules.Dependency) bool { return d.Name == crypto.ModuleName }) {
		t.Fatalf("module descriptor %+v", *m)
	}
	fw := quietFramework(t)
	ctx := crypto.NewContext(context.Background(), fw)
	l := modules.NewLoader(modules.WithLogger(nil))
	if err := l.Load(ctx, Name); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !slices.ContainsFunc(fw.Providers(), func(s crypto.ProviderStatus) bool { return s.Name == Name && s.State == crypto.StateOK }) {
		t.Fatal("provider not admitted after module load")
	}
	if err := l.Unload(ctx, Name); err != nil {
		t.Fatalf("Unload: %v", err)
	}
	if slices.ContainsFunc(fw.Providers(), func(s crypto.ProviderStatus) bool { return s.Name == Name }) {
		t.Fatal("provider still listed after unload")
	}
	// Without a framework in the context the load fails cleanly.
	l2 := modules.NewLoader(modules.WithLogger(nil))
	if err := l2.Load(context.Background(), Name); err == nil || !errors.Is(err, modules.ErrLoadFailed) {
		t.Fatalf("Load without framework: %v", err)
	}
}
