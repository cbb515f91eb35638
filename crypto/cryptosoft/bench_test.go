package cryptosoft

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

var benchAlgs = []crypto.Algorithm{
	{Cipher: crypto.CipherAESGCM, KeyBits: 128},
	{Cipher: crypto.CipherAESGCM, KeyBits: 256},
	{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96},
	{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA256_128},
	{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256},
}

// newBenchSession returns a session of p for alg and a request laid out as
// an ESP packet (ICV right after Data).
func newBenchSession(tb testing.TB, p crypto.Provider, alg crypto.Algorithm, n int) (crypto.Session, []*crypto.Request) {
	sp := crypto.SessionParams{Alg: alg, CipherKey: make([]byte, alg.CipherKeyLen()), AuthKey: make([]byte, alg.Auth.KeyLen())}
	s, err := p.NewSession(sp, func([]*crypto.Request) {})
	if err != nil {
		tb.Fatal(err)
	}
	if alg.Cipher == crypto.CipherAESCBC {
		n &^= 15
	}
	buf := make([]byte, n+alg.ICVLen())
	r := &crypto.Request{Dir: crypto.Encrypt, Data: buf[:n], ICV: buf[n:], AAD: make([]byte, 8), IV: make([]byte, alg.IVLen())}
	return s, []*crypto.Request{r}
}

// BenchmarkProvider measures one encrypt or one decrypt request per
// operation through cryptosoft's and aesni's sessions in the same run
// (the cryptosoft/aesni ratio the issue asks for).
func BenchmarkProvider(b *testing.B) {
	for _, alg := range benchAlgs {
		for _, dir := range []crypto.Direction{crypto.Encrypt, crypto.Decrypt} {
			for _, n := range crypto.CalibrationSizes {
				for _, p := range []crypto.Provider{New(), aesni.New()} {
					b.Run(fmt.Sprintf("%v/%v/%d/%s", alg, dir, n, p.Info().Name), func(b *testing.B) {
						s, reqs := newBenchSession(b, p, alg, n)
						defer s.Close(context.Background())
						r := reqs[0]
						var saved []byte
						if dir == crypto.Decrypt {
							// An authentic packet, restored before each
							// decrypt (the copy is included in both
							// providers' figures).
							s.Submit(reqs)
							r.Dir = crypto.Decrypt
							saved = append(bytes.Clone(r.Data), r.ICV...)
						}
						b.SetBytes(int64(len(r.Data)))
						b.ReportAllocs()
						for b.Loop() {
							if saved != nil {
								copy(r.Data, saved)
								copy(r.ICV, saved[len(r.Data):])
							}
							s.Submit(reqs)
							if r.Status != crypto.StatusOK {
								b.Fatalf("status %v: %v", r.Status, r.Err)
							}
						}
					})
				}
			}
		}
	}
}

// TestSessionAllocs checks the steady-state request path of cryptosoft's
// sessions allocates nothing.
func TestSessionAllocs(t *testing.T) {
	for _, alg := range benchAlgs {
		s, reqs := newBenchSession(t, New(), alg, 1420)
		r := reqs[0]
		s.Submit(reqs)
		n := testing.AllocsPerRun(20, func() {
			r.Dir = crypto.Decrypt
			s.Submit(reqs)
			r.Dir = crypto.Encrypt
			s.Submit(reqs)
		})
		if r.Status != crypto.StatusOK {
			t.Fatalf("%v: status %v %v", alg, r.Status, r.Err)
		}
		if n != 0 {
			t.Errorf("%v: %v allocs per encrypt+decrypt", alg, n)
		}
		s.Close(context.Background())
	}
}
