package crypto_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/internal/testwait"
)

// lateRig is a binding on provider a, which is about to misbehave, with b
// (slower at registration, so second choice) to move to. b's sessions are
// recorded so that the test can release what b holds.
type lateRig struct {
	fw    *crypto.Framework
	a, b  *fakeProvider
	aSess atomic.Pointer[fakeSession]
	bSess atomic.Pointer[fakeSession]
	keys  crypto.SessionParams
	c     *collector
	bd    *crypto.Binding
	pks   []*packet
	reqs  []*crypto.Request
}

func newLateRig(t *testing.T, opts crypto.Options, n int) *lateRig {
	t.Helper()
	r := &lateRig{fw: newFW(t, opts), a: newFake("a", 1), keys: testKeys(algGCM128, 9), c: newCollector()}
	r.a.onSession = func(s *fakeSession) { r.aSess.Store(s) }
	mustRegister(t, r.fw, r.a)
	r.b = mustRegisterSlow(t, r.fw, "b")
	r.b.onSession = func(s *fakeSession) { r.bSess.Store(s) }
	var err error
	if r.bd, err = r.fw.Bind(r.keys, r.c.done); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s := r.bSess.Load(); s != nil {
			s.release()
		}
		closeBinding(t, r.bd)
	})
	if p := r.bd.Provider(); p != "a" {
		t.Fatalf("bound to %q, want a", p)
	}
	for i := range n {
		pk := makePacket(t, r.keys, 64, uint64(i), true)
		r.pks = append(r.pks, pk)
		r.reqs = append(r.reqs, &pk.req)
	}
	return r
}

// holdOnB makes b park every request until bSess.release.
func (r *lateRig) holdOnB() {
	all := func(*crypto.Request) bool { return true }
	r.b.hold.Store(&all)
}

// reset restores the packets' plaintext, for a resubmission.
func (r *lateRig) reset() {
	for _, pk := range r.pks {
		copy(pk.req.Data, pk.plain)
		clear(pk.req.ICV)
	}
}

// expectNoDelivery fails if anything beyond want was delivered: a
// completion is handled on the completing goroutine, so an accepted one
// would have been delivered by the time lateComplete returned.
func (r *lateRig) expectNoDelivery(t *testing.T, want int, what string) {
	t.Helper()
	if n := r.c.count(); n != want {
		t.Fatalf("%s: %d requests delivered, want %d: a completion of an earlier attempt was accepted for the current one", what, n, want)
	}
}

// expectCiphertext checks the last n deliveries: the packets, in order,
// each with the ciphertext and ICV of the reference computation.
func (r *lateRig) expectCiphertext(t *testing.T, from int) {
	t.Helper()
	r.c.mu.Lock()
	got := append([]*crypto.Request(nil), r.c.got[from:]...)
	r.c.mu.Unlock()
	if len(got) != len(r.pks) {
		t.Fatalf("%d deliveries of the second attempt, want %d", len(got), len(r.pks))
	}
	for i, q := range got {
		pk := r.pks[i]
		if q != &pk.req {
			t.Fatalf("delivery %d out of order", from+i)
		}
		if q.Status != crypto.StatusOK || !bytes.Equal(q.Data, pk.wantCT) || !bytes.Equal(q.ICV, pk.wantICV) {
			t.Fatalf("packet %d: status %v (%v), ciphertext right %v: delivered with another attempt's result", i, q.Status, q.Err, bytes.Equal(q.Data, pk.wantCT))
		}
	}
}

// TestLateCompletionOnReusedRequest: a hung device's requests are
// abandoned and delivered; the caller reuses the same Requests, which go
// to the new provider; then the hung device writes back its old attempt.
// That write-back must be ignored as stale (the Request is the same
// object, and the framework's bookkeeping says "in flight"), and the
// requests delivered once, when the new provider completes them.
//
// Mutation: complete's guard reduced to r.fw.b != b (without r.fw.w != w
// and r.fw.done): the old attempt's completion delivers the plaintext.
func TestLateCompletionOnReusedRequest(t *testing.T) {
	const n = 5
	r := newLateRig(t, crypto.Options{RequestTimeout: 50 * time.Millisecond, CloseTimeout: 50 * time.Millisecond}, n)
	r.a.keepOnClose.Store(true)
	r.a.hangAfter.Store(r.a.processed.Load())
	submitAll(t, r.bd, r.reqs)
	r.c.waitFor(t, n, 10*time.Second)
	for i, q := range r.c.got {
		if q.Status != crypto.StatusError || !errors.Is(q.Err, crypto.ErrAbandoned) {
			t.Fatalf("request %d: %v %v, want abandoned", i, q.Status, q.Err)
		}
	}
	if p := r.bd.Provider(); p != "b" {
		t.Fatalf("binding on %q after a hung, want b", p)
	}
	stale := r.bd.Status().Stale

	// Reuse: the same Requests, resubmitted; b holds them.
	r.holdOnB()
	r.reset()
	submitAll(t, r.bd, r.reqs)
	r.b.waitHeld(t, n, 10*time.Second)

	if got := r.aSess.Load().lateComplete(); got != n {
		t.Fatalf("a wrote back %d requests, want %d", got, n)
	}
	r.expectNoDelivery(t, n, "after a's late write-back")
	if st := r.bd.Status(); st.Stale != stale+n {
		t.Fatalf("stale completions %d, want %d", st.Stale, stale+n)
	}

	if got := r.bSess.Load().release(); got != n {
		t.Fatalf("b released %d requests, want %d", got, n)
	}
	r.c.waitFor(t, 2*n, 10*time.Second)
	r.expectCiphertext(t, n)
}

// TestLateCompletionAfterRetry: a provider fails requests, the framework
// retries them on another provider, and while the retry is in flight the
// failing provider writes back a result for the first attempt. The retry
// is the only attempt that counts.
func TestLateCompletionAfterRetry(t *testing.T) {
	const n = 5
	r := newLateRig(t, crypto.Options{}, n)
	r.holdOnB()
	r.a.failAfter.Store(r.a.processed.Load())
	submitAll(t, r.bd, r.reqs)
	r.b.waitHeld(t, n, 10*time.Second)
	if p := r.bd.Provider(); p != "b" {
		t.Fatalf("binding on %q after a failed, want b", p)
	}
	stale := r.bd.Status().Stale

	if got := r.aSess.Load().lateWriteBack(); got != n {
		t.Fatalf("a wrote back %d requests, want %d", got, n)
	}
	r.expectNoDelivery(t, 0, "after a's late write-back of the failed attempt")
	if st := r.bd.Status(); st.Stale != stale+n {
		t.Fatalf("stale completions %d, want %d", st.Stale, stale+n)
	}

	if got := r.bSess.Load().release(); got != n {
		t.Fatalf("b released %d requests, want %d", got, n)
	}
	r.c.waitFor(t, n, 10*time.Second)
	r.expectCiphertext(t, 0)
	if c := r.c.dups; c != 0 {
		t.Fatalf("%d requests delivered twice", c)
	}
}

// TestDuplicateCompletionWhileAwaitingOrder: a request completed and
// waiting behind an earlier one for in-order delivery is completed again
// by the same session (a duplicate completion). The duplicate is counted
// as stale and changes nothing; both are delivered once, in order.
func TestDuplicateCompletionWhileAwaitingOrder(t *testing.T) {
	r := newLateRig(t, crypto.Options{}, 2)
	first := r.reqs[0]
	holdFirst := func(q *crypto.Request) bool { return q == first }
	r.a.hold.Store(&holdFirst)
	r.a.completions.Store(0)
	submitAll(t, r.bd, r.reqs)
	r.a.waitHeld(t, 1, 10*time.Second)
	// The second request completes on a's worker; wait for that.
	testwait.Until(t, testwait.Timeout, "a completed the second request", func() bool { return r.a.completions.Load() >= 1 })
	stale := r.bd.Status().Stale
	s := r.aSess.Load()
	s.done([]*crypto.Request{r.reqs[1]}) // the duplicate
	if st := r.bd.Status(); st.Stale != stale+1 {
		t.Fatalf("stale completions %d, want %d", st.Stale, stale+1)
	}
	r.expectNoDelivery(t, 0, "after the duplicate")
	if got := s.release(); got != 1 {
		t.Fatalf("a released %d requests, want 1", got)
	}
	r.c.waitFor(t, 2, 10*time.Second)
	r.expectCiphertext(t, 0)
	if st := r.bd.Status(); st.InFlight != 0 {
		t.Fatalf("in flight %d after delivery, want 0", st.InFlight)
	}
}
