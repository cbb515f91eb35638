package ipsec

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
)

// nopProvider completes every request without doing any crypto: it
// isolates the engine's own per-packet cost (policy, SA, framing,
// sequence numbers, completions) in BenchmarkOverheadNoCrypto.
type nopProvider struct{}

func (nopProvider) Info() crypto.ProviderInfo         { return crypto.ProviderInfo{Name: "nop"} }
func (nopProvider) Capabilities() []crypto.Capability { return nil }
func (nopProvider) NewSession(p crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	return &nopSession{done: done}, nil
}

type nopSession struct{ done crypto.CompletionFunc }

func (s *nopSession) Submit(reqs []*crypto.Request) int {
	for _, r := range reqs {
		r.Status = crypto.StatusOK
	}
	s.done(reqs)
	return len(reqs)
}
func (s *nopSession) Close(context.Context) error { return nil }

// BenchmarkOverheadNoCrypto: Outbound of 1420 B tunnel packets with a
// provider that does no crypto; outbound-ns is the engine's own thread CPU
// time per packet (copy-ns: refilling the packet, not part of it).
func BenchmarkOverheadNoCrypto(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tp := topology{tunnel: true, xform: transforms[0]}
	tp.setAddrs(false)
	ca, _ := tp.configs()
	e := NewEngineWithProvider(nopProvider{}, Options{})
	defer e.Close(context.Background())
	applyText(b, e, ca)
	pool := NewPool(0)
	plain := udpPacket(innerA, innerB, 1000, 2000, make([]byte, benchSize-28))
	ps := getBatch(pool)
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
			e.Outbound(ps)
			for _, p := range ps {
				p.off, p.end = Headroom, Headroom+len(plain) // back to the plaintext bounds (contents are not read twice by a nop provider)
				copy(p.buf[p.off:p.off+20], plain[:20])
			}
		}
		t2 := threadCPU()
		tc += t1 - t0
		to += t2 - t1
	}
	b.ReportMetric(float64(tc)/float64(b.N*benchBatch*reps), "copy-ns")
	b.ReportMetric(float64(to)/float64(b.N*benchBatch*reps), "outbound-ns")
}

// BenchmarkOverheadNoCryptoWall is BenchmarkOverheadNoCrypto without the
// per-batch clock reads (ns/op covers one batch of benchBatch packets,
// refill included).
func BenchmarkOverheadNoCryptoWall(b *testing.B) {
	tp := topology{tunnel: true, xform: transforms[0]}
	tp.setAddrs(false)
	ca, _ := tp.configs()
	e := NewEngineWithProvider(nopProvider{}, Options{})
	defer e.Close(context.Background())
	applyText(b, e, ca)
	pool := NewPool(0)
	plain := udpPacket(innerA, innerB, 1000, 2000, make([]byte, benchSize-28))
	ps := getBatch(pool)
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range ps {
			p.SetData(plain)
		}
		e.Outbound(ps)
	}
}

// BenchmarkOverheadNoCryptoInbound: Inbound of 1420 B tunnel packets
// with the no-crypto provider; inbound-ns is the engine's own thread CPU
// time per packet (replay check and update, trailer, inner header, policy
// check), copy-ns the refill.
func BenchmarkOverheadNoCryptoInbound(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tp := topology{tunnel: true, xform: transforms[0]}
	tp.setAddrs(false)
	ca, cb := tp.configs()
	ea := NewEngineWithProvider(nopProvider{}, Options{})
	defer ea.Close(context.Background())
	eb := NewEngineWithProvider(nopProvider{}, Options{})
	defer eb.Close(context.Background())
	applyText(b, ea, ca)
	applyText(b, eb, cb)
	pool := NewPool(0)
	plain := udpPacket(innerA, innerB, 1000, 2000, make([]byte, benchSize-28))
	ps := make([]*Packet, benchBatch)
	var wire [][]byte
	for i := range ps {
		ps[i] = packetOf(b, pool, plain)
	}
	ea.Outbound(ps)
	for _, p := range ps {
		wire = append(wire, append([]byte(nil), p.Data()...))
	}
	in := eb.sad.Load().bySPI[0x1001][0]
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
			in.mu.Lock()
			in.win.Reset()
			in.mu.Unlock()
			eb.Inbound(ps)
			for j, p := range ps {
				p.off, p.end = Headroom, Headroom+len(wire[j])
				copy(p.buf[p.off:p.off+20], wire[j][:20])
			}
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
