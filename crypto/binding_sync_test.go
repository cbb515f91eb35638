package crypto_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
	"github.com/keelinit/keel/internal/testwait"
)

// syncProvider is an in-CPU provider (cpuprov over the stdlib, so its
// sessions implement crypto.SyncSession and the Binding uses its direct
// path) that can be told to fail requests with StatusError (a provider
// fault, data left untouched) or to fail only ProcessSync, and that
// records every (key, nonce) it encrypts.
type syncProvider struct {
	crypto.Provider
	name       string
	failAfter  atomic.Int64 // fail every request after this many (<0: never)
	processed  atomic.Int64
	syncCalls  atomic.Int64
	asyncCalls atomic.Int64
	nonces     *nonceLog
}

func newSyncProvider(name string, priority int) *syncProvider {
	p := &syncProvider{name: name, nonces: newNonceLog()}
	p.Provider = cpuprov.New(crypto.ProviderInfo{Name: name, Kind: crypto.KindAccelerated, Priority: priority}, stdPrims)
	p.failAfter.Store(-1)
	return p
}

func (p *syncProvider) NewSession(sp crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	s := &syncSession{p: p, key: string(sp.CipherKey), aead: sp.Alg.IsAEAD(), done: done}
	inner, err := p.Provider.NewSession(sp, done)
	if err != nil {
		return nil, err
	}
	s.inner = inner.(crypto.SyncSession)
	return s, nil
}

type syncSession struct {
	p     *syncProvider
	key   string
	aead  bool
	inner crypto.SyncSession
	done  crypto.CompletionFunc
}

var errInjected = errors.New("injected provider fault")

// split fails the requests that the fault injection covers (marking
// them, data untouched) and returns the others.
func (s *syncSession) split(reqs []*crypto.Request) (ok []*crypto.Request) {
	for _, r := range reqs {
		n := s.p.processed.Add(1)
		if fa := s.p.failAfter.Load(); fa >= 0 && n > fa {
			r.Status, r.Err = crypto.StatusError, errInjected
			continue
		}
		if s.aead && r.Dir == crypto.Encrypt {
			nonce := append([]byte(s.key[len(s.key)-4:]), r.IV...)
			s.p.nonces.record(s.key, nonce, r.Data)
		}
		ok = append(ok, r)
	}
	return ok
}

func (s *syncSession) ProcessSync(reqs []*crypto.Request) int {
	s.p.syncCalls.Add(1)
	ok := s.split(reqs)
	if len(ok) > 0 && s.inner.ProcessSync(ok) != len(ok) {
		for _, r := range ok {
			r.Status, r.Err = crypto.StatusError, crypto.ErrClosed
		}
	}
	return len(reqs)
}

func (s *syncSession) Submit(reqs []*crypto.Request) int {
	s.p.asyncCalls.Add(1)
	ok := s.split(reqs)
	if len(ok) > 0 && s.inner.ProcessSync(ok) != len(ok) {
		for _, r := range ok {
			r.Status, r.Err = crypto.StatusError, crypto.ErrClosed
		}
	}
	s.done(reqs)
	return len(reqs)
}

func (s *syncSession) Close(ctx context.Context) error { return s.inner.Close(ctx) }

// TestSyncDirectPath: a binding on an in-CPU provider delivers through
// the direct path (ProcessSync), still in submission order and exactly
// once with concurrent submitters, and counts every request.
func TestSyncDirectPath(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	p := newSyncProvider("sync", 1)
	mustRegister(t, fw, p)
	tr := bindTraffic(t, fw, algGCM128, 20, 4, 300)
	tr.run(nil)
	if p.syncCalls.Load() == 0 {
		t.Fatal("the direct path was never taken")
	}
	st := settledStatus(tr.b, 1200)
	if st.Submitted != 1200 || st.Completed != 1200 || st.InFlight != 0 || st.Failed != 0 {
		t.Fatalf("status %+v", st)
	}
}

// settledStatus returns b's status once Completed reached n (the
// counters are updated after the CompletionFunc returns, so they may lag
// the collector by one delivery), or after 5 s.
func settledStatus(b *crypto.Binding, n uint64) crypto.BindingStatus {
	deadline := time.Now().Add(5 * time.Second)
	st := b.Status()
	for st.Completed < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		st = b.Status()
	}
	return st
}

// TestSyncRebindUnderLoad: bindings move between in-CPU providers (direct
// path on both sides), to an asynchronous provider and back, under
// concurrent submitters: nothing lost, duplicated or reordered, and every
// ciphertext right.
func TestSyncRebindUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		next func(t *testing.T, fw *crypto.Framework)
	}{
		{"sync-to-sync", func(t *testing.T, fw *crypto.Framework) { mustRegister(t, fw, aesni.New()) }},
		{"sync-to-async", func(t *testing.T, fw *crypto.Framework) {
			f := newFake("fake", 2)
			f.priority = 100
			mustRegister(t, fw, f)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No move on arrival (an unreachable margin): only the
			// deregistration moves the binding.
			fw := newFW(t, crypto.Options{Hysteresis: 1e9})
			a := newSyncProvider("a", 10)
			mustRegister(t, fw, a)
			tr := bindTraffic(t, fw, algGCM128, 21, 3, 400)
			tc.next(t, fw)
			if tr.b.Provider() != "a" {
				t.Fatalf("bound to %q", tr.b.Provider())
			}
			tr.run(func() {
				testwait.Until(t, testwait.Timeout, "200 deliveries", func() bool { return tr.c.count() >= 200 })
				if err := fw.Deregister(context.Background(), "a"); err != nil {
					t.Error(err)
				}
			})
			if tr.b.Provider() == "a" || tr.b.Status().Rebinds != 1 {
				t.Fatalf("binding on %q, status %+v", tr.b.Provider(), tr.b.Status())
			}
		})
	}
}

// TestSyncFaultRetried: the in-CPU provider fails requests (StatusError)
// on the direct path; they are retried on the other provider with the
// same data, delivered in order and exactly once, and the faulty
// provider is degraded.
func TestSyncFaultRetried(t *testing.T) {
	fw := newFW(t, crypto.Options{Hysteresis: 1e9})
	a := newSyncProvider("a", 10)
	b := newSyncProvider("b", 1)
	b.nonces = a.nonces
	mustRegister(t, fw, a)
	tr := bindTraffic(t, fw, algGCM128, 22, 3, 300)
	mustRegister(t, fw, b)
	if tr.b.Provider() != "a" {
		t.Fatalf("bound to %q", tr.b.Provider())
	}
	a.nonces.on.Store(true)
	// a fails every request after the next 100 (a fast in-CPU provider
	// may finish the whole traffic before a goroutine could arm it).
	a.failAfter.Store(a.processed.Load() + 100)
	tr.run(nil)
	if tr.b.Provider() != "b" {
		t.Fatalf("binding on %q after a faulted", tr.b.Provider())
	}
	st := settledStatus(tr.b, 900)
	if st.Retried == 0 || st.Failed != 0 || st.Submitted != 900 || st.Completed != 900 {
		t.Fatalf("status %+v", st)
	}
	for _, p := range fw.Providers() {
		if p.Name == "a" && p.State != crypto.StateDegraded {
			t.Fatalf("a is %v, want degraded", p.State)
		}
	}
	if c := a.nonces.conflicts(); len(c) != 0 {
		t.Fatalf("(key, nonce) reused with different data: %v", c)
	}
}

// TestSyncInvalidRequests: malformed requests on the direct path are
// delivered as failed (not retried, not a fault) in their place in the
// batch, and counted.
func TestSyncInvalidRequests(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	keys := testKeys(algGCM128, 23)
	c := newCollector()
	b, err := fw.Bind(keys, c.done)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b)
	var reqs []*crypto.Request
	for i := range 8 {
		pk := makePacket(t, keys, 64, uint64(i), false)
		if i%3 == 1 {
			pk.req.IV = pk.req.IV[:4]
		}
		reqs = append(reqs, &pk.req)
	}
	if n := b.Submit(reqs); n != len(reqs) {
		t.Fatalf("accepted %d", n)
	}
	c.waitFor(t, len(reqs), 5*time.Second)
	for i, r := range c.got {
		if r != reqs[i] {
			t.Fatalf("delivery %d out of order", i)
		}
		bad := i%3 == 1
		if bad != (r.Status == crypto.StatusError) || (bad && !errors.Is(r.Err, crypto.ErrInvalidRequest)) {
			t.Fatalf("request %d: %v %v", i, r.Status, r.Err)
		}
	}
	st := b.Status()
	if st.Failed != 3 || st.Retried != 0 || st.Submitted != 8 || st.Completed != 8 || b.Provider() != "aesni" {
		t.Fatalf("status %+v", st)
	}
	for _, p := range fw.Providers() {
		if p.State != crypto.StateOK {
			t.Fatalf("%s: %v", p.Name, p.State)
		}
	}
}

// TestSyncReentrantSubmit: a CompletionFunc that submits again (allowed)
// on the direct path gets its requests delivered after the current batch,
// not deadlocked and not out of order.
func TestSyncReentrantSubmit(t *testing.T) {
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	keys := testKeys(algGCM128, 24)
	var second []*crypto.Request
	for i := range 4 {
		second = append(second, &makePacket(t, keys, 64, uint64(100+i), true).req)
	}
	var got []*crypto.Request
	var b *crypto.Binding
	resubmitted := false
	done := func(rs []*crypto.Request) {
		got = append(got, rs...)
		if !resubmitted {
			resubmitted = true
			if n := b.Submit(second); n != len(second) {
				t.Errorf("re-entrant Submit accepted %d", n)
			}
			if len(got) != 4 {
				t.Errorf("re-entrant batch delivered inside the delivery of the first")
			}
		}
	}
	var err error
	if b, err = fw.Bind(keys, done); err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b)
	var first []*crypto.Request
	for i := range 4 {
		first = append(first, &makePacket(t, keys, 64, uint64(i), true).req)
	}
	if n := b.Submit(first); n != 4 {
		t.Fatalf("accepted %d", n)
	}
	want := append(append([]*crypto.Request(nil), first...), second...)
	if len(got) != len(want) {
		t.Fatalf("delivered %d, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delivery %d out of order", i)
		}
	}
	checkPackets(t, got)
}
