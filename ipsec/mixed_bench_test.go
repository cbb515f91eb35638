package ipsec

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
)

// Mixed traffic: a gateway with 16 peers and 8 outbound policies per peer,
// each policy unique:N on its own AES-128-GCM tunnel SA (128 SAs each
// way), and batches whose packets each meet another policy.
const (
	mixedPeers    = 16
	mixedPolicies = 8
)

// mixedConfigs returns the setkey files of the gateway (192.0.2.1) and of
// its peers taken together (the same SAs, the policy directions
// swapped): inner 10.1.0.0/16 to 10.<100+k>.<j>.0/24 over SA reqid
// 8k+j+1.
func mixedConfigs() (gw, peers string) {
	var b strings.Builder
	b.WriteString("flush;\nspdflush;\n")
	for k := range mixedPeers {
		peer := fmt.Sprintf("198.51.100.%d", 10+k)
		for j := range mixedPolicies {
			n := 8*k + j + 1
			fmt.Fprintf(&b, "add 192.0.2.1 %s esp 0x%x -m tunnel -r 0 -u %d -E aes-gcm-16 %s;\n", peer, 0x1000+n, n, hexKey(20, byte(n)))
			fmt.Fprintf(&b, "add %s 192.0.2.1 esp 0x%x -m tunnel -r 0 -u %d -E aes-gcm-16 %s;\n", peer, 0x2000+n, n, hexKey(20, byte(n+128)))
			fmt.Fprintf(&b, "spdadd 10.1.0.0/16 10.%d.%d.0/24 any -P out ipsec esp/tunnel/192.0.2.1-%s/unique:%d;\n", 100+k, j, peer, n)
			fmt.Fprintf(&b, "spdadd 10.%d.%d.0/24 10.1.0.0/16 any -P in ipsec esp/tunnel/%s-192.0.2.1/unique:%d;\n", 100+k, j, peer, n)
		}
	}
	gw = b.String()
	return gw, strings.NewReplacer("-P out", "-P in", "-P in", "-P out").Replace(gw)
}

// mixedFlow is the plaintext of flow i of the mixed batch: policy i
// (mod 128), visited with a stride so that neighbours meet different
// peers.
func mixedFlow(i, size int) []byte {
	pol := (i * 17) % (mixedPeers * mixedPolicies)
	k, j := pol/mixedPolicies, pol%mixedPolicies
	dst := netip.AddrFrom4([4]byte{10, byte(100 + k), byte(j), 9})
	return udpPacket(netip.MustParseAddr("10.1.0.5"), dst, 1000, 2000, make([]byte, size-28))
}

// mixedRig holds the gateway, the peers' engine and, for each of the
// batches "one" (benchBatch packets of one flow) and "mixed" (benchBatch
// flows on as many SAs), the plaintexts and the gateway's ESP packets.
type mixedRig struct {
	gw, peers  *Engine
	pool       *Pool
	plain      map[string][][]byte
	wire       map[string][][]byte
	inOne      *sa // the peers' inbound SA of the one-flow batch
	ps         []*Packet
	batchKinds []string
}

func newMixedRig(tb testing.TB, size int) *mixedRig {
	gwConf, peerConf := mixedConfigs()
	r := &mixedRig{gw: newTestEngine(tb, Options{}), peers: newTestEngine(tb, Options{}), pool: NewPool(0),
		plain: map[string][][]byte{}, wire: map[string][][]byte{}, batchKinds: []string{"one", "mixed"}}
	applyText(tb, r.gw, gwConf)
	applyText(tb, r.peers, peerConf)
	for range benchBatch {
		r.ps = append(r.ps, r.pool.Get())
	}
	for i := range benchBatch {
		r.plain["one"] = append(r.plain["one"], mixedFlow(0, size))
		r.plain["mixed"] = append(r.plain["mixed"], mixedFlow(i, size))
	}
	for _, kind := range r.batchKinds {
		r.encap(kind)
		for i, p := range r.ps {
			if p.Verdict != VerdictForward {
				tb.Fatalf("%s packet %d: %v", kind, i, p.Drop)
			}
			r.wire[kind] = append(r.wire[kind], append([]byte(nil), p.Data()...))
		}
	}
	r.inOne = r.peers.sad.Load().bySPI[r.ps[0].SPI][0]
	return r
}

func (r *mixedRig) encap(kind string) {
	for i, p := range r.ps {
		p.SetData(r.plain[kind][i])
	}
	r.gw.Outbound(r.ps)
}

func (r *mixedRig) decap(kind string) {
	for i, p := range r.ps {
		p.SetData(r.wire[kind][i])
	}
	r.peers.Inbound(r.ps)
}

// BenchmarkMixedBatch reports, for encap and decap of 1420-byte packets,
// the throughput of a batch of benchBatch packets that each meet another
// of 128 policies (16 peers x 8, each on its own SA) against a batch of
// one flow, interleaved batch by batch as BenchmarkRatio does (thread CPU
// time, averaged over stack positions): mixed/one = one-flow CPU time ÷
// mixed CPU time.
func BenchmarkMixedBatch(b *testing.B) {
	for _, dir := range []string{"encap", "decap"} {
		b.Run(dir, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r := newMixedRig(b, benchSize)
			run := r.encap
			if dir == "decap" {
				run = r.decap
			}
			b.ReportAllocs()
			tOne, tMixed := interleaveCPU(b, func() { run("one") }, func() { run("mixed") })
			n := float64(b.N * benchBatch * ratioReps)
			b.ReportMetric(float64(tOne)/float64(tMixed), "mixed/one")
			b.ReportMetric(float64(tMixed)/n, "mixed-ns/pkt")
			b.ReportMetric(float64(tOne)/n, "one-ns/pkt")
			for i, p := range r.ps {
				if p.Verdict != VerdictForward {
					b.Fatalf("packet %d: %v", i, p.Drop)
				}
			}
		})
	}
}

// TestMixedAllocs: mixed traffic (every packet of a batch on another
// policy and SA of 16 peers x 8 policies) allocates nothing per packet,
// outbound or inbound.
func TestMixedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	r := newMixedRig(t, 200)
	for _, dir := range []string{"encap", "decap"} {
		run := r.encap
		if dir == "decap" {
			run = r.decap
		}
		for range 10 {
			run("mixed")
		}
		if a := testing.AllocsPerRun(50, func() { run("mixed") }); a/benchBatch >= 0.01 {
			t.Errorf("%s: %.2f allocations per mixed batch of %d (%.3f per packet)", dir, a, benchBatch, a/benchBatch)
		}
		for i, p := range r.ps {
			if p.Verdict != VerdictForward {
				t.Fatalf("%s packet %d: %v", dir, i, p.Drop)
			}
		}
	}
}
