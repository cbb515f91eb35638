//go:build amd64

package vaes

import (
	"crypto/cipher"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/cputime"
)

// benchBatch packets per side, run benchReps(size) times per timed
// interval.
const benchBatch = 16

// benchReps makes a timed interval process about 256 KiB per side, so
// that the thread clock's read (a system call, about 0.5 µs here) is
// under 1 % of it; clockOverhead is subtracted as well.
func benchReps(size int) int { return max(1, (256<<10)/(benchBatch*size)) }

// clockOverhead is the median cost of one cputime.Thread read.
func clockOverhead() time.Duration {
	d := make([]time.Duration, 0, 101)
	for range 101 {
		t0 := cputime.Thread()
		d = append(d, cputime.Thread()-t0)
	}
	return median(d)
}

// BenchmarkVsStdlib measures vaes against crypto/cipher's AES-128-GCM
// (the aesni provider's primitive) interleaved in one process on one
// locked thread: each b.N iteration times benchReps batches of
// benchBatch packets on each side with the thread's CPU clock (less the
// clock's own cost), alternating which side goes first. It reports the median per-packet time of each side, the median
// of the per-interval ratios std/vaes (the speedup; > 1 is vaes faster),
// and, from the clock measured by a dependent-add chain in the same
// process, vaes's cycles per byte and the clock in GHz. AAD is 8 bytes
// (ESP SPI || seq); Seal and Open are in place / into a separate buffer
// as the ESP layer uses them.
func BenchmarkVsStdlib(b *testing.B) {
	requireCPU(b)
	for _, c := range []struct {
		op   string
		size int
	}{{"seal", 64}, {"seal", 512}, {"seal", 1420}, {"seal", 8192}, {"open", 1420}, {"open", 8192}} {
		b.Run(fmt.Sprintf("%s-%d", c.op, c.size), func(b *testing.B) {
			key := make([]byte, 16)
			for i := range key {
				key[i] = byte(i*7 + 1)
			}
			runSide := func(a cipher.AEAD) func() {
				bufs, outs := make([][]byte, benchBatch), make([][]byte, benchBatch)
				nonce, aad := make([]byte, NonceSize), make([]byte, 8)
				for i := range bufs {
					bufs[i] = make([]byte, c.size, c.size+TagSize)
					outs[i] = make([]byte, 0, c.size)
					if c.op == "open" {
						bufs[i] = a.Seal(bufs[i][:0], nonce, bufs[i], aad)
					}
				}
				if c.op == "seal" {
					return func() {
						for _, p := range bufs {
							a.Seal(p[:0], nonce, p[:c.size], aad)
						}
					}
				}
				return func() {
					for i, p := range bufs {
						if _, err := a.Open(outs[i], nonce, p, aad); err != nil {
							panic(err)
						}
					}
				}
			}
			vaesOnce, stdOnce := runSide(mustGCM(b, key)), runSide(stdGCM(b, key))
			reps := benchReps(c.size)
			vaesSide := func() {
				for range reps {
					vaesOnce()
				}
			}
			stdSide := func() {
				for range reps {
					stdOnce()
				}
			}
			clk := clockOverhead()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tv, ts := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			ratio := make([]float64, 0, b.N)
			b.SetBytes(int64(2 * reps * benchBatch * c.size))
			b.ResetTimer()
			for i := range b.N {
				var dv, ds time.Duration
				if i%2 == 0 {
					t0 := cputime.Thread()
					vaesSide()
					t1 := cputime.Thread()
					stdSide()
					dv, ds = t1-t0, cputime.Thread()-t1
				} else {
					t0 := cputime.Thread()
					stdSide()
					t1 := cputime.Thread()
					vaesSide()
					ds, dv = t1-t0, cputime.Thread()-t1
				}
				dv, ds = dv-clk, ds-clk
				tv, ts = append(tv, dv), append(ts, ds)
				if dv > 0 {
					ratio = append(ratio, float64(ds)/float64(dv))
				}
			}
			b.StopTimer()
			ghz := clockGHz()
			perPkt := float64(reps * benchBatch)
			nsV := float64(median(tv)) / perPkt
			b.ReportMetric(nsV, "vaes-ns/pkt")
			b.ReportMetric(float64(median(ts))/perPkt, "std-ns/pkt")
			b.ReportMetric(median(ratio), "std/vaes")
			b.ReportMetric(nsV*ghz/float64(c.size), "vaes-cyc/B")
			b.ReportMetric(ghz, "GHz")
		})
	}
}

// clockGHz measures the core clock on the calling (locked) thread: the
// median over 15 runs of 8×10^5 dependent additions per thread CPU
// nanosecond (each run about 250 µs, so the clock read is negligible).
func clockGHz() float64 {
	const n = 100_000
	r := make([]float64, 0, 15)
	for range 15 {
		t0 := cputime.Thread()
		spinAdds(n)
		if d := cputime.Thread() - t0; d > 0 {
			r = append(r, 8*n/float64(d.Nanoseconds()))
		}
	}
	return median(r)
}

func median[T time.Duration | float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
