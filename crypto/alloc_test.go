package crypto_test

import (
	"encoding/binary"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

// TestZeroAllocsPerRequest: the steady-state data path (pooled requests,
// Submit, provider, ordered delivery) allocates nothing, for every family.
func TestZeroAllocsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector sync.Pool drops items at random, so pools allocate")
	}
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	for _, alg := range []crypto.Algorithm{algGCM128, algChaCha, algCBCSHA1,
		{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA512_256},
		{Cipher: crypto.CipherNull, Auth: crypto.AuthHMACSHA256_128}} {
		t.Run(alg.String(), func(t *testing.T) {
			delivered := 0
			b, err := fw.Bind(testKeys(alg, 1), func(rs []*crypto.Request) {
				for _, r := range rs {
					if r.Status != crypto.StatusOK {
						t.Errorf("status %v: %v", r.Status, r.Err)
					}
				}
				delivered += len(rs)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer closeBinding(t, b)
			const batch = 32
			icv := alg.ICVLen()
			buf := make([]byte, batch*(1424+icv))
			reqs := make([]*crypto.Request, batch)
			aad := make([]byte, 8)
			ivs := make([]byte, batch*16)
			var seq uint64
			fill := func() {
				for i := range reqs {
					r := crypto.GetRequest()
					d := buf[i*(1424+icv):]
					r.Dir = crypto.Encrypt
					r.Data, r.ICV, r.AAD = d[:1424:1424+icv], d[1424:1424+icv], aad
					r.IV = ivs[i*16 : i*16+alg.IVLen()]
					if len(r.IV) >= 8 {
						seq++
						binary.BigEndian.PutUint64(r.IV, seq)
					}
					reqs[i] = r
				}
			}
			run := func() {
				fill()
				if n := b.Submit(reqs); n != batch {
					t.Fatalf("accepted %d", n)
				}
				for _, r := range reqs {
					crypto.PutRequest(r)
				}
			}
			run() // warm up pools and scratch buffers
			allocs := testing.AllocsPerRun(200, run)
			if allocs != 0 {
				t.Fatalf("%.2f allocations per batch of %d, want 0", allocs, batch)
			}
			if delivered != 202*batch { // run() + AllocsPerRun warm-up + 200 runs
				t.Fatalf("delivered %d, want %d", delivered, 202*batch)
			}
		})
	}
}
