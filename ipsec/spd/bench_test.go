package spd

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// benchPolicies builds a realistic n-policy outbound SPD: n-1 site-to-site
// subnet pairs (/24 or /16 sources, /24 or /32 destinations, some with
// proto and port) and a final catch-all bypass.
func benchPolicies(n int) []Policy {
	ps := make([]Policy, 0, n)
	for i := 0; i < n-1; i++ {
		p := Policy{Dir: DirOut, Action: IPsec, Requests: tunnelReq("192.0.2.1", "192.0.2.2")}
		srcBits, dstBits := 24, 24
		if i%4 == 1 {
			srcBits = 16
		}
		if i%8 == 3 {
			dstBits = 32
		}
		p.Sel.Src = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), srcBits).Masked()
		p.Sel.Dst = netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>16), byte(i >> 8), byte(i)}), dstBits).Masked()
		switch i % 3 {
		case 1:
			p.Sel.Proto = 6
			p.Sel.DstPort = uint16(1 + i%1000)
		case 2:
			p.Sel.Proto = 17
		}
		ps = append(ps, p)
	}
	ps = append(ps, Policy{Dir: DirOut, Action: None, Sel: Selector{Src: pfx("0.0.0.0/0"), Dst: pfx("0.0.0.0/0")}})
	return dedupe(ps)
}

// flowFor returns a flow selected by policy p (or a random one for the
// catch-all).
func flowFor(r *rand.Rand, p *Policy) Flow {
	randIn := func(pf netip.Prefix) netip.Addr {
		b := pf.Addr().As4()
		host := r.Uint32() >> pf.Bits()
		if pf.Bits() == 0 {
			host = r.Uint32()
		}
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	f := Flow{Src: randIn(p.Sel.Src), Dst: randIn(p.Sel.Dst), Proto: p.Sel.Proto, SrcPort: uint16(1024 + r.IntN(60000)), DstPort: p.Sel.DstPort}
	if f.Proto == 0 {
		f.Proto = 6
	}
	if f.DstPort == 0 {
		f.DstPort = uint16(1 + r.IntN(65535))
	}
	return f
}

const benchFlows = 8192

func benchSetup(b *testing.B, n int) (*SPD, []Flow) {
	s := New()
	ps := benchPolicies(n)
	if err := s.Replace(ps); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(n), 9))
	all := s.Policies()
	flows := make([]Flow, benchFlows)
	for i := range flows {
		if i%10 == 0 {
			flows[i] = flowFor(r, &all[len(all)-1])
		} else {
			flows[i] = flowFor(r, &all[r.IntN(len(all)-1)])
		}
	}
	return s, flows
}

var sizes = []int{16, 1024, 65536}

var sink *Policy

// BenchmarkLookup: cached lookups, 8192 distinct flows visited in a
// scattered order, in parallel across GOMAXPROCS goroutines (-cpu 1,2).
func BenchmarkLookup(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			s, flows := benchSetup(b, n)
			for _, f := range flows { // warm the cache
				s.Lookup(DirOut, f)
			}
			var cpu, ops atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				now, release := threadClock()
				defer release()
				var p *Policy
				i, n := rand.IntN(benchFlows), int64(0)
				t0 := now()
				for pb.Next() {
					i = (i + 4099) & (benchFlows - 1)
					p, _ = s.Lookup(DirOut, flows[i])
					n++
				}
				cpu.Add(int64(now() - t0))
				ops.Add(n)
				sink = p
			})
			// CPU time per lookup summed over goroutines: it stays flat
			// from -cpu 1 to -cpu 2 when lookups do not contend.
			b.ReportMetric(float64(cpu.Load())/float64(max(ops.Load(), 1)), "cpu-ns/op")
		})
	}
}

// BenchmarkLookupLinear is the reference first-match scan on the same flows.
func BenchmarkLookupLinear(b *testing.B) {
	for _, n := range sizes[:2] {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			s, flows := benchSetup(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 4099) & (benchFlows - 1)
				sink, _ = s.LookupLinear(DirOut, flows[i])
			}
		})
	}
}

// BenchmarkClassify is the cache-miss path alone (compiled classifier).
func BenchmarkClassify(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			s, flows := benchSetup(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 4099) & (benchFlows - 1)
				sink, _ = s.Classify(DirOut, flows[i])
			}
			b.ReportMetric(float64(s.Stats().Tuples[DirOut]), "tuples")
		})
	}
}

// BenchmarkLookupRandomFlows is a cache-thrash flood: every lookup is a new
// flow (random source address and ports), so each one misses, classifies
// and inserts.
func BenchmarkLookupRandomFlows(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			s, flows := benchSetup(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				var p *Policy
				i := 0
				for pb.Next() {
					i = (i + 4099) & (benchFlows - 1)
					f := flows[i]
					x := r.Uint64()
					f.SrcPort = uint16(x)
					b4 := f.Src.As4()
					b4[3] ^= byte(x >> 16)
					f.Src = netip.AddrFrom4(b4)
					p, _ = s.Lookup(DirOut, f)
				}
				sink = p
			})
		})
	}
}

// BenchmarkClassifyAdversarial is the miss path on a pathological SPD:
// random prefix lengths on both ends and random proto/port wildcards, which
// maximises the number of tuples, with flows that only match the final
// catch-all (no early termination).
func BenchmarkClassifyAdversarial(b *testing.B) {
	for _, n := range []int{1024, 65536} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(7, 7))
			ps := make([]Policy, 0, n)
			for i := 0; i < n-1; i++ {
				p := Policy{Dir: DirOut, Action: None}
				p.Sel.Src = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}), 8+r.IntN(25))
				p.Sel.Dst = netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}), 8+r.IntN(25))
				if r.IntN(2) == 0 {
					p.Sel.Proto = 6
				}
				if r.IntN(2) == 0 {
					p.Sel.DstPort = uint16(1 + r.IntN(100))
				}
				ps = append(ps, p)
			}
			ps = append(ps, Policy{Dir: DirOut, Action: Discard})
			ps = dedupe(ps)
			s := New()
			if err := s.Replace(ps); err != nil {
				b.Fatal(err)
			}
			// outside: addresses outside every policy (only the catch-all
			// matches); inside: random addresses inside 10/8 -> 172/8, where
			// many prefix lengths of both dimensions match.
			outside := []Flow{{Src: addr("192.168.1.1"), Dst: addr("192.168.2.2"), Proto: 17, SrcPort: 1, DstPort: 2}}
			inside := make([]Flow, 1024)
			for i := range inside {
				inside[i] = Flow{Src: netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}),
					Dst: netip.AddrFrom4([4]byte{172, byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}), Proto: 6, SrcPort: 1000, DstPort: uint16(1 + r.IntN(100))}
			}
			for _, set := range []struct {
				name  string
				flows []Flow
			}{{"outside", outside}, {"inside", inside}} {
				b.Run(set.name, func(b *testing.B) {
					now, release := threadClock()
					defer release()
					b.ReportAllocs()
					var cpu time.Duration
					i := 0
					for b.Loop() {
						t0 := now()
						for range 16 {
							i = (i + 1) % len(set.flows)
							sink, _ = s.Classify(DirOut, set.flows[i])
						}
						cpu += now() - t0
					}
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(16*b.N), "cpu-ns/classify")
					b.ReportMetric(float64(s.Stats().Tuples[DirOut]), "tuples")
				})
			}
		})
	}
}

// BenchmarkReplace measures compiling a whole SPD.
func BenchmarkReplace(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			ps := benchPolicies(n)
			s := New()
			for b.Loop() {
				if err := s.Replace(ps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The two benchmarks below measure the headline ratios in one run each,
// with the workloads interleaved in small batches so that load drift on a
// shared machine affects both sides alike. They time batches with the
// thread CPU clock (threadClock), so the figures exclude time the thread
// spent descheduled; b's ns/op stays wall-clock.

// BenchmarkFlatness: cached Lookup with 8192 flows on SPDs of 16, 1024 and
// 65536 policies, interleaved. Metrics: cached-N-ns and flat-65536/16.
func BenchmarkFlatness(b *testing.B) {
	var spds []*SPD
	var flows [][]Flow
	for _, n := range sizes {
		s, fl := benchSetup(b, n)
		for _, f := range fl {
			s.Lookup(DirOut, f)
		}
		spds, flows = append(spds, s), append(flows, fl)
	}
	now, release := threadClock()
	defer release()
	const batch = 512
	var cached [3]time.Duration
	i, nc := 0, 0
	for b.Loop() {
		for j, s := range spds {
			fl := flows[j]
			t0 := now()
			for range batch {
				i = (i + 4099) & (benchFlows - 1)
				sink, _ = s.Lookup(DirOut, fl[i])
			}
			cached[j] += now() - t0
		}
		nc += batch
	}
	for j, n := range sizes {
		b.ReportMetric(float64(cached[j].Nanoseconds())/float64(nc), fmt.Sprintf("cached-%d-ns", n))
	}
	b.ReportMetric(float64(cached[2])/float64(cached[0]), "flat-65536/16")
}

// BenchmarkSpeedup: cached Lookup versus LookupLinear on the same
// 1024-policy SPD and 8192 flows, interleaved. Metrics: cached-ns,
// linear-ns and speedup (linear / cached).
func BenchmarkSpeedup(b *testing.B) {
	s, flows := benchSetup(b, 1024)
	for _, f := range flows {
		s.Lookup(DirOut, f)
	}
	now, release := threadClock()
	defer release()
	const batch = 512
	var cached, linear time.Duration
	i, nc, nl := 0, 0, 0
	for b.Loop() {
		t0 := now()
		for range batch {
			i = (i + 4099) & (benchFlows - 1)
			sink, _ = s.Lookup(DirOut, flows[i])
		}
		t1 := now()
		for range batch / 64 {
			i = (i + 4099) & (benchFlows - 1)
			sink, _ = s.LookupLinear(DirOut, flows[i])
		}
		linear += now() - t1
		cached += t1 - t0
		nc += batch
		nl += batch / 64
	}
	c := float64(cached.Nanoseconds()) / float64(nc)
	l := float64(linear.Nanoseconds()) / float64(nl)
	b.ReportMetric(c, "cached-ns")
	b.ReportMetric(l, "linear-ns")
	b.ReportMetric(l/c, "speedup")
}

// BenchmarkMissPath: thread-CPU ns of the miss path, interleaved over the
// three sizes: Classify (compiled classifier alone) and Lookup of a new
// random flow every time (cache thrash: probe, classify, insert).
func BenchmarkMissPath(b *testing.B) {
	var spds []*SPD
	var flows [][]Flow
	for _, n := range sizes {
		s, fl := benchSetup(b, n)
		spds, flows = append(spds, s), append(flows, fl)
	}
	r := rand.New(rand.NewPCG(1, 1))
	now, release := threadClock()
	defer release()
	const batch = 256
	var classify, thrash [3]time.Duration
	i, n := 0, 0
	for b.Loop() {
		for j, s := range spds {
			fl := flows[j]
			t0 := now()
			for range batch {
				i = (i + 4099) & (benchFlows - 1)
				sink, _ = s.Classify(DirOut, fl[i])
			}
			t1 := now()
			for range batch {
				i = (i + 4099) & (benchFlows - 1)
				f := fl[i]
				x := r.Uint64()
				f.SrcPort = uint16(x)
				b4 := f.Src.As4()
				b4[3] ^= byte(x >> 16)
				f.Src = netip.AddrFrom4(b4)
				sink, _ = s.Lookup(DirOut, f)
			}
			thrash[j] += now() - t1
			classify[j] += t1 - t0
		}
		n += batch
	}
	for j, sz := range sizes {
		b.ReportMetric(float64(classify[j].Nanoseconds())/float64(n), fmt.Sprintf("classify-%d-ns", sz))
		b.ReportMetric(float64(thrash[j].Nanoseconds())/float64(n), fmt.Sprintf("thrash-%d-ns", sz))
	}
}
