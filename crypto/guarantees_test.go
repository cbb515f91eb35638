package crypto_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/internal/testwait"
)

// traffic drives one binding with concurrent submitters. Acceptance is
// logged under a lock held around Submit, so the exact submission order
// is known and compared with the delivery order.
type traffic struct {
	t          *testing.T
	b          *crypto.Binding
	c          *collector
	keys       crypto.SessionParams
	submitters int
	perSub     int
	batch      int
	size       int

	mu  sync.Mutex
	log []*crypto.Request
}

func (tr *traffic) run(during func()) {
	t := tr.t
	var wg sync.WaitGroup
	start := make(chan struct{})
	for s := range tr.submitters {
		// Packets are built before the clock starts (the reference costs).
		var reqs []*crypto.Request
		for i := range tr.perSub {
			pk := makePacket(t, tr.keys, tr.size, uint64(s)<<32|uint64(i), true)
			pk.sub, pk.idx = s, i
			reqs = append(reqs, &pk.req)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			deadline := time.Now().Add(testwait.Timeout)
			for len(reqs) > 0 {
				n := min(tr.batch, len(reqs))
				tr.mu.Lock()
				acc := tr.b.Submit(reqs[:n])
				tr.log = append(tr.log, reqs[:acc]...)
				tr.mu.Unlock()
				reqs = reqs[acc:]
				if acc == 0 {
					if time.Now().After(deadline) {
						t.Errorf("submitter %d: backpressure never cleared", s)
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	}
	close(start)
	if during != nil {
		during()
	}
	testwait.Wait(t, 2*testwait.Timeout, "submitters done", &wg)
	tr.c.waitFor(t, tr.submitters*tr.perSub, 2*testwait.Timeout)
	tr.check()
}

func (tr *traffic) check() {
	t := tr.t
	t.Helper()
	c := tr.c
	c.mu.Lock()
	defer c.mu.Unlock()
	total := tr.submitters * tr.perSub
	if len(c.got) != total {
		t.Errorf("delivered %d, want %d (lost %d)", len(c.got), total, total-len(c.got))
	}
	if c.dups != 0 {
		t.Errorf("%d requests delivered twice", c.dups)
	}
	if c.concurrent != 0 {
		t.Errorf("%d overlapping CompletionFunc calls", c.concurrent)
	}
	tr.mu.Lock()
	for i := range min(len(tr.log), len(c.got)) {
		if tr.log[i] != c.got[i] {
			a, b := tr.log[i].User.(*packet), c.got[i].User.(*packet)
			t.Errorf("delivery %d out of submission order: got %d/%d, want %d/%d", i, b.sub, b.idx, a.sub, a.idx)
			break
		}
	}
	tr.mu.Unlock()
	checkPackets(t, c.got)
}

func bindTraffic(t *testing.T, fw *crypto.Framework, alg crypto.Algorithm, seed byte, submitters, perSub int) *traffic {
	keys := testKeys(alg, seed)
	c := newCollector()
	b, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeBinding(t, b) })
	return &traffic{t: t, b: b, c: c, keys: keys, submitters: submitters, perSub: perSub, batch: 8, size: 200}
}

// TestOrderedExactlyOnce: an out-of-order asynchronous provider, several
// concurrent submitters; every request is delivered once, in submission
// order, with the right ciphertext.
func TestOrderedExactlyOnce(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			fw := newFW(t, crypto.Options{})
			mustRegister(t, fw, newFake("fake", workers))
			tr := bindTraffic(t, fw, algGCM128, 1, 4, 300)
			tr.run(nil)
		})
	}
}

// TestLiveRebindFasterProvider: traffic runs on a slow provider; aesni
// registers mid-stream; the binding moves without loss, duplication or
// reordering, and the old session drains before it is closed.
func TestLiveRebindFasterProvider(t *testing.T) {
	var events atomic.Value
	fw := newFW(t, crypto.Options{OnRebind: func(id uint64, alg crypto.Algorithm, from, to string) {
		events.Store(fmt.Sprintf("%v %s->%s", alg, from, to))
	}})
	slow := newFake("slow", 2)
	slow.delay.Store(int64(20 * time.Microsecond))
	mustRegister(t, fw, slow)
	tr := bindTraffic(t, fw, algGCM128, 2, 3, 400)
	if tr.b.Provider() != "slow" {
		t.Fatalf("bound to %q", tr.b.Provider())
	}
	tr.run(func() {
		testwait.Until(t, testwait.Timeout, "200 deliveries", func() bool { return tr.c.count() >= 200 })
		mustRegister(t, fw, aesni.New())
	})
	if tr.b.Provider() != "aesni" {
		t.Fatalf("binding on %q after aesni registered", tr.b.Provider())
	}
	st := tr.b.Status()
	if st.Rebinds != 1 || st.Failed != 0 || st.Retried != 0 || st.MaxSwapPause <= 0 {
		t.Fatalf("status %+v", st)
	}
	if ev, _ := events.Load().(string); ev != "aes-gcm-16-128 slow->aesni" {
		t.Fatalf("OnRebind saw %q", ev)
	}
	if n := slow.closeBusy.Load(); n != 0 {
		t.Fatalf("%d sessions closed with requests in flight", n)
	}
	waitSessions(t, slow, 0)
	// The framework counts the retired session as closed only after its
	// background close returns; give it that moment.
	testwait.Until(t, testwait.Timeout, "slow's retired session counted closed", func() bool { return providerSessions(fw, "slow") == 0 })
	for _, p := range fw.Providers() {
		if p.Name == "slow" && (p.RebindsOut != 1 || p.Sessions != 0) {
			t.Fatalf("slow: %+v", p)
		}
		if p.Name == "aesni" && (p.RebindsIn != 1 || p.Sessions != 1) {
			t.Fatalf("aesni: %+v", p)
		}
	}
}

// providerSessions is the framework's count of open sessions on name.
func providerSessions(fw *crypto.Framework, name string) int {
	for _, p := range fw.Providers() {
		if p.Name == name {
			return int(p.Sessions)
		}
	}
	return -1
}

func waitSessions(t *testing.T, f *fakeProvider, n int64) {
	t.Helper()
	testwait.Until(t, testwait.Timeout, fmt.Sprintf("%s: %d sessions open", f.name, n), func() bool { return f.sessions.Load() == n })
}

// TestHysteresis: a provider only slightly faster does not steal bindings;
// a clearly faster one does.
func TestHysteresis(t *testing.T) {
	fw := newFW(t, crypto.Options{Hysteresis: 1e9}) // an unreachable margin
	slow := newFake("slow", 1)
	slow.delay.Store(int64(2 * time.Microsecond))
	mustRegister(t, fw, slow)
	slow.delay.Store(0)
	b, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b)
	mustRegister(t, fw, aesni.New())
	if b.Provider() != "slow" {
		t.Fatalf("moved to %q despite hysteresis", b.Provider())
	}
	// New bindings still pick the fastest.
	b2, err := fw.Bind(testKeys(algGCM128, 2), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b2)
	if b2.Provider() != "aesni" {
		t.Fatalf("new binding on %q", b2.Provider())
	}
}

// TestSelectionEitherOrder: with a slow provider (a slow fake whose static
// priority is higher, or the real cryptosoft) and aesni registered in
// either order, new bindings go to aesni.
func TestSelectionEitherOrder(t *testing.T) {
	for _, order := range [][]string{{"slow", "aesni"}, {"aesni", "slow"}, {"cryptosoft", "aesni"}, {"aesni", "cryptosoft"}} {
		t.Run(order[0]+"-then-"+order[1], func(t *testing.T) {
			fw := newFW(t, crypto.Options{})
			for _, n := range order {
				if n == "aesni" {
					mustRegister(t, fw, aesni.New())
				} else if n == "cryptosoft" {
					mustRegister(t, fw, cryptosoft.New())
				} else {
					s := newFake("slow", 1)
					s.caps = []crypto.Capability{{Alg: algGCM128}, {Alg: algGCM256}, {Alg: algChaCha}, {Alg: algCBCSHA1}}
					s.priority = 1000 // priority must not beat measurement
					s.delay.Store(int64(100 * time.Microsecond))
					mustRegister(t, fw, s)
				}
			}
			for _, alg := range []crypto.Algorithm{algGCM128, algGCM256, algChaCha, algCBCSHA1} {
				b, err := fw.Bind(testKeys(alg, 1), func([]*crypto.Request) {})
				if err != nil {
					t.Fatal(err)
				}
				if b.Provider() != "aesni" {
					t.Errorf("%v bound to %q", alg, b.Provider())
				}
				closeBinding(t, b)
			}
		})
	}
}

// TestFaultRetriedElsewhere: the bound provider starts failing every
// request; failed requests are retried on the other provider with the same
// data, the faulty provider is degraded, and nothing is lost, duplicated
// or reordered. No (key, nonce) sees two different plaintexts.
func TestFaultRetriedElsewhere(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	a := newFake("a", 2)
	b := newFake("b", 2)
	b.nonces = a.nonces
	a.priority = 10
	mustRegister(t, fw, a)
	tr := bindTraffic(t, fw, algGCM128, 3, 3, 300)
	if tr.b.Provider() != "a" {
		t.Fatalf("bound to %q", tr.b.Provider())
	}
	b.delay.Store(int64(300 * time.Microsecond)) // slower: no rebind on arrival
	mustRegister(t, fw, b)
	b.delay.Store(0)
	a.nonces.on.Store(true)
	if tr.b.Provider() != "a" {
		t.Fatalf("moved to %q on arrival of a slower provider", tr.b.Provider())
	}
	tr.run(func() {
		testwait.Until(t, testwait.Timeout, "100 deliveries", func() bool { return tr.c.count() >= 100 })
		a.failAfter.Store(a.processed.Load())
	})
	if tr.b.Provider() != "b" {
		t.Fatalf("binding on %q after a faulted", tr.b.Provider())
	}
	st := tr.b.Status()
	if st.Retried == 0 || st.Failed != 0 {
		t.Fatalf("status %+v", st)
	}
	var aState crypto.ProviderState
	for _, p := range fw.Providers() {
		if p.Name == "a" {
			aState = p.State
			if p.Faults == 0 || p.LastFault == "" {
				t.Errorf("a: faults %d %q", p.Faults, p.LastFault)
			}
		}
	}
	if aState != crypto.StateDegraded {
		t.Fatalf("a is %v, want degraded", aState)
	}
	if c := a.nonces.conflicts(); len(c) != 0 {
		t.Fatalf("(key, nonce) reused with different data: %v", c)
	}
	// New bindings avoid the degraded provider.
	nb, err := fw.Bind(testKeys(algGCM128, 4), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, nb)
	if nb.Provider() != "b" {
		t.Fatalf("new binding on %q", nb.Provider())
	}
}

// TestHungProviderTimesOut: the bound provider stops completing; the
// watchdog notices, degrades it and rebinds; its Close hands the hung
// requests back (StatusError) and they are retried on the other provider.
func TestHungProviderTimesOut(t *testing.T) {
	fw := newFW(t, crypto.Options{RequestTimeout: 30 * time.Millisecond})
	a := newFake("a", 2)
	b := newFake("b", 1)
	b.nonces = a.nonces
	a.priority = 10
	mustRegister(t, fw, a)
	tr := bindTraffic(t, fw, algGCM128, 5, 2, 200)
	b.delay.Store(int64(300 * time.Microsecond))
	mustRegister(t, fw, b)
	b.delay.Store(0)
	a.nonces.on.Store(true)
	tr.run(func() {
		testwait.Until(t, testwait.Timeout, "50 deliveries", func() bool { return tr.c.count() >= 50 })
		a.hangAfter.Store(a.processed.Load())
	})
	if tr.b.Provider() != "b" {
		t.Fatalf("binding on %q", tr.b.Provider())
	}
	for _, p := range fw.Providers() {
		if p.Name == "a" && (p.State != crypto.StateDegraded || !errorsContains(p.LastFault, "no completion")) {
			t.Fatalf("a: state %v, last fault %q", p.State, p.LastFault)
		}
	}
	if st := tr.b.Status(); st.Retried == 0 || st.Failed != 0 {
		t.Fatalf("status %+v", st)
	}
	if c := a.nonces.conflicts(); len(c) != 0 {
		t.Fatalf("(key, nonce) reused with different data: %v", c)
	}
}

func errorsContains(s, sub string) bool { return len(s) > 0 && contains(s, sub) }

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestHungWithoutRelease: a broken provider that neither completes nor
// releases hung requests on Close. The framework abandons them (delivered
// once, with ErrAbandoned, in order) and ignores the device's late
// write-back instead of delivering twice.
func TestHungWithoutRelease(t *testing.T) {
	fw := newFW(t, crypto.Options{RequestTimeout: 20 * time.Millisecond, CloseTimeout: 50 * time.Millisecond})
	a := newFake("a", 1)
	mustRegister(t, fw, a)
	mustRegisterSlow(t, fw, "b")
	keys := testKeys(algGCM128, 6)
	c := newCollector()
	var sess atomic.Pointer[fakeSession]
	a.onSession = func(s *fakeSession) { sess.Store(s) }
	bd, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, bd)
	if bd.Provider() != "a" {
		t.Fatalf("bound to %q", bd.Provider())
	}
	a.keepOnClose.Store(true)
	a.hangAfter.Store(a.processed.Load())
	var reqs []*crypto.Request
	for i := range 5 {
		reqs = append(reqs, &makePacket(t, keys, 64, uint64(i), true).req)
	}
	submitAll(t, bd, reqs)
	c.waitFor(t, 5, 5*time.Second)
	for i, r := range c.got {
		if r != reqs[i] {
			t.Fatalf("delivery %d out of order", i)
		}
		if r.Status != crypto.StatusError || !errors.Is(r.Err, crypto.ErrAbandoned) {
			t.Fatalf("request %d: %v %v", i, r.Status, r.Err)
		}
	}
	// The device wakes up and writes back: nothing is delivered again.
	if n := sess.Load().lateComplete(); n != 5 {
		t.Fatalf("late completion of %d requests, want 5", n)
	}
	time.Sleep(10 * time.Millisecond)
	if c.count() != 5 || c.dups != 0 {
		t.Fatalf("after late write-back: %d delivered, %d dups", c.count(), c.dups)
	}
	if st := bd.Status(); st.Stale != 5 || st.Failed != 5 {
		t.Fatalf("status %+v, want 5 stale and 5 failed", st)
	}
	if bd.Provider() != "b" {
		t.Fatalf("binding on %q", bd.Provider())
	}
}

func mustRegisterSlow(t *testing.T, fw *crypto.Framework, name string) *fakeProvider {
	f := newFake(name, 1)
	f.delay.Store(int64(300 * time.Microsecond))
	mustRegister(t, fw, f)
	f.delay.Store(0)
	return f
}

// TestDeregisterUnderLoad: the bound provider unloads mid-stream; its
// bindings migrate first, in-flight requests drain, then it is removed.
func TestDeregisterUnderLoad(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	a := newFake("a", 2)
	a.priority = 10
	mustRegister(t, fw, a)
	mustRegisterSlow(t, fw, "b")
	tr := bindTraffic(t, fw, algGCM128, 7, 3, 300)
	a.delay.Store(int64(10 * time.Microsecond))
	tr.run(func() {
		testwait.Until(t, testwait.Timeout, "100 deliveries", func() bool { return tr.c.count() >= 100 })
		if err := fw.Deregister(context.Background(), "a"); err != nil {
			t.Error(err)
		}
		if a.sessions.Load() != 0 {
			t.Errorf("Deregister returned with %d sessions open", a.sessions.Load())
		}
	})
	if tr.b.Provider() != "b" {
		t.Fatalf("binding on %q", tr.b.Provider())
	}
	if n := a.closeBusy.Load(); n != 0 {
		t.Fatalf("%d sessions closed with requests in flight", n)
	}
	for _, p := range fw.Providers() {
		if p.Name == "a" {
			t.Fatalf("a still listed: %+v", p)
		}
	}
}

// TestManyBindingsRebind: many bindings with traffic, a faster provider
// arrives and every binding moves.
func TestManyBindingsRebind(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	slow := newFake("slow", 1)
	slow.delay.Store(int64(20 * time.Microsecond))
	mustRegister(t, fw, slow)
	slow.delay.Store(0)
	var trs []*traffic
	for i := range 20 {
		tr := bindTraffic(t, fw, algGCM128, byte(10+i), 1, 50)
		trs = append(trs, tr)
	}
	var wg sync.WaitGroup
	for _, tr := range trs {
		wg.Add(1)
		go func() { defer wg.Done(); tr.run(nil) }()
	}
	mustRegister(t, fw, aesni.New())
	testwait.Wait(t, 6*testwait.Timeout, "20 bindings' traffic done", &wg)
	for _, tr := range trs {
		if tr.b.Provider() != "aesni" {
			t.Errorf("binding %d on %q", tr.b.ID(), tr.b.Provider())
		}
	}
	if got := len(fw.Bindings()); got != len(trs) {
		t.Fatalf("Bindings() lists %d, want %d", got, len(trs))
	}
}
