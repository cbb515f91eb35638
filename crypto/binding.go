package crypto

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// requestState is the framework's per-request bookkeeping, embedded in
// Request. It is written on Submit and cleared on delivery.
type requestState struct {
	b       *Binding
	w       *bsess // session of the current attempt; nil while awaiting retry
	seq     uint64 // position in the binding's submission order
	t       int64  // coarse submission time of the current attempt
	done    bool   // final status known; awaiting in-order delivery
	retries uint8
}

// Binding is a stable handle on a keyed session whose provider the
// framework swaps live. Submit, Provider, Status and Close are safe for
// concurrent use.
//
// Guarantees: every accepted request is delivered to the binding's
// CompletionFunc exactly once, in submission order (the order of
// acceptance; concurrent submitters are serialized per binding);
// deliveries are serialized, one call at a time. A request that a provider
// fails with StatusError is retried (same Data, IV and AAD, so the same
// (key, nonce) never sees different data) on the binding's current
// provider, up to Options.MaxRetries times. A request whose provider
// releases it only through a session Close that times out is delivered
// with an Err wrapping ErrAbandoned.
type Binding struct {
	f    *Framework
	id   uint64
	alg  Algorithm
	done CompletionFunc
	keys SessionParams // private copy, zeroed on Close
	// label names the binding's user (SetLabel).
	label atomic.Pointer[string]

	// rmu serializes rebinds and Close (control path).
	rmu      sync.Mutex
	detached bool // written with rmu and smu held: Close released the session
	isClosed atomic.Bool
	renew    atomic.Bool // the current session hung: replace it even if on the same provider

	// Submission side.
	smu        sync.Mutex
	cur        *bsess // guarded by smu
	closed     bool   // guarded by smu
	tailN      uint64 // guarded by smu
	tail       atomic.Uint64
	submitting atomic.Int32
	curp       atomic.Pointer[bsess] // mirror of cur for lock-free readers
	kicked     atomic.Bool

	bufs *bindingBufs
	ring []*Request
	mask uint64

	// Completion side.
	cmu        sync.Mutex
	head       atomic.Uint64 // written under cmu
	delivering bool
	out        []*Request
	retry      []*Request
	idle       chan struct{} // closed by the deliverer when head reaches tail

	submitted, completed, retried, failed, rebinds, stale atomic.Uint64
	// direct counts requests submitted and delivered by the direct path
	// (submitDirect), which is both: Status adds it to each.
	direct   atomic.Uint64
	maxPause atomic.Int64 // ns
}

// bindingBufs are a binding's recyclable buffers.
type bindingBufs struct {
	ring []*Request
	out  []*Request
}

// bsess is one provider session of a binding.
type bsess struct {
	b        *Binding
	prov     *provEntry
	s        Session
	sync     SyncSession // s, if its provider processes on the caller's goroutine
	inflight atomic.Int64
	retired  atomic.Bool
	drainMu  sync.Once
	drained  chan struct{}
}

func (w *bsess) complete(done []*Request) { w.b.complete(w, done) }

func (w *bsess) signalDrained() { w.drainMu.Do(func() { close(w.drained) }) }

var (
	errUnbound  = fmt.Errorf("crypto: binding: %w", ErrNoProvider)
	errDetached = fmt.Errorf("crypto: binding: %w", ErrClosed)
)

// Bind creates a binding for p on the fastest admitted provider for
// p.Alg (static priority breaks ties). Keys are copied; the caller may
// zero p afterwards. done receives every accepted request exactly once, in
// submission order, one call at a time; it must not block for long. It may
// call Submit, but not Close (Close waits for deliveries to finish).
// Bind fails with an error wrapping ErrNoProvider if no admitted provider
// supports p.Alg, and ErrClosed after Framework.Close.
func (f *Framework) Bind(p SessionParams, done CompletionFunc) (*Binding, error) {
	if err := p.CheckParams(); err != nil {
		return nil, fmt.Errorf("crypto: bind: %w", err)
	}
	if done == nil {
		return nil, errors.New("crypto: bind: nil CompletionFunc")
	}
	bufs := f.rings.Get().(*bindingBufs)
	b := &Binding{
		f:    f,
		id:   f.nextID.Add(1),
		alg:  p.Alg,
		done: done,
		keys: SessionParams{Alg: p.Alg, CipherKey: clone(p.CipherKey), AuthKey: clone(p.AuthKey)},
		bufs: bufs,
		ring: bufs.ring,
		mask: uint64(len(bufs.ring) - 1),
		out:  bufs.out,
	}
	var lastErr error
	for range 3 {
		if f.closed.Load() {
			b.zero()
			f.rings.Put(bufs)
			return nil, fmt.Errorf("crypto: bind %v: %w", p.Alg, ErrClosed)
		}
		e := f.snap.Load().best[p.Alg]
		if e == nil {
			b.zero()
			f.rings.Put(bufs)
			return nil, fmt.Errorf("crypto: bind %v: %w", p.Alg, ErrNoProvider)
		}
		w, err := b.newSession(e)
		if err != nil {
			// The provider could not create a session: a fault.
			lastErr = err
			f.fault(e, err)
			continue
		}
		b.cur = w
		b.curp.Store(w)
		sh := &f.shards[b.id%nShards]
		sh.mu.Lock()
		sh.m[b.id] = b
		sh.mu.Unlock()
		// A provider state change between the snapshot read and the
		// insertion above would have missed this binding: re-check.
		if e.state.Load() != stOK {
			b.kick()
		}
		return b, nil
	}
	b.zero()
	f.rings.Put(bufs)
	return nil, fmt.Errorf("crypto: bind %v: %w", p.Alg, lastErr)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func (b *Binding) zero() {
	clear(b.keys.CipherKey)
	clear(b.keys.AuthKey)
}

func (b *Binding) newSession(e *provEntry) (*bsess, error) {
	w := &bsess{b: b, prov: e, drained: make(chan struct{})}
	s, err := e.p.NewSession(b.keys, w.complete)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", e.name(), err)
	}
	w.s = s
	w.sync, _ = s.(SyncSession)
	e.sessions.add(b.id, 1)
	return w, nil
}

// ID returns the binding's framework-unique identifier.
func (b *Binding) ID() uint64 { return b.id }

// Alg returns the binding's algorithm.
func (b *Binding) Alg() Algorithm { return b.alg }

// Provider returns the name of the current provider, or "" while unbound.
func (b *Binding) Provider() string {
	if w := b.curp.Load(); w != nil {
		return w.prov.name()
	}
	return ""
}

// Status returns a snapshot of the binding's counters.
// It takes no lock that the data path uses.
func (b *Binding) Status() BindingStatus {
	closed := b.isClosed.Load()
	return BindingStatus{
		ID:           b.id,
		Alg:          b.alg,
		Label:        b.Label(),
		Provider:     b.Provider(),
		Submitted:    b.submitted.Load() + b.direct.Load(),
		Completed:    b.completed.Load() + b.direct.Load(),
		Retried:      b.retried.Load(),
		Failed:       b.failed.Load(),
		Rebinds:      b.rebinds.Load(),
		InFlight:     int(b.tail.Load() - b.head.Load()),
		Closed:       closed,
		MaxSwapPause: time.Duration(b.maxPause.Load()),
		Stale:        b.stale.Load(),
	}
}

// Submit queues a prefix of reqs on the binding's current session and
// returns how many it accepted; fewer than len(reqs) is backpressure (the
// binding's queue or the provider's is full). It never blocks waiting for
// room. Accepted requests belong to the framework until delivered; they
// may be delivered before Submit returns. After Close it accepts nothing.
// While the binding is unbound it accepts requests and delivers them with
// StatusError and an Err wrapping ErrNoProvider. A request must not be
// submitted again before it has been delivered. The framework (or the
// provider, before delivery) sets the Status and Err of every accepted
// request: the caller need not initialise them.
func (b *Binding) Submit(reqs []*Request) int {
	if len(reqs) == 0 {
		return 0
	}
	b.smu.Lock()
	if b.closed {
		b.smu.Unlock()
		return 0
	}
	if w := b.cur; w != nil && w.sync != nil && b.tailN == b.head.Load() {
		if n, ok := b.submitDirect(w, reqs); ok {
			return n
		}
	}
	b.submitting.Add(1)
	tail := b.tailN
	free := uint64(len(b.ring)) - (tail - b.head.Load())
	n := len(reqs)
	if uint64(n) > free {
		n = int(free)
	}
	acc := 0
	if n > 0 {
		batch := reqs[:n]
		now := b.f.clock.Load()
		w := b.cur
		for i, r := range batch {
			r.Status = StatusPending
			r.Err = nil
			r.fw = requestState{b: b, w: w, seq: tail + uint64(i), t: now}
			b.ring[(tail+uint64(i))&b.mask] = r
		}
		if w == nil {
			b.cmu.Lock()
			for _, r := range batch {
				r.Status = StatusError
				r.Err = errUnbound
				r.fw.done = true
			}
			b.cmu.Unlock()
			acc = n
		} else {
			w.inflight.Add(int64(n))
			acc = w.s.Submit(batch)
			if acc < 0 {
				acc = 0
			} else if acc > n {
				acc = n
			}
			if acc < n {
				w.inflight.Add(int64(acc - n))
				for i := acc; i < n; i++ {
					b.ring[(tail+uint64(i))&b.mask] = nil
					batch[i].fw = requestState{}
				}
			}
		}
		b.tailN = tail + uint64(acc)
		b.tail.Store(b.tailN)
	}
	b.smu.Unlock()
	b.submitting.Add(-1)
	if acc > 0 {
		b.submitted.Add(uint64(acc))
	}
	b.tryDeliver()
	return acc
}

// SyncSession is an optional interface of a Session whose provider does
// all its work on the calling goroutine (the in-CPU providers aesni and
// cryptosoft). When nothing of a Binding is undelivered, the Binding
// hands a batch to ProcessSync and delivers it to its CompletionFunc
// straight away, without the ring and completion bookkeeping that
// asynchronous providers need. The guarantees are the same on both paths.
type SyncSession interface {
	Session
	// ProcessSync processes a prefix of reqs in place before it returns
	// and returns the prefix's length. It sets the Status (and Err) of
	// every request of the prefix as a completion would, but does not
	// pass them to the session's CompletionFunc. A request it fails with
	// StatusError must be left unmodified (it may be retried elsewhere),
	// as with Submit. After Close it processes nothing and returns 0.
	// Safe for concurrent use with Submit and Close.
	ProcessSync(reqs []*Request) int
}

// submitDirect is Submit's path for a synchronous session w when the
// ring is empty (b.tailN == b.head, read under smu): nothing accepted
// before is undelivered, so if no other goroutine is still delivering,
// this batch is next in submission order and can be processed and
// delivered without entering the ring. Holding the delivery right from
// before ProcessSync until after the delivery keeps later batches
// (which then take the ring path) behind it. Processing happens under
// smu, as on the ring path, so a rebind's swap (under smu) finds no
// direct batch in progress on the old session and retiring it needs no
// drain. A batch in which the provider failed a request (other than as
// malformed) enters the ring as a completed batch, so that the usual
// retry and fault handling applies. It reports false, with smu still
// held and nothing done, if another goroutine is delivering. Otherwise it
// releases smu and returns how many requests it accepted.
func (b *Binding) submitDirect(w *bsess, reqs []*Request) (int, bool) {
	b.cmu.Lock()
	if b.delivering {
		b.cmu.Unlock()
		return 0, false
	}
	b.delivering = true
	b.cmu.Unlock()
	if len(reqs) > len(b.ring) {
		reqs = reqs[:len(b.ring)]
	}
	n := w.sync.ProcessSync(reqs)
	if n < 0 {
		n = 0
	} else if n > len(reqs) {
		n = len(reqs)
	}
	batch := reqs[:n]
	var failed uint64
	for _, r := range batch {
		if r.Status == StatusOK || r.Status == StatusAuthFailed {
			continue
		}
		if r.Status == StatusError && errors.Is(r.Err, ErrInvalidRequest) {
			failed++
			continue
		}
		b.directToRing(w, batch)
		b.smu.Unlock()
		b.submitted.Add(uint64(n))
		b.releaseDelivery()
		return n, true
	}
	b.smu.Unlock()
	b.deliverDirect(batch, failed)
	return n, true
}

// deliverDirect delivers a batch processed by submitDirect, of which
// failed requests failed as malformed, counts it and releases the
// delivery right. smu not held. The CompletionFunc gets the submitter's
// own slice (submitDirect capped it at the ring size), without a copy:
// it may not modify the slice, and it is valid for the call.
func (b *Binding) deliverDirect(batch []*Request, failed uint64) {
	n := uint64(len(batch))
	b.done(batch)
	b.direct.Add(n)
	if failed > 0 {
		b.failed.Add(failed)
	}
	b.releaseDelivery()
}

// directToRing enters a directly processed batch, in which the provider
// failed a request, into the empty ring as the session's completion of
// it, so that complete retries the failed requests and faults the
// provider. smu held, and the delivery right.
func (b *Binding) directToRing(w *bsess, batch []*Request) {
	tail := b.tailN
	now := b.f.clock.Load()
	for i, r := range batch {
		r.fw = requestState{b: b, w: w, seq: tail + uint64(i), t: now}
		b.ring[(tail+uint64(i))&b.mask] = r
	}
	b.tailN = tail + uint64(len(batch))
	b.tail.Store(b.tailN)
	w.inflight.Add(int64(len(batch)))
	b.submitting.Add(1)
	b.complete(w, batch)
	b.submitting.Add(-1)
}

// releaseDelivery gives up the delivery right taken by submitDirect and
// delivers what completed in the ring meanwhile (completions that found
// the right taken left that to its holder).
func (b *Binding) releaseDelivery() {
	b.cmu.Lock()
	b.delivering = false
	pending := b.head.Load() != b.tail.Load()
	b.cmu.Unlock()
	if pending {
		b.tryDeliver()
	}
}

// complete is the CompletionFunc of session w.
func (b *Binding) complete(w *bsess, done []*Request) {
	var (
		k       int64
		retry   bool
		failErr error
	)
	maxRetries := b.f.opts.MaxRetries
	b.cmu.Lock()
	for _, r := range done {
		if r.fw.b != b || r.fw.w != w || r.fw.done {
			// A completion for an attempt that is no longer current: a
			// duplicate, or a late write-back after the request was
			// abandoned. Never deliver twice.
			b.stale.Add(1)
			continue
		}
		k++
		switch r.Status {
		case StatusOK, StatusAuthFailed:
			r.fw.done = true
		default:
			if r.Status != StatusError {
				r.Status = StatusError
				r.Err = fmt.Errorf("crypto: provider %q completed a request without a status", w.prov.name())
			}
			if errors.Is(r.Err, ErrInvalidRequest) || int(r.fw.retries) >= maxRetries {
				r.fw.done = true
				continue
			}
			failErr = r.Err
			r.fw.w = nil
			r.fw.retries++
			b.retry = append(b.retry, r)
			retry = true
		}
	}
	b.cmu.Unlock()
	if k > 0 && w.inflight.Add(-k) == 0 && w.retired.Load() {
		w.signalDrained()
	}
	if retry {
		if b.curp.Load() == w {
			if failErr == nil {
				failErr = errors.New("request failed")
			}
			b.f.fault(w.prov, failErr)
		}
		b.kick()
	}
	if b.submitting.Load() == 0 {
		b.tryDeliver()
	}
}

// tryDeliver delivers the completed prefix of the submission order, unless
// another goroutine is already delivering (it will pick these up).
func (b *Binding) tryDeliver() {
	b.cmu.Lock()
	if b.delivering {
		b.cmu.Unlock()
		return
	}
	b.delivering = true
	for {
		h, t := b.head.Load(), b.tail.Load()
		out := b.out[:0]
		var failed uint64
		for h < t && len(out) < cap(out) {
			slot := &b.ring[h&b.mask]
			r := *slot
			if r == nil || !r.fw.done {
				break
			}
			*slot = nil
			if r.Status == StatusError {
				failed++
			}
			r.fw = requestState{}
			out = append(out, r)
			h++
		}
		if len(out) == 0 {
			b.delivering = false
			if b.idle != nil && h == t {
				close(b.idle)
				b.idle = nil
			}
			b.cmu.Unlock()
			return
		}
		b.head.Store(h)
		b.cmu.Unlock()
		b.done(out)
		clear(out)
		b.completed.Add(uint64(len(out)))
		if failed > 0 {
			b.failed.Add(failed)
		}
		b.cmu.Lock()
	}
}

// kick schedules maintenance (rebind if the provider is no longer the
// right one, then resubmit pending retries) in the background.
func (b *Binding) kick() {
	if !b.kicked.CompareAndSwap(false, true) {
		return
	}
	b.f.goBG(func() {
		b.kicked.Store(false)
		b.maintain()
	})
}

// maintain moves the binding to the best provider if it should move, and
// resubmits pending retries. It reports whether the binding moved.
func (b *Binding) maintain() bool {
	moved, old, unused := b.move(nil)
	for _, w := range [2]*bsess{old, unused} {
		if w != nil {
			b.f.retire(w, nil)
		}
	}
	b.flushRetry()
	return moved
}

// target returns the provider b should be on, whether b must move to it
// (or, with target nil, be unbound) and the current session's provider.
// b.rmu held. consumeRenew clears the renew request.
func (b *Binding) target(consumeRenew bool) (target, curProv *provEntry, move, unbind bool) {
	if b.detached {
		return nil, nil, false, false
	}
	if cur := b.curp.Load(); cur != nil {
		curProv = cur.prov
	}
	target = b.f.snap.Load().best[b.alg]
	renew := b.renew.Load()
	if consumeRenew {
		renew = b.renew.Swap(false)
	}
	renew = renew && curProv != nil && target == curProv
	switch {
	case b.f.shouldMove(curProv, target, b.alg) || renew:
		return target, curProv, true, false
	case target == nil && curProv != nil && curProv.state.Load() != stOK && curProv.state.Load() != stDegraded:
		// The provider is leaving and nothing else can serve: unbind.
		return nil, curProv, false, true
	}
	return target, curProv, false, false
}

// prepareMove creates the session b would move to, if it should move (nil
// otherwise, or if the provider could not create one: move then retries
// and reports the fault). It takes only b.rmu, which the data path never
// takes: traffic on b, and on every other binding, flows on the current
// sessions meanwhile. A session returned must be given to move, which
// either installs it or hands it back as unused.
func (b *Binding) prepareMove() *bsess {
	b.rmu.Lock()
	defer b.rmu.Unlock()
	target, _, move, _ := b.target(false)
	if !move {
		return nil
	}
	w, err := b.newSession(target)
	if err != nil {
		return nil
	}
	return w
}

// move moves the binding to the best provider if it should move, using
// pre (from prepareMove, may be nil) if it is a session on that provider,
// and creating the session otherwise. It returns whether the binding
// moved, the replaced session (to be retired by the caller) and pre if it
// was not installed (to be retired by the caller too). The data path
// pauses only for the pointer swap.
func (b *Binding) move(pre *bsess) (moved bool, old, unused *bsess) {
	b.rmu.Lock()
	defer b.rmu.Unlock()
	target, _, mv, unbind := b.target(true)
	switch {
	case mv:
		w := pre
		if w == nil || w.prov != target {
			unused = pre
			var err error
			if w, err = b.newSession(target); err != nil {
				b.f.log.Warn("crypto: rebind failed", "binding", b.id, "to", target.name(), "error", err.Error())
				b.f.fault(target, err)
				return false, nil, unused
			}
		}
		var ok bool
		if old, ok = b.swapLocked(w); !ok {
			if w == pre {
				return false, nil, pre
			}
			b.f.retire(w, nil)
			return false, nil, unused
		}
		target.rebindsIn.Add(1)
		b.rebinds.Add(1)
		return true, old, unused
	case unbind:
		old, moved = b.swapLocked(nil)
	}
	return moved, old, pre
}

// swapLocked installs w (nil: unbind) as the current session and returns
// the old one, which the caller must retire. It reports false, and
// changes nothing, if the binding was closed. The data path pauses only
// for the pointer swap, which does not allocate. b.rmu held.
func (b *Binding) swapLocked(w *bsess) (*bsess, bool) {
	b.smu.Lock()
	t0 := time.Now()
	if b.detached {
		b.smu.Unlock()
		return nil, false
	}
	old := b.cur
	b.cur = w
	b.curp.Store(w)
	pause := time.Since(t0)
	b.smu.Unlock()
	if fn := b.f.opts.OnRebind; fn != nil {
		var from, to string
		if old != nil {
			from = old.prov.name()
		}
		if w != nil {
			to = w.prov.name()
		}
		fn(b.id, b.alg, from, to)
	}
	for {
		m := b.maxPause.Load()
		if int64(pause) <= m || b.maxPause.CompareAndSwap(m, int64(pause)) {
			break
		}
	}
	if old != nil {
		old.prov.rebindsOut.Add(1)
	}
	return old, true
}

// flushRetry resubmits requests awaiting retry on the current session,
// keeping their place in the submission order.
func (b *Binding) flushRetry() {
	b.cmu.Lock()
	if len(b.retry) == 0 {
		b.cmu.Unlock()
		return
	}
	rs := b.retry
	b.retry = nil
	b.cmu.Unlock()

	b.submitting.Add(1)
	b.smu.Lock()
	w := b.cur
	acc := 0
	if w == nil {
		b.cmu.Lock()
		for _, r := range rs {
			r.Status = StatusError
			if b.detached {
				r.Err = errDetached
			} else {
				r.Err = errUnbound
			}
			r.fw.done = true
		}
		b.cmu.Unlock()
		acc = len(rs)
	} else {
		// These requests are visible to the watchdog and to abandon (they
		// sit between head and tail): update them under cmu.
		now := b.f.clock.Load()
		b.cmu.Lock()
		for _, r := range rs {
			r.Status = StatusPending
			r.Err = nil
			r.fw.w = w
			r.fw.t = now
		}
		b.cmu.Unlock()
		w.inflight.Add(int64(len(rs)))
		acc = w.s.Submit(rs)
		if acc < len(rs) {
			w.inflight.Add(int64(acc - len(rs)))
			b.cmu.Lock()
			for _, r := range rs[acc:] {
				r.fw.w = nil
			}
			b.retry = append(b.retry, rs[acc:]...)
			b.cmu.Unlock()
		}
		b.retried.Add(uint64(acc))
	}
	b.smu.Unlock()
	b.submitting.Add(-1)
	b.tryDeliver()
}

// retire drains a session that is no longer current and closes it in the
// background: it waits up to RequestTimeout for its in-flight requests to
// complete (they are delivered in order as usual), then calls Close
// bounded by CloseTimeout. Requests the provider never released are
// abandoned.
//
// A drained session of an in-CPU provider (kind software or accelerated,
// whose Close is immediate) is closed on the caller's goroutine instead,
// with ctx (if not nil and not expired) bounding Close: rebinding 1000
// bindings then neither floods the scheduler with 1000 goroutines
// competing with the traffic nor creates 1000 timers.
func (f *Framework) retire(w *bsess, ctx context.Context) {
	w.retired.Store(true)
	if w.inflight.Load() == 0 {
		w.signalDrained()
		if w.prov.info.Kind != KindHardware {
			f.closeRetired(w, ctx)
			return
		}
	}
	f.goBG(func() {
		t := time.NewTimer(f.opts.RequestTimeout)
		select {
		case <-w.drained:
		case <-t.C:
			f.log.Warn("crypto: retired session did not drain in time", "provider", w.prov.name(), "binding", w.b.id, "inflight", w.inflight.Load())
		}
		t.Stop()
		f.closeRetired(w, nil)
	})
}

// closeRetired closes a retired session, bounded by ctx or, if ctx is nil
// or expired, by a new CloseTimeout, and abandons whatever the provider
// did not release.
func (f *Framework) closeRetired(w *bsess, ctx context.Context) {
	if ctx == nil || ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), f.opts.CloseTimeout)
		defer cancel()
	}
	err := w.s.Close(ctx)
	w.prov.sessions.add(w.b.id, -1)
	if err != nil {
		f.log.Warn("crypto: session close failed", "provider", w.prov.name(), "binding", w.b.id, "error", err.Error())
	}
	w.b.abandon(w)
}

var errAbandoned = fmt.Errorf("crypto: session closed without releasing the request: %w", ErrAbandoned)

// abandon delivers, as failed, every request still attributed to w after
// w's Close returned: the provider broke its contract by not completing
// them. Late completions from w are ignored as stale.
func (b *Binding) abandon(w *bsess) {
	var n uint64
	b.cmu.Lock()
	for s, t := b.head.Load(), b.tail.Load(); s < t; s++ {
		r := b.ring[s&b.mask]
		if r != nil && r.fw.w == w && !r.fw.done {
			r.Status = StatusError
			r.Err = errAbandoned
			r.fw.w = nil
			r.fw.done = true
			n++
		}
	}
	b.cmu.Unlock()
	if n > 0 {
		b.f.log.Error("crypto: requests abandoned by provider", "provider", w.prov.name(), "binding", b.id, "count", n)
		b.tryDeliver()
	}
}

// check is the watchdog's per-binding look: the oldest undelivered
// request must not have been on its provider longer than RequestTimeout.
func (b *Binding) check(now int64) {
	var hung *bsess
	b.cmu.Lock()
	// A Submit in progress may be processing the head request itself (a
	// synchronous provider preempted by the OS): look again next tick.
	// Submit never blocks by contract, so a hung device is still caught.
	if h, t := b.head.Load(), b.tail.Load(); h < t && b.submitting.Load() == 0 {
		if r := b.ring[h&b.mask]; r != nil && !r.fw.done && r.fw.w != nil && now-r.fw.t > int64(b.f.opts.RequestTimeout) {
			hung = r.fw.w
		}
	}
	pending := len(b.retry) > 0
	b.cmu.Unlock()
	// A hung session that is already retired is handled by its retire
	// goroutine: its Close completes (so retries) or abandons the requests.
	if hung != nil && b.curp.Load() == hung {
		// Replace the session even if no other provider can take over, so
		// that the hung one is closed and its requests come back.
		b.renew.Store(true)
		b.f.fault(hung.prov, fmt.Errorf("provider %q: no completion within %v: %w", hung.prov.name(), b.f.opts.RequestTimeout, ErrTimeout))
		b.kick()
	}
	if pending {
		b.kick()
	}
}

// recycle returns the ring to the framework's pool if nothing can touch
// it any more: everything submitted was delivered and no deliverer runs.
// Otherwise the ring is left to the garbage collector.
func (b *Binding) recycle() {
	b.cmu.Lock()
	ok := !b.delivering && b.head.Load() == b.tail.Load() && len(b.retry) == 0
	b.cmu.Unlock()
	if ok {
		b.f.rings.Put(b.bufs)
	}
}

// Close stops accepting requests, waits (within ctx) until every accepted
// request has been delivered, closes the provider session and zeroes the
// binding's copy of the keys. Requests still undelivered when ctx expires
// are handed to the session's Close, which completes or fails them; they
// are still delivered exactly once. Close is idempotent.
func (b *Binding) Close(ctx context.Context) error {
	b.smu.Lock()
	already := b.closed
	b.closed = true
	b.isClosed.Store(true)
	b.smu.Unlock()
	if already {
		return nil
	}
	var waitErr error
	b.cmu.Lock()
	if b.head.Load() != b.tail.Load() {
		ch := make(chan struct{})
		b.idle = ch
		b.cmu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			waitErr = fmt.Errorf("crypto: binding %d: close: %d requests undelivered: %w", b.id, b.tail.Load()-b.head.Load(), ctx.Err())
		}
	} else {
		b.cmu.Unlock()
	}
	b.rmu.Lock()
	b.smu.Lock()
	w := b.cur
	b.cur = nil
	b.curp.Store(nil)
	b.detached = true
	b.smu.Unlock()
	b.rmu.Unlock()
	var closeErr error
	if w != nil {
		closeErr = w.s.Close(ctx)
		w.prov.sessions.add(w.b.id, -1)
		b.abandon(w)
	}
	// Retries still pending (Close gave up waiting) fail now: there is no
	// session any more.
	b.flushRetry()
	sh := &b.f.shards[b.id%nShards]
	sh.mu.Lock()
	delete(sh.m, b.id)
	sh.mu.Unlock()
	b.zero()
	b.recycle()
	if closeErr != nil {
		closeErr = fmt.Errorf("crypto: binding %d: close session: %w", b.id, closeErr)
	}
	return errors.Join(waitErr, closeErr)
}
