package ipsec

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
)

// nopProvider completes every request without doing any crypto: it
// isolates the engine's own per-packet cost (policy, SA, framing,
// sequence numbers, completions, the framework's direct path) in the
// BenchmarkOverheadNoCrypto benchmarks. Its sessions are synchronous
// (crypto.SyncSession), as aesni's are, so a Binding takes the same path
// as in BenchmarkRatio. It claims AES-128-GCM only, at the top priority.
type nopProvider struct{}

func (nopProvider) Info() crypto.ProviderInfo {
	return crypto.ProviderInfo{Name: "nop", Kind: crypto.KindAccelerated, Priority: 1 << 20}
}

func (nopProvider) Capabilities() []crypto.Capability {
	return []crypto.Capability{{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}}}
}

func (nopProvider) NewSession(p crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	return &nopSession{done: done}, nil
}

type nopSession struct{ done crypto.CompletionFunc }

var _ crypto.SyncSession = (*nopSession)(nil)

func (s *nopSession) ProcessSync(reqs []*crypto.Request) int {
	for _, r := range reqs {
		r.Status, r.Err = crypto.StatusOK, nil
	}
	return len(reqs)
}

func (s *nopSession) Submit(reqs []*crypto.Request) int {
	n := s.ProcessSync(reqs)
	s.done(reqs)
	return n
}

func (s *nopSession) Close(context.Context) error { return nil }

var (
	nopFWOnce sync.Once
	nopFW     *crypto.Framework
	nopFWErr  error
)

// nopFramework is a framework with only nopProvider (it cannot pass
// known-answer tests, so they are skipped).
func nopFramework(tb testing.TB) *crypto.Framework {
	nopFWOnce.Do(func() {
		nopFW = crypto.New(crypto.Options{SkipSelfTests: true, CalibrationBudget: 5 * time.Millisecond})
		nopFWErr = nopFW.Register(context.Background(), nopProvider{})
	})
	if nopFWErr != nil {
		tb.Fatal(nopFWErr)
	}
	return nopFW
}

// nopPair is BenchmarkRatio's tunnel (AES-128-GCM, IPv4, 1420 B inner
// packets) on engines bound to nopProvider, with one batch of packets
// already encapsulated (wire) for the inbound benchmarks.
func nopPair(b *testing.B) (ea, eb *Engine, in *sa, plain []byte, wire [][]byte, ps []*Packet) {
	tp := topology{tunnel: true, xform: transforms[0]}
	tp.setAddrs(false)
	ca, cb := tp.configs()
	ea, eb = NewEngine(nopFramework(b), Options{}), NewEngine(nopFramework(b), Options{})
	b.Cleanup(func() {
		_ = ea.Close(context.Background())
		_ = eb.Close(context.Background())
	})
	applyText(b, ea, ca)
	applyText(b, eb, cb)
	pool := NewPool(0)
	plain = udpPacket(innerA, innerB, 1000, 2000, make([]byte, benchSize-28))
	ps = make([]*Packet, benchBatch)
	for i := range ps {
		ps[i] = packetOf(b, pool, plain)
	}
	ea.Outbound(ps)
	for _, p := range ps {
		if p.Verdict != VerdictForward {
			b.Fatal(p.Drop)
		}
		wire = append(wire, append([]byte(nil), p.Data()...))
	}
	return ea, eb, eb.sad.Load().bySPI[0x1001][0], plain, wire, ps
}

// nopOutbound encapsulates ps and sets them back to their plaintext
// bounds (a nop provider leaves the contents as they were; the outer
// header written over the inner one's place is restored).
func nopOutbound(ea *Engine, ps []*Packet, plain []byte) {
	ea.Outbound(ps)
	for _, p := range ps {
		p.off, p.end = Headroom, Headroom+len(plain)
		copy(p.buf[p.off:p.off+20], plain[:20])
	}
}

// nopInbound decapsulates ps (holding wire) and sets them back to their
// ESP bounds, with the replay window of in reset.
func nopInbound(eb *Engine, in *sa, ps []*Packet, wire [][]byte) {
	in.mu.Lock()
	in.win.Reset()
	in.mu.Unlock()
	eb.Inbound(ps)
	for j, p := range ps {
		p.off, p.end = Headroom, Headroom+len(wire[j])
		copy(p.buf[p.off:p.off+20], wire[j][:20])
	}
}

// BenchmarkOverheadNoCrypto: Outbound of 1420 B tunnel packets through
// the framework with a provider that does no crypto; outbound-ns is the
// engine's own thread CPU time per packet (copy-ns: refilling the packet,
// not part of it). The Wall variant: ns/op per batch of benchBatch,
// refill included, for CPU profiles and for bench/instructions.sh (run
// under callgrind, it counts instructions per packet).
func BenchmarkOverheadNoCrypto(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ea, _, _, plain, _, ps := nopPair(b)
	const reps = 8
	var tc, to time.Duration
	for i := 0; i < b.N; i++ {
		t0 := threadCPU()
		for r := 0; r < reps; r++ {
			for _, p := range ps {
				p.SetData(plain)
			}
		}
		t1 := threadCPU()
		for r := 0; r < reps; r++ {
			nopOutbound(ea, ps, plain)
		}
		t2 := threadCPU()
		tc += t1 - t0
		to += t2 - t1
	}
	b.ReportMetric(float64(tc)/float64(b.N*benchBatch*reps), "copy-ns")
	b.ReportMetric(float64(to)/float64(b.N*benchBatch*reps), "outbound-ns")
}

func BenchmarkOverheadNoCryptoWall(b *testing.B) {
	ea, _, _, plain, _, ps := nopPair(b)
	b.ReportAllocs()
	for b.Loop() {
		nopOutbound(ea, ps, plain)
	}
	if ps[0].Verdict != VerdictForward {
		b.Fatal(ps[0].Drop)
	}
}

// BenchmarkOverheadNoCryptoInbound: Inbound of 1420 B tunnel packets
// with the no-crypto provider; inbound-ns is the engine's own thread CPU
// time per packet (replay check and update, trailer, inner header, policy
// check), copy-ns the refill.
func BenchmarkOverheadNoCryptoInbound(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, eb, in, _, wire, ps := nopPair(b)
	const reps = 8
	var tc, ti time.Duration
	for i := 0; i < b.N; i++ {
		t0 := threadCPU()
		for r := 0; r < reps; r++ {
			for j, p := range ps {
				p.SetData(wire[j])
			}
		}
		t1 := threadCPU()
		for r := 0; r < reps; r++ {
			nopInbound(eb, in, ps, wire)
		}
		t2 := threadCPU()
		tc += t1 - t0
		ti += t2 - t1
	}
	if ps[0].Drop != DropNone {
		b.Fatal(ps[0].Drop)
	}
	b.ReportMetric(float64(tc)/float64(b.N*benchBatch*reps), "copy-ns")
	b.ReportMetric(float64(ti)/float64(b.N*benchBatch*reps), "inbound-ns")
}

func BenchmarkOverheadNoCryptoInboundWall(b *testing.B) {
	_, eb, in, _, wire, ps := nopPair(b)
	for j, p := range ps {
		p.SetData(wire[j])
	}
	b.ReportAllocs()
	for b.Loop() {
		nopInbound(eb, in, ps, wire)
	}
	if ps[0].Verdict != VerdictForward {
		b.Fatal(ps[0].Drop)
	}
}
