package cpuprov_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
	"github.com/keelinit/keel/internal/testwait"
)

// TestProcessSync: for every claimed algorithm, ProcessSync gives the
// same bytes and statuses as Submit, never calls the CompletionFunc,
// fails malformed requests (wrong IV or ICV length) with
// ErrInvalidRequest without touching their data, processes nothing after
// Close, and does not allocate.
func TestProcessSync(t *testing.T) {
	p := cpuprov.New(crypto.ProviderInfo{Name: "x"}, std)
	for _, c := range p.Capabilities() {
		alg := c.Alg
		t.Run(alg.String(), func(t *testing.T) {
			calls := 0
			s, err := p.NewSession(keys(alg), func([]*crypto.Request) { calls++ })
			if err != nil {
				t.Fatal(err)
			}
			ss, ok := s.(crypto.SyncSession)
			if !ok {
				t.Fatal("cpuprov session does not implement crypto.SyncSession")
			}
			const size = 1424
			mk := func(seed byte) []*crypto.Request {
				var rs []*crypto.Request
				for i := range 4 {
					buf := make([]byte, size+alg.ICVLen())
					for j := range size {
						buf[j] = seed + byte(i*j)
					}
					iv := make([]byte, alg.IVLen())
					for j := range iv {
						iv[j] = byte(i + j)
					}
					r := &crypto.Request{Dir: crypto.Encrypt, Data: buf[:size], ICV: buf[size:], AAD: []byte{1, 2, 3, 4, 5, 6, 7, byte(i)}, IV: iv}
					if i == 1 {
						r.IV = make([]byte, len(iv)+1) // malformed
					}
					if i == 2 && alg.ICVLen() > 1 {
						r.ICV = r.ICV[:len(r.ICV)-1] // malformed
					}
					rs = append(rs, r)
				}
				return rs
			}
			viaSubmit, viaSync := mk(7), mk(7)
			orig := slices.Clone(viaSync[1].Data)
			if n := s.Submit(viaSubmit); n != len(viaSubmit) || calls != 1 {
				t.Fatalf("Submit: %d accepted, %d completions", n, calls)
			}
			if n := ss.ProcessSync(viaSync); n != len(viaSync) || calls != 1 {
				t.Fatalf("ProcessSync: %d processed, %d completions (want none)", n, calls)
			}
			for i := range viaSync {
				a, b := viaSubmit[i], viaSync[i]
				if a.Status != b.Status || !bytes.Equal(a.Data, b.Data) || !bytes.Equal(a.ICV, b.ICV) {
					t.Fatalf("request %d: Submit %v, ProcessSync %v, or different bytes", i, a.Status, b.Status)
				}
				bad := i == 1 || (i == 2 && alg.ICVLen() > 1)
				if bad != (b.Status == crypto.StatusError) || (bad && !errors.Is(b.Err, crypto.ErrInvalidRequest)) {
					t.Fatalf("request %d: %v %v", i, b.Status, b.Err)
				}
			}
			if !bytes.Equal(viaSync[1].Data, orig) {
				t.Fatal("a malformed request's data was modified")
			}
			// Decrypt back.
			for _, r := range viaSync {
				r.Dir = crypto.Decrypt
			}
			ss.ProcessSync(viaSync)
			if viaSync[0].Status != crypto.StatusOK || viaSync[3].Status != crypto.StatusOK {
				t.Fatalf("decrypt: %v %v", viaSync[0].Status, viaSync[3].Status)
			}
			good := []*crypto.Request{viaSync[0], viaSync[3]}
			if a := testing.AllocsPerRun(50, func() {
				good[0].Dir, good[1].Dir = crypto.Encrypt, crypto.Encrypt
				ss.ProcessSync(good)
				good[0].Dir, good[1].Dir = crypto.Decrypt, crypto.Decrypt
				ss.ProcessSync(good)
			}); a != 0 {
				t.Errorf("%.1f allocations per ProcessSync encrypt+decrypt", a)
			}
			s.Close(testwait.Context(t))
			r := &crypto.Request{Dir: crypto.Encrypt, Data: make([]byte, 16), ICV: make([]byte, alg.ICVLen()), IV: make([]byte, alg.IVLen())}
			if n := ss.ProcessSync([]*crypto.Request{r}); n != 0 || r.Status != crypto.StatusPending {
				t.Fatalf("ProcessSync after Close: %d, %v", n, r.Status)
			}
		})
	}
}
