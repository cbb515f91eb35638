package crypto_test

import (
	"context"
	"encoding/binary"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

// BenchmarkSelection: with cryptosoft and aesni registered in either
// order, a new AES-128-GCM binding's throughput (1420 B, batch 32) ÷ the
// best provider's own session doing the same work, interleaved.
func BenchmarkSelection(b *testing.B) {
	for _, order := range []string{"cryptosoft-first", "aesni-first"} {
		b.Run(order, func(b *testing.B) {
			fw := newFW(b, crypto.Options{})
			provs := []crypto.Provider{cryptosoft.New(), aesni.New()}
			if order == "aesni-first" {
				slices.Reverse(provs)
			}
			for _, p := range provs {
				mustRegister(b, fw, p)
			}
			keys := testKeys(algGCM128, 1)
			bd, err := fw.Bind(keys, func([]*crypto.Request) {})
			if err != nil {
				b.Fatal(err)
			}
			defer bd.Close(context.Background())
			direct, err := aesni.New().NewSession(keys, func([]*crypto.Request) {})
			if err != nil {
				b.Fatal(err)
			}
			defer direct.Close(context.Background())
			g1, g2 := newGCMBatch(32, 1420), newGCMBatch(32, 1420)
			tB, tD := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.SetBytes(32 * 1420)
			b.ResetTimer()
			for range b.N {
				g1.next()
				t0 := time.Now()
				bd.Submit(g1.reqs)
				tB = append(tB, time.Since(t0))
				g2.next()
				t0 = time.Now()
				direct.Submit(g2.reqs)
				tD = append(tD, time.Since(t0))
			}
			b.StopTimer()
			if bd.Provider() != aesni.Name {
				b.Fatalf("new binding on %q", bd.Provider())
			}
			b.ReportMetric(float64(median(tD))/float64(median(tB)), "binding/best")
		})
	}
}

// BenchmarkLiveRebind: a binding created while only cryptosoft exists
// carries AES-128-GCM traffic (1420 B, batch 32) from one goroutine; aesni
// registers under load; the binding moves. Reports the median per-batch
// throughput before and after, the number of rebinds and lost requests.
func BenchmarkLiveRebind(b *testing.B) {
	for range b.N {
		fw := newFW(b, crypto.Options{})
		mustRegister(b, fw, cryptosoft.New())
		var delivered atomic.Int64
		keys := testKeys(algGCM128, 1)
		bd, err := fw.Bind(keys, func(rs []*crypto.Request) { delivered.Add(int64(len(rs))) })
		if err != nil {
			b.Fatal(err)
		}
		g := newGCMBatch(32, 1420)
		var before, after []time.Duration
		var accepted int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				prov := bd.Provider()
				g.next()
				t0 := time.Now()
				n := bd.Submit(g.reqs)
				d := time.Since(t0)
				accepted += int64(n)
				if n == len(g.reqs) && bd.Provider() == prov {
					if prov == cryptosoft.Name {
						before = append(before, d)
					} else {
						after = append(after, d)
					}
				}
			}
		}()
		time.Sleep(60 * time.Millisecond)
		mustRegister(b, fw, aesni.New())
		time.Sleep(60 * time.Millisecond)
		close(stop)
		<-done
		bd.Close(context.Background())
		st := bd.Status()
		if st.Provider != "" || st.Rebinds != 1 {
			b.Fatalf("status %+v", st)
		}
		mb := func(d time.Duration) float64 { return 32 * 1420 / d.Seconds() / 1e6 }
		b.ReportMetric(mb(median(before)), "before-MB/s")
		b.ReportMetric(mb(median(after)), "after-MB/s")
		b.ReportMetric(float64(st.Rebinds), "rebinds")
		b.ReportMetric(float64(accepted-delivered.Load()), "lost")
	}
}

// BenchmarkRebind1000: 1000 AES-128-GCM bindings, one goroutine sending
// a 64-byte request to each in turn. Two equally fast providers ("aesni"
// and an identical "aesni-b") are registered with an unreachable
// hysteresis; deregistering the one the bindings are on migrates all 1000
// live to the other, which is then registered again. Per round it records
// the migration time and the figure: the longest interval, from the
// window's start to its end, during which no request completed on any
// binding (timestamps are taken in the bindings' CompletionFunc). For
// comparison it records the same figure for an equally long window
// without rebinding right after (the machine's noise floor). It reports
// the median and the maximum over the rounds of each, and logs every
// round's values (-v) for distributions across runs.
//
// Every window is also marked with whether a garbage collection cycle
// ran during it (a cycle that ended between the window's start and
// gcTail after its end; logged as a trailing "g"). Creating 1000 sessions
// allocates about 1.8 MB, so cycles fall into rebind windows more often
// than into the noise windows, and on 2 CPUs a cycle can keep a runnable
// goroutine off the CPUs for a millisecond or more by itself (its
// fractional mark worker preempts the goroutine, and a goroutine it
// readies waits in that P's run queue). The metrics without-GC separate
// the framework's effect from the collector's.
func BenchmarkRebind1000(b *testing.B) {
	const n, rounds = 1000, 10
	for range b.N {
		fw := newFW(b, crypto.Options{Hysteresis: 1e9})
		newB := func() crypto.Provider {
			return cpuprov.New(crypto.ProviderInfo{Name: "aesni-b", Kind: crypto.KindAccelerated, Priority: aesni.Priority}, stdPrims)
		}
		mustRegister(b, fw, aesni.New())
		var (
			mu        sync.Mutex
			inWindow  bool
			maxGap    time.Duration
			last      time.Time
			delivered atomic.Int64
		)
		onDone := func(rs []*crypto.Request) {
			delivered.Add(int64(len(rs)))
			now := time.Now()
			mu.Lock()
			if inWindow && now.Sub(last) > maxGap {
				maxGap = now.Sub(last)
			}
			last = now
			mu.Unlock()
		}
		binds := make([]*crypto.Binding, n)
		for i := range binds {
			bd, err := fw.Bind(testKeys(algGCM128, byte(i)), onDone)
			if err != nil {
				b.Fatal(err)
			}
			binds[i] = bd
		}
		mustRegister(b, fw, newB())
		var (
			sent    int64
			stopped atomic.Bool
		)
		reqs := make([]*crypto.Request, n)
		for i := range reqs {
			buf := make([]byte, 64+16)
			reqs[i] = &crypto.Request{Dir: crypto.Encrypt, Data: buf[:64:80], ICV: buf[64:], AAD: make([]byte, 8), IV: make([]byte, 8)}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			one := make([]*crypto.Request, 1)
			var seq uint64
			for i := 0; !stopped.Load(); i = (i + 1) % n {
				if i == 0 {
					seq++
				}
				binary.BigEndian.PutUint64(reqs[i].IV, seq)
				one[0] = reqs[i]
				sent += int64(binds[i].Submit(one))
			}
		}()
		// The gap is measured from the window's start, between completions,
		// and up to the window's end: a window without any completion
		// counts whole.
		measure := func(f func()) (time.Duration, time.Duration) {
			t0 := time.Now()
			mu.Lock()
			inWindow, maxGap, last = true, 0, t0
			mu.Unlock()
			f()
			end := time.Now()
			mu.Lock()
			inWindow = false
			g := max(maxGap, end.Sub(last))
			mu.Unlock()
			return end.Sub(t0), g
		}
		var (
			migrates, gaps, floors []time.Duration
			gapWin, floorWin       []window
		)
		cur := aesni.Name
		for range rounds {
			time.Sleep(5 * time.Millisecond)
			t0 := time.Now()
			m, g := measure(func() {
				if err := fw.Deregister(context.Background(), cur); err != nil {
					b.Error(err)
				}
			})
			t1 := time.Now()
			_, fl := measure(func() { time.Sleep(m) })
			migrates, gaps, floors = append(migrates, m), append(gaps, g), append(floors, fl)
			gapWin = append(gapWin, window{start: t0, end: t0.Add(m), gap: g})
			floorWin = append(floorWin, window{start: t1, end: t1.Add(m), gap: fl})
			if cur == aesni.Name {
				mustRegister(b, fw, aesni.New())
				cur = "aesni-b"
			} else {
				mustRegister(b, fw, newB())
				cur = aesni.Name
			}
			for _, bd := range binds {
				if bd.Provider() != cur {
					b.Fatalf("binding on %q, want %q", bd.Provider(), cur)
				}
			}
		}
		stopped.Store(true)
		<-done
		time.Sleep(gcTail)
		markGC(gapWin)
		markGC(floorWin)
		var pauses []time.Duration // per binding: its longest swap pause
		for _, bd := range binds {
			pauses = append(pauses, bd.Status().MaxSwapPause)
			bd.Close(context.Background())
		}
		slices.Sort(pauses)
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		b.Logf("per round, µs: migrate %.0f", mapDur(migrates, us))
		b.Logf("per round, µs: max gap %s", fmtWindows(gapWin))
		b.Logf("per round, µs: floor   %s", fmtWindows(floorWin))
		b.ReportMetric(float64(pauses[len(pauses)/2].Nanoseconds()), "swap-pause-p50-ns")
		b.ReportMetric(float64(pauses[len(pauses)*99/100].Nanoseconds()), "swap-pause-p99-ns")
		b.ReportMetric(float64(pauses[len(pauses)-1].Nanoseconds()), "swap-pause-max-ns")
		b.ReportMetric(us(median(migrates))/1000, "migrate-ms")
		b.ReportMetric(us(median(gaps)), "max-gap-p50-µs")
		b.ReportMetric(us(slices.Max(gaps)), "max-gap-max-µs")
		b.ReportMetric(us(maxWithoutGC(gapWin)), "max-gap-max-noGC-µs")
		b.ReportMetric(float64(countGC(gapWin)), "rounds-with-GC")
		b.ReportMetric(us(median(floors)), "noise-p50-µs")
		b.ReportMetric(us(slices.Max(floors)), "noise-max-µs")
		b.ReportMetric(float64(sent-delivered.Load()), "lost")
	}
}

func mapDur(d []time.Duration, f func(time.Duration) float64) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = f(v)
	}
	return out
}

// window is one measurement window of BenchmarkRebind1000: its span, the
// longest gap in it, and whether a GC cycle ran during it.
type window struct {
	start, end time.Time
	gap        time.Duration
	gc         bool
}

// gcTail bounds a GC cycle's length on the test machine (concurrent mark
// phases there last 2-6 ms): a cycle that ran during a window ended
// before the window's end plus gcTail.
const gcTail = 15 * time.Millisecond

// markGC marks the windows during which a GC cycle ran: a cycle ended
// (debug.GCStats.PauseEnd: the end of each cycle's last stop-the-world
// pause) between the window's start and gcTail after its end. A cycle
// that ended shortly after a window without overlapping it marks it too:
// the mark errs towards blaming the collector, in both kinds of window.
func markGC(ws []window) {
	var st debug.GCStats
	debug.ReadGCStats(&st)
	for i := range ws {
		for _, e := range st.PauseEnd {
			if !e.Before(ws[i].start) && e.Before(ws[i].end.Add(gcTail)) {
				ws[i].gc = true
				break
			}
		}
	}
}

func maxWithoutGC(ws []window) time.Duration {
	var m time.Duration
	for _, w := range ws {
		if !w.gc {
			m = max(m, w.gap)
		}
	}
	return m
}

func countGC(ws []window) int {
	n := 0
	for _, w := range ws {
		if w.gc {
			n++
		}
	}
	return n
}

// fmtWindows formats the windows' gaps in µs, "g" marking those with a
// GC cycle: [12 340g 25].
func fmtWindows(ws []window) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = strconv.FormatInt(w.gap.Microseconds(), 10)
		if w.gc {
			parts[i] += "g"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
