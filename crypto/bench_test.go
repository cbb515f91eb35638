package crypto_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

// gcmBatch is a reusable batch of 1420-byte AES-128-GCM encrypt requests
// with the ICV adjacent to Data (the ESP layout).
type gcmBatch struct {
	reqs []*crypto.Request
	buf  []byte
	ivs  []byte
	aad  []byte
	seq  uint64
}

func newGCMBatch(n, size int) *gcmBatch {
	g := &gcmBatch{buf: make([]byte, n*(size+16)), ivs: make([]byte, n*8), aad: make([]byte, 8)}
	for i := range n {
		d := g.buf[i*(size+16):]
		g.reqs = append(g.reqs, &crypto.Request{Dir: crypto.Encrypt, Data: d[: size : size+16], ICV: d[size : size+16], AAD: g.aad, IV: g.ivs[i*8 : i*8+8]})
	}
	return g
}

func (g *gcmBatch) next() {
	for _, r := range g.reqs {
		g.seq++
		binary.BigEndian.PutUint64(r.IV, g.seq)
	}
}

// BenchmarkFrameworkVsRawSeal measures, interleaved in one run on one
// goroutine, AES-128-GCM 1420 B batches of 32 through a Binding on aesni
// and the same work as raw cipher.AEAD.Seal calls. Metric fw/raw is
// framework throughput ÷ raw Seal throughput (target ≥ 0.95).
func BenchmarkFrameworkVsRawSeal(b *testing.B) {
	const batch, size = 32, 1420
	fw := newFW(b, crypto.Options{})
	mustRegister(b, fw, aesni.New())
	keys := testKeys(algGCM128, 1)
	delivered := 0
	bd, err := fw.Bind(keys, func(rs []*crypto.Request) { delivered += len(rs) })
	if err != nil {
		b.Fatal(err)
	}
	defer bd.Close(context.Background())
	g := newGCMBatch(batch, size)

	blk, _ := aes.NewCipher(keys.CipherKey[:16])
	aead, _ := cipher.NewGCM(blk)
	raw := newGCMBatch(batch, size)
	nonce := make([]byte, 12)
	copy(nonce, keys.CipherKey[16:])

	// Per-batch times; the medians are robust to preemption on a shared
	// machine, where means are not.
	tFW, tRaw := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.SetBytes(batch * size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first so that neither always runs with a
		// warmer cache.
		for k := range 2 {
			if (i+k)%2 == 0 {
				g.next()
				t0 := time.Now()
				if n := bd.Submit(g.reqs); n != batch {
					b.Fatalf("accepted %d", n)
				}
				tFW = append(tFW, time.Since(t0))
			} else {
				raw.next()
				t0 := time.Now()
				for _, r := range raw.reqs {
					copy(nonce[4:], r.IV)
					aead.Seal(r.Data[:0], nonce, r.Data, r.AAD)
				}
				tRaw = append(tRaw, time.Since(t0))
			}
		}
	}
	b.StopTimer()
	if delivered != b.N*batch {
		b.Fatalf("delivered %d of %d", delivered, b.N*batch)
	}
	mf, mr := median(tFW), median(tRaw)
	b.ReportMetric(float64(mf.Nanoseconds())/batch, "fw-ns/req")
	b.ReportMetric(float64(mr.Nanoseconds())/batch, "raw-ns/req")
	b.ReportMetric(float64(mr)/float64(mf), "fw/raw")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkSessionCreateClose: Bind + Close on aesni from b.RunParallel
// goroutines. Run with -cpu 1,2: ops/s must scale (no global lock on the
// control path of sessions).
func BenchmarkSessionCreateClose(b *testing.B) {
	fw := newFW(b, crypto.Options{})
	mustRegister(b, fw, aesni.New())
	keys := testKeys(algGCM128, 1)
	done := func([]*crypto.Request) {}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bd, err := fw.Bind(keys, done)
			if err != nil {
				b.Error(err)
				return
			}
			if err := bd.Close(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkSessionCreateCloseScaling alternates rounds of Bind+Close with
// 1 and 2 goroutines (each round the same total number of operations) and
// reports the median ops/s of each and their ratio. Interleaving makes the
// comparison fair on a shared machine whose load drifts.
func BenchmarkSessionCreateCloseScaling(b *testing.B) {
	fw := newFW(b, crypto.Options{})
	mustRegister(b, fw, aesni.New())
	keys := testKeys(algGCM128, 1)
	done := func([]*crypto.Request) {}
	ctx := context.Background()
	const perRound = 2000
	round := func(g int) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perRound / g {
					bd, err := fw.Bind(keys, done)
					if err != nil {
						b.Error(err)
						return
					}
					bd.Close(ctx)
				}
			}()
		}
		wg.Wait()
		return perRound / time.Since(start).Seconds()
	}
	var r1, r2 []time.Duration // ops/s stored as Duration for median()
	b.ResetTimer()
	for range b.N {
		r1 = append(r1, time.Duration(round(1)))
		r2 = append(r2, time.Duration(round(2)))
	}
	m1, m2 := median(r1), median(r2)
	b.ReportMetric(float64(m1), "ops/s-1g")
	b.ReportMetric(float64(m2), "ops/s-2g")
	b.ReportMetric(float64(m2)/float64(m1), "2g/1g")
}
