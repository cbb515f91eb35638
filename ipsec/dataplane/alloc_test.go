package dataplane

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/netio"
)

// sinkTUN and sinkOuter accept writes without copying or allocating.
type sinkTUN struct{ n int }

func (s *sinkTUN) Read([][]byte, []int, int) (int, error) { return 0, netio.ErrClosed }
func (s *sinkTUN) Write(b [][]byte, _ int) (int, error)   { s.n += len(b); return len(b), nil }
func (s *sinkTUN) Name() (string, error)                  { return "sink", nil }
func (s *sinkTUN) MTU() (int, error)                      { return 1400, nil }
func (s *sinkTUN) Close() error                           { return nil }

type sinkOuter struct {
	n    int
	last [][]byte
}

func (s *sinkOuter) Receivers() []netio.Receiver { return nil }
func (s *sinkOuter) Send(b [][]byte, _ netip.AddrPort) error {
	s.n += len(b)
	s.last = append(s.last[:0], b...)
	return nil
}
func (s *sinkOuter) Name() string { return "sink" }
func (s *sinkOuter) Close() error { return nil }

// hotPath is gateway A's outbound and gateway B's inbound processing of
// one batch, without goroutines, as the loops run it.
type hotPath struct {
	a, b         *Gateway
	outA         *sinkOuter
	tunB         *sinkTUN
	pool, inPool *ipsec.Pool
	out, in      []*ipsec.Packet
	plain        [][]byte
	send, wbufs  [][]byte
	c            batchCounters
}

func newHotPath(tb testing.TB, batch, size int) *hotPath {
	tb.Helper()
	h := &hotPath{outA: &sinkOuter{}, tunB: &sinkTUN{}, pool: ipsec.NewPool(netio.MaxSegment), inPool: ipsec.NewPool(netio.MaxSegment)}
	engA := newEngineTB(tb, setkeyConf("esp-udp", gwA, gwB, inA, inB, keyAB, keyBA, 0x1001, 0x2001, ""))
	engB := newEngineTB(tb, setkeyConf("esp-udp", gwB, gwA, inB, inA, keyBA, keyAB, 0x2001, 0x1001, ""))
	h.a = &Gateway{eng: engA, tun: &sinkTUN{}, outer: h.outA, cfg: Config{Local: gwA, Encap: EncapUDP, Port: 4500}}
	h.b = &Gateway{eng: engB, tun: h.tunB, outer: &sinkOuter{}, cfg: Config{Local: gwB, Encap: EncapUDP, Port: 4500}}
	h.a.Refresh() // as New does: the hot path counts per peer too
	h.b.Refresh()
	for i := 0; i < batch; i++ {
		h.out = append(h.out, h.pool.Get())
		h.in = append(h.in, h.inPool.Get())
		h.plain = append(h.plain, udp4(inA, inB, make([]byte, size-28)))
	}
	return h
}

// run moves one batch A -> B and reports how many packets B delivered.
func (h *hotPath) run() int {
	for i, p := range h.out {
		p.SetData(h.plain[i])
	}
	h.send = h.a.forwardOut(h.out, h.send, &h.c)
	for i, esp := range h.outA.last {
		p := h.in[i]
		p.Commit(copy(p.ReadBuffer(), esp))
		p.Frame, p.Src, p.Dst = ipsec.FrameUDP, netip.AddrPortFrom(gwA, 4500), netip.AddrPortFrom(gwB, 4500)
	}
	before := h.tunB.n
	h.wbufs, _ = h.b.forwardIn(h.in[:len(h.outA.last)], h.wbufs, &h.c)
	return h.tunB.n - before
}

func TestHotPathNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	h := newHotPath(t, 64, 1400)
	if n := h.run(); n != 64 {
		t.Fatalf("delivered %d of 64 (drops %v)", n, h.c.drops)
	}
	allocs := testing.AllocsPerRun(50, func() { h.run() })
	if allocs != 0 {
		t.Fatalf("%.1f allocations per batch of 64 in steady state, want 0", allocs)
	}
}

// BenchmarkHotPath: encap on A plus decap on B of 64-packet batches through
// the gateways' batch functions (no I/O), aesni provider where supported.
func BenchmarkHotPath(b *testing.B) {
	for _, size := range []int{64, 1400} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			h := newHotPath(b, 64, size)
			b.SetBytes(int64(64 * size))
			b.ReportAllocs()
			for b.Loop() {
				if h.run() != 64 {
					b.Fatal("drops")
				}
			}
		})
	}
}
