package ipsec

import (
	"runtime"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto/aesni"
)

func newBenchPairDirect(b *testing.B, xf int) *benchPair {
	tp := topology{tunnel: true, xform: transforms[xf]}
	tp.setAddrs(false)
	ca, cb := tp.configs()
	bp := &benchPair{ea: NewEngineWithProvider(aesni.New(), Options{}), eb: NewEngineWithProvider(aesni.New(), Options{}), pool: NewPool(0)}
	applyText(b, bp.ea, ca)
	applyText(b, bp.eb, cb)
	bp.plain = udpPacket(innerA, innerB, 1000, 2000, make([]byte, benchSize-28))
	ps := make([]*Packet, benchBatch)
	for i := range ps {
		ps[i] = packetOf(b, bp.pool, bp.plain)
	}
	bp.ea.Outbound(ps)
	for _, p := range ps {
		if p.Verdict != VerdictForward {
			b.Fatal(p.Drop)
		}
		bp.wire = append(bp.wire, append([]byte(nil), p.Data()...))
		p.Release()
	}
	bp.in = bp.eb.sad.Load().bySPI[0x1001][0]
	return bp
}

func BenchmarkZZRatioDirect(b *testing.B) {
	// Batches per timed interval: amortises the clock_gettime syscall.
	const reps = 8
	for _, x := range benchXforms {
		for _, dir := range []string{"encap", "decap"} {
			b.Run(x.name+"/"+dir, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				bp := newBenchPairDirect(b, x.idx)
				fillSeal, seal, fillOpen, open, size := rawOps(b, x.name)
				rawFill, rawOp := fillSeal, seal
				if dir == "decap" {
					rawFill, rawOp = fillOpen, open
				}
				ps := make([]*Packet, benchBatch)
				raw := make([][]byte, benchBatch)
				for i := range ps {
					ps[i] = bp.pool.Get()
					// The raw side works in packet buffers of the same
					// pool, where ESP would put the ESP header, so that
					// both see the same memory layout.
					raw[i] = bp.pool.Get().buf[Headroom-24:]
					if len(raw[i]) < size {
						b.Fatal("buffer too small")
					}
				}
				var tRaw, tESP time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := threadCPU()
					for r := 0; r < reps; r++ {
						// A batch arrives, then is processed: the same
						// order as the ESP side (fill all, then crypto).
						for _, p := range raw {
							rawFill(p)
						}
						for _, p := range raw {
							rawOp(p)
						}
					}
					t1 := threadCPU()
					for r := 0; r < reps; r++ {
						if dir == "encap" {
							for _, p := range ps {
								p.SetData(bp.plain)
							}
							bp.ea.Outbound(ps)
						} else {
							for j, p := range ps {
								p.SetData(bp.wire[j])
							}
							bp.in.mu.Lock()
							bp.in.win.Reset()
							bp.in.mu.Unlock()
							bp.eb.Inbound(ps)
						}
					}
					t2 := threadCPU()
					tRaw += t1 - t0
					tESP += t2 - t1
				}
				b.StopTimer()
				if ps[0].Verdict != VerdictForward {
					b.Fatal(ps[0].Drop)
				}
				n := float64(b.N * benchBatch * reps)
				b.ReportMetric(float64(tRaw)/float64(tESP), "esp/raw")
				b.ReportMetric(float64(tESP)/n, "esp-ns/pkt")
				b.ReportMetric(float64(tRaw)/n, "raw-ns/pkt")
				b.ReportMetric(benchSize*n/float64(tESP)*1e9/1e6, "esp-MB/s")
			})
		}
	}
}
