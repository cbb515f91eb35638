package crypto_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
)

// TestReportFault: a provider reports its own fault (a device died) in the
// middle of traffic; bindings move away, in-flight requests are delivered
// once and in order.
func TestReportFault(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	a := newFake("a", 2)
	a.priority = 10
	mustRegister(t, fw, a)
	mustRegisterSlow(t, fw, "b")
	tr := bindTraffic(t, fw, algGCM128, 8, 2, 300)
	tr.run(func() {
		testwait.Until(t, testwait.Timeout, "100 deliveries", func() bool { return tr.c.count() >= 100 })
		fw.ReportFault("a", crypto.ErrDeviceGone)
		fw.ReportFault("no-such-provider", crypto.ErrDeviceGone) // ignored
	})
	testwait.Until(t, testwait.Timeout, "binding moved to b after a's fault", func() bool { return tr.b.Provider() == "b" })
	for _, p := range fw.Providers() {
		if p.Name == "a" && (p.State != crypto.StateDegraded || p.Faults != 1 || !errorsContains(p.LastFault, "device gone")) {
			t.Fatalf("a: %+v", p)
		}
	}
}

func TestFrameworkClose(t *testing.T) {
	fw := crypto.New(crypto.Options{CalibrationBudget: time.Millisecond, Logger: quietLogger()})
	mustRegister(t, fw, aesni.New())
	b, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(testwait.Context(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrClosed) {
		t.Fatalf("Bind after Close: %v", err)
	}
	if err := fw.Register(context.Background(), aesni.New()); !errors.Is(err, crypto.ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
	if b.Provider() != "" || len(fw.Providers()) != 0 {
		t.Fatalf("after Close: binding on %q, %d providers", b.Provider(), len(fw.Providers()))
	}
	if err := b.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
}

// TestControlPathStress: bindings are created, used and closed from
// several goroutines while providers register, fault and deregister.
// Every accepted request is delivered exactly once; nothing deadlocks.
func TestControlPathStress(t *testing.T) {
	fw := newFW(t, crypto.Options{Hysteresis: -1})
	base := newFake("base", 2)
	base.delay.Store(int64(100 * time.Microsecond)) // measured slower than aesni
	mustRegister(t, fw, base)
	base.delay.Store(0)
	stop := make(chan struct{})
	var rounds int
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		defer close(stop) // after enough churn (or an error), users finish
		for i := range 6 {
			// aesni arrives (bindings move to it), sometimes faults (they
			// move back), and leaves (they move back).
			rounds++
			if err := fw.Register(context.Background(), aesni.New()); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				fw.ReportFault(aesni.Name, crypto.ErrDeviceGone)
			}
			if err := fw.Deregister(context.Background(), aesni.Name); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var users sync.WaitGroup
	for g := range 4 {
		users.Add(1)
		go func() {
			defer users.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				keys := testKeys(algGCM128, byte(g*50+i))
				c := newCollector()
				b, err := fw.Bind(keys, c.done)
				if err != nil {
					t.Error(err)
					return
				}
				var reqs []*crypto.Request
				for j := range 20 {
					reqs = append(reqs, &makePacket(t, keys, 128, uint64(j), true).req)
				}
				submitAll(t, b, reqs)
				if err := b.Close(testwait.Context(t)); err != nil {
					t.Error(err)
				}
				if c.count() != len(reqs) || c.dups != 0 {
					t.Errorf("delivered %d (dups %d) of %d", c.count(), c.dups, len(reqs))
				}
				for k, r := range c.got {
					if r != reqs[k] {
						t.Errorf("out of order at %d", k)
						break
					}
				}
				checkPackets(t, c.got)
			}
		}()
	}
	testwait.Wait(t, 6*testwait.Timeout, "provider churn done", &churn)
	testwait.Wait(t, testwait.Timeout, "binding users stopped", &users)
	var rebinds uint64
	for _, p := range fw.Providers() {
		rebinds += p.RebindsIn
	}
	t.Logf("%d aesni arrivals, %d rebinds into base", rounds, rebinds)
	if rebinds == 0 {
		t.Fatal("no binding ever moved: the stress did not stress")
	}
	if n := len(fw.Bindings()); n != 0 {
		t.Fatalf("%d bindings left open", n)
	}
}
