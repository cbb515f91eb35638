//go:build amd64

package vaes

import (
	"crypto/rand"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"testing"

	"github.com/keelinit/keel/internal/cputime"
)

// BenchmarkTiming is a dudect-style leakage check (Reparaz, Balasch and
// Verbauwhede, "Dude, is my code constant time?"): Seal and Open of
// 1420-byte ESP packets for two classes of secrets, all-zero keys and
// data against random keys and data (same lengths, same number of AEAD
// values, so the same memory footprint), in random class order. Each
// sample is the thread CPU time of 32 operations. It reports Welch's t
// between the classes for each operation; |t| above 4.5 would flag a
// timing difference (dudect's threshold). The classes differ only in
// secret values, so this measures whether timing depends on them.
func BenchmarkTiming(b *testing.B) {
	requireCPU(b)
	const size, perSample, nAEAD = 1420, 32, 16
	type class struct {
		aeads []*gcm
		data  [][]byte
	}
	mk := func(random bool) class {
		var c class
		for range nAEAD {
			key := make([]byte, 16)
			pt := make([]byte, size, size+TagSize)
			if random {
				rand.Read(key)
				rand.Read(pt)
			}
			c.aeads = append(c.aeads, mustGCM(b, key))
			c.data = append(c.data, pt)
		}
		return c
	}
	classes := [2]class{mk(false), mk(true)}
	nonce, aad := make([]byte, NonceSize), make([]byte, 8)
	for _, op := range []string{"seal", "open"} {
		b.Run(op, func(b *testing.B) {
			sealed := [2][][]byte{}
			for k, c := range classes {
				for i, a := range c.aeads {
					sealed[k] = append(sealed[k], a.Seal(nil, nonce, c.data[i], aad))
				}
			}
			out := make([]byte, 0, size+TagSize) // data stays as the class made it
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rng := mrand.New(mrand.NewPCG(1, 2))
			var st [2]welford
			b.ResetTimer()
			for range b.N {
				k := rng.IntN(2)
				c := classes[k]
				t0 := cputime.Thread()
				for j := range perSample {
					i := j % nAEAD
					if op == "seal" {
						c.aeads[i].Seal(out, nonce, c.data[i], aad)
					} else if _, err := c.aeads[i].Open(out, nonce, sealed[k][i], aad); err != nil {
						b.Fatal(err)
					}
				}
				st[k].add(float64(cputime.Thread() - t0))
			}
			b.StopTimer()
			b.ReportMetric(welchT(st[0], st[1]), "welch-t")
		})
	}
}

// welford accumulates a mean and variance in one pass.
type welford struct{ n, mean, m2 float64 }

func (w *welford) add(x float64) {
	w.n++
	d := x - w.mean
	w.mean += d / w.n
	w.m2 += d * (x - w.mean)
}

// welchT is Welch's t statistic between two samples (0 if either has
// fewer than two values).
func welchT(a, b welford) float64 {
	if a.n < 2 || b.n < 2 {
		return 0
	}
	va, vb := a.m2/(a.n-1), b.m2/(b.n-1)
	return (a.mean - b.mean) / math.Sqrt(va/a.n+vb/b.n)
}
