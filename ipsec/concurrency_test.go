package ipsec

import (
	"context"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
)

// pairEngines returns A and B with mirrored tunnel SAs (AES-GCM) between
// 192.168.1.0/24 and 192.168.2.0/24.
func pairEngines(t testing.TB) (*Engine, *Engine) {
	ca, cb := topology{tunnel: true, xform: transforms[0], window: "-r 512"}.withAddrs().configs()
	ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
	applyText(t, ea, ca)
	applyText(t, eb, cb)
	return ea, eb
}

func (tp topology) withAddrs() topology { tp.setAddrs(false); return tp }

// TestConcurrentSequence: several goroutines encapsulate on one SA; every
// sequence number (and so every GCM IV) is used exactly once, and B
// accepts every packet exactly once even when batches are decapsulated
// concurrently and out of order.
func TestConcurrentSequence(t *testing.T) {
	ea, eb := pairEngines(t)
	pool := NewPool(0)
	const workers, batches, per = 4, 20, 16
	var mu sync.Mutex
	var wire [][]byte
	var seqs []uint64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ps := make([]*Packet, per)
			for b := 0; b < batches; b++ {
				for i := range ps {
					ps[i] = pool.Get()
					ps[i].SetData(udpPacket(netip.MustParseAddr("192.168.1.7"), netip.MustParseAddr("192.168.2.8"), uint16(w), uint16(i), make([]byte, 64+i)))
				}
				ea.Outbound(ps)
				mu.Lock()
				for _, p := range ps {
					if p.Verdict != VerdictForward {
						t.Errorf("outbound %v", p.Drop)
					}
					seqs = append(seqs, p.Seq)
					wire = append(wire, append([]byte(nil), p.Data()...))
					p.Release()
				}
				mu.Unlock()
			}
		}(w)
	}
	testwait.Wait(t, testwait.Long, "outbound workers done", &wg)
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("sequence numbers not unique and dense: index %d has %d", i, s)
		}
	}
	// Decapsulate concurrently, each packet twice.
	var okMu sync.Mutex
	accepted := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(wire); i += workers {
				ps := []*Packet{pool.Get(), pool.Get()}
				ps[0].SetData(wire[i])
				ps[1].SetData(wire[len(wire)-1-i])
				eb.Inbound(ps)
				okMu.Lock()
				for _, p := range ps {
					if p.Verdict == VerdictForward {
						accepted++
					} else if p.Drop != DropReplay {
						t.Errorf("inbound %v", p.Drop)
					}
					p.Release()
				}
				okMu.Unlock()
			}
		}(w)
	}
	testwait.Wait(t, testwait.Long, "inbound workers done", &wg)
	if accepted != len(wire) {
		t.Fatalf("accepted %d of %d unique packets", accepted, len(wire))
	}
}

// TestLiveRebind: an SA bound to a first provider moves to aesni when the
// first one is deregistered, while traffic flows; nothing is lost and
// the status shows the new provider and the rebind.
func TestLiveRebind(t *testing.T) {
	fw := crypto.New(crypto.Options{CalibrationBudget: 5 * time.Millisecond})
	defer func() { fw.Close(testwait.Context(t)) }()
	if err := fw.Register(context.Background(), namedProvider{name: "first", Provider: aesni.New()}); err != nil {
		t.Fatal(err)
	}
	ca, cb := topology{tunnel: true, xform: transforms[0]}.withAddrs().configs()
	ea, eb := NewEngine(fw, Options{}), NewEngine(fw, Options{})
	defer func() { ea.Close(testwait.Context(t)) }()
	defer func() { eb.Close(testwait.Context(t)) }()
	applyText(t, ea, ca)
	applyText(t, eb, cb)
	if p := ea.SAs()[0].Provider; p != "first" {
		t.Fatalf("bound to %q", p)
	}
	pool := NewPool(0)
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		ps := make([]*Packet, 8)
		qs := make([]*Packet, 8)
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			for i := range ps {
				ps[i] = pool.Get()
				ps[i].SetData(udpPacket(innerA, innerB, 1, 2, make([]byte, 200)))
			}
			ea.Outbound(ps)
			for i, p := range ps {
				qs[i] = pool.Get()
				qs[i].SetData(p.Data())
			}
			eb.Inbound(qs)
			for i := range ps {
				if ps[i].Verdict != VerdictForward || qs[i].Verdict != VerdictForward {
					t.Errorf("lost packet during rebind: %v/%v %v/%v", ps[i].Verdict, ps[i].Drop, qs[i].Verdict, qs[i].Drop)
				}
				ps[i].Release()
				qs[i].Release()
				n++
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := fw.Register(context.Background(), aesni.New()); err != nil {
		t.Fatal(err)
	}
	if err := fw.Deregister(context.Background(), "first"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	n, _ := testwait.Recv(t, testwait.Timeout, "traffic goroutine stopped", done)
	for _, st := range append(ea.SAs(), eb.SAs()...) {
		if st.Provider != "aesni" || st.Rebinds < 1 {
			t.Errorf("SA 0x%x: provider %q rebinds %d", st.SPI, st.Provider, st.Rebinds)
		}
	}
	if n == 0 {
		t.Fatal("no traffic")
	}
	t.Logf("%d packets through the rebind", n)
}

// namedProvider renames a provider (a second, distinct registration).
type namedProvider struct {
	name string
	crypto.Provider
}

func (n namedProvider) Info() crypto.ProviderInfo {
	i := n.Provider.Info()
	i.Name = n.name
	return i
}

// TestAllocs: the steady-state data path allocates nothing per packet.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	ea, eb := pairEngines(t)
	pool := NewPool(0)
	raw := udpPacket(innerA, innerB, 1, 2, make([]byte, 1400))
	const n = 32
	ps := make([]*Packet, n)
	qs := make([]*Packet, n)
	round := func() {
		for i := range ps {
			ps[i] = pool.Get()
			ps[i].SetData(raw)
		}
		ea.Outbound(ps)
		for i := range qs {
			qs[i] = pool.Get()
			qs[i].SetData(ps[i].Data())
		}
		eb.Inbound(qs)
		for i := range ps {
			if qs[i].Verdict != VerdictForward {
				t.Fatalf("round trip failed: %v", qs[i].Drop)
			}
			ps[i].Release()
			qs[i].Release()
		}
	}
	for i := 0; i < 10; i++ {
		round()
	}
	if a := testing.AllocsPerRun(50, round); a/n >= 0.01 {
		t.Fatalf("%.2f allocations per batch of %d (%.3f per packet)", a, n, a/n)
	}
}

// TestApplyUnderTraffic: re-applying the configuration (identical SAs are
// kept, the SPD is replaced) while batches flow loses nothing, and a
// rekey under traffic only drops packets with reasons that say so.
func TestApplyUnderTraffic(t *testing.T) {
	tp := topology{tunnel: true, xform: transforms[0], window: "-r 512"}.withAddrs()
	ca, cb := tp.configs()
	ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
	applyText(t, ea, ca)
	applyText(t, eb, cb)
	pool := NewPool(0)
	stop := make(chan struct{})
	errs := make(chan string, 100)
	var wg sync.WaitGroup
	var rekeyed atomic.Bool
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps := make([]*Packet, 8)
			qs := make([]*Packet, 8)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range ps {
					ps[i] = pool.Get()
					ps[i].SetData(udpPacket(innerA, innerB, 1, 2, make([]byte, 100)))
				}
				ea.Outbound(ps)
				for i, p := range ps {
					qs[i] = pool.Get()
					qs[i].SetData(p.Data())
				}
				eb.Inbound(qs)
				for i := range ps {
					ok := ps[i].Verdict == VerdictForward && qs[i].Verdict == VerdictForward
					if !ok && !rekeyed.Load() {
						select {
						case errs <- ps[i].Drop.String() + "/" + qs[i].Drop.String():
						default:
						}
					}
					ps[i].Release()
					qs[i].Release()
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		applyText(t, ea, ca)
		applyText(t, eb, cb)
	}
	// Rekey A only: B rejects the new key's packets with bad-icv.
	rekeyed.Store(true)
	applyText(t, ea, strings.Replace(ca, hexKey(20, 1), hexKey(20, 99), -1))
	// Wait (bounded) until B has rejected some of the new key's packets: on
	// a loaded machine the workers may not run for a while.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if eb.SAs()[0].Drops["bad-icv"] != 0 || eb.SAs()[1].Drops["bad-icv"] != 0 {
			break
		}
	}
	close(stop)
	testwait.Wait(t, testwait.Timeout, "traffic workers stopped", &wg)
	close(errs)
	for e := range errs {
		t.Errorf("packet lost during identical re-apply: %s", e)
	}
	if eb.SAs()[0].Drops["bad-icv"] == 0 && eb.SAs()[1].Drops["bad-icv"] == 0 {
		t.Error("rekeyed sender's packets were not rejected by ICV")
	}
}
