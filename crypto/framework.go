package crypto

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Framework. The zero value selects the defaults.
type Options struct {
	// CalibrationBudget is the time spent measuring one provider's
	// throughput at registration, split over its algorithms and the
	// CalibrationSizes. Default 20ms.
	CalibrationBudget time.Duration
	// Hysteresis is the margin by which a newly registered provider must be
	// faster than a binding's current one before the binding moves to it.
	// Zero selects the default 0.10; a negative value means no margin.
	Hysteresis float64
	// RequestTimeout is how long a request may stay on a provider without
	// completing before the framework treats it as a fault (checked every
	// RequestTimeout/8, so the effective limit is 7/8 to 9/8 of it). It also
	// bounds how long a retired session may take to drain before it is
	// closed, and (×5, at least 2s) each self-test and calibration batch.
	// Default 200ms.
	RequestTimeout time.Duration
	// CloseTimeout bounds a faulted or retired session's Close; requests
	// the provider still has not released then are abandoned (delivered
	// with ErrAbandoned). Default 2s.
	CloseTimeout time.Duration
	// QueueDepth is the maximum number of accepted, undelivered requests
	// per binding; Submit accepts no more (backpressure). Rounded up to a
	// power of two. Default 512.
	QueueDepth int
	// MaxRetries is how many times a request that failed with StatusError
	// is resubmitted before it is delivered as failed. Default 3.
	MaxRetries int
	// SkipSelfTests skips the known-answer self-tests at registration (for
	// tests of the framework itself). Production leaves it false:
	// nothing is skipped by default.
	SkipSelfTests bool
	// Logger receives admission, fault and rebind events. Default
	// slog.Default(). Keys are never logged.
	Logger *slog.Logger
	// OnRebind, if set, is called after a binding's session moved from
	// one provider to another ("" means unbound). It runs on the goroutine
	// doing the rebind, must not block, and must not call Deregister.
	OnRebind func(binding uint64, alg Algorithm, from, to string)
}

func (o *Options) setDefaults() {
	if o.CalibrationBudget <= 0 {
		o.CalibrationBudget = 20 * time.Millisecond
	}
	if o.Hysteresis == 0 {
		o.Hysteresis = 0.10
	} else if o.Hysteresis < 0 {
		o.Hysteresis = 0
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 200 * time.Millisecond
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 2 * time.Second
	}
	if o.QueueDepth <= 0 {
		o.QueueDepth = 512
	}
	d := 1
	for d < o.QueueDepth {
		d <<= 1
	}
	o.QueueDepth = d
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// tieMargin: measured throughputs within 2% of each other are a tie,
// which the static priority breaks.
const tieMargin = 0.02

const nShards = 256

// Framework admits providers (self-tests, calibration), binds sessions to
// the fastest admitted provider and rebinds them live. All methods are
// safe for concurrent use. The data path (Binding.Submit and completions)
// takes only per-binding locks; Bind and Binding.Close take a per-shard
// lock of the binding table and read the provider table lock-free.
type Framework struct {
	opts Options
	log  *slog.Logger

	// mu guards the provider table and snapshot publication (control
	// path only: Register, Deregister, faults).
	mu          sync.Mutex
	provs       map[string]*provEntry
	registering map[string]bool
	removed     map[string]string // see Removed
	closed      atomic.Bool       // set under mu; read lock-free by Bind

	snap   atomic.Pointer[snapshot]
	shards [nShards]bindShard
	// rings recycles the per-binding request rings (QueueDepth pointers)
	// and delivery scratch, which dominate the cost of Bind otherwise.
	rings sync.Pool
	// nextID is the one shared counter Bind writes (IDs stay in creation
	// order). It has cache lines to itself, so that its writes do not
	// invalidate the lines of the fields every Bind and Close read.
	_      [cacheLine]byte
	nextID atomic.Uint64
	_      [cacheLine - 8]byte

	epoch time.Time
	clock atomic.Int64 // coarse monotonic ns since epoch, set by the watchdog

	stop     chan struct{}
	stopOnce sync.Once
	wdDone   chan struct{}

	// measure calibrates a provider at registration: f.calibrate, except
	// in tests of the selection, which need exact figures.
	measure func(ctx context.Context, p Provider, caps []Capability) (map[Algorithm][len(CalibrationSizes)]float64, string, error)

	bgMu      sync.Mutex
	bgStopped bool           // guarded by bgMu; set by Close before bg.Wait
	bg        sync.WaitGroup // retire and maintenance goroutines
}

// goBG runs fn on a new goroutine that Close waits for (unless Close is
// already waiting, in which case fn still runs, untracked).
func (f *Framework) goBG(fn func()) {
	f.bgMu.Lock()
	if f.bgStopped {
		f.bgMu.Unlock()
		go fn()
		return
	}
	f.bg.Add(1)
	f.bgMu.Unlock()
	go func() {
		defer f.bg.Done()
		fn()
	}()
}

// cacheLine is the cache line size that padding assumes (64 bytes on
// amd64 and arm64; two lines are used where adjacent-line prefetch would
// pair them).
const cacheLine = 64

// bindShard is one shard of the binding table. Shards are two cache lines
// apart, so that whatever the Framework's alignment, two shards' mutexes
// never share a line: bindings with consecutive IDs, created and closed on
// different CPUs, touch independent lines.
type bindShard struct {
	mu sync.Mutex
	m  map[uint64]*Binding
	_  [2*cacheLine - 16]byte
}

// nCounterShards is the number of cache-line-padded parts of a
// shardedCounter.
const nCounterShards = 8

// shardedCounter is a counter split over cache lines, for counts that
// every session creation and close updates (a single atomic would be a
// line that all CPUs creating sessions fight over). A given key always
// updates the same part, so that a decrement is never seen without the
// increment it pairs with: each part, and so any sum of parts read one
// after the other, is never below the number of live items it counts.
type shardedCounter struct {
	parts [nCounterShards]struct {
		n atomic.Int64
		_ [cacheLine - 8]byte
	}
}

func (c *shardedCounter) add(key uint64, d int64) { c.parts[key%nCounterShards].n.Add(d) }

func (c *shardedCounter) load() int64 {
	var t int64
	for i := range c.parts {
		t += c.parts[i].n.Load()
	}
	return t
}

// snapshot is the immutable selection table published on every provider
// state change.
type snapshot struct {
	provs  []*provEntry // all known providers, sorted by name
	byName map[string]*provEntry
	best   map[Algorithm]*provEntry
}

type provEntry struct {
	p        Provider
	info     ProviderInfo
	caps     []Capability
	capSet   map[Algorithm]Capability
	selfTest SelfTestResult
	tput     map[Algorithm][len(CalibrationSizes)]float64

	state atomic.Int32 // index into stateNames
	// sessions counts open sessions, keyed by binding ID (padded: it is
	// written by every Bind and Close on this provider).
	_          [cacheLine]byte
	sessions   shardedCounter
	rebindsIn  atomic.Uint64
	rebindsOut atomic.Uint64
	faults     atomic.Uint64

	faultMu   sync.Mutex
	lastFault string
}

const (
	stOK int32 = iota
	stQuarantined
	stDegraded
	stUnloading
	stRemoved
)

var stateNames = [...]ProviderState{StateOK, StateQuarantined, StateDegraded, StateUnloading, "removed"}

func (e *provEntry) name() string { return e.info.Name }

// score is the figure selection compares: throughput at 1420 bytes.
func (e *provEntry) score(a Algorithm) float64 {
	t := e.tput[a]
	return t[len(t)-1]
}

// New returns a running Framework. Close stops it.
func New(opts Options) *Framework {
	opts.setDefaults()
	f := &Framework{
		opts:        opts,
		log:         opts.Logger,
		provs:       map[string]*provEntry{},
		registering: map[string]bool{},
		removed:     map[string]string{},
		epoch:       time.Now(),
		stop:        make(chan struct{}),
		wdDone:      make(chan struct{}),
	}
	for i := range f.shards {
		f.shards[i].m = map[uint64]*Binding{}
	}
	f.measure = f.calibrate
	depth := opts.QueueDepth
	f.rings.New = func() any {
		return &bindingBufs{ring: make([]*Request, depth), out: make([]*Request, 0, 64)}
	}
	f.snap.Store(&snapshot{best: map[Algorithm]*provEntry{}, byName: map[string]*provEntry{}})
	go f.watchdog()
	return f
}

// Options returns the effective options (defaults applied).
func (f *Framework) Options() Options { return f.opts }

func (f *Framework) now() int64 { return int64(time.Since(f.epoch)) }

// Register admits p: it runs the known-answer self-tests of every
// algorithm p claims through p's own sessions, then calibrates p's
// throughput at CalibrationSizes. A provider that fails is listed in
// Providers as quarantined with the failing vector named, is never bound,
// and Register returns an error wrapping ErrQuarantined. On success the
// provider becomes bindable and every binding for which it is faster than
// the binding's current provider by more than Options.Hysteresis (or which
// is unbound) is rebound to it before Register returns. Registering a name
// that is already admitted fails; a quarantined name may register again.
func (f *Framework) Register(ctx context.Context, p Provider) error {
	info := p.Info()
	name := info.Name
	if name == "" {
		return errors.New("crypto: register: provider has no name")
	}
	caps := p.Capabilities()
	f.mu.Lock()
	if f.closed.Load() {
		f.mu.Unlock()
		return fmt.Errorf("crypto: register %q: %w", name, ErrClosed)
	}
	if old, ok := f.provs[name]; (ok && old.state.Load() != stQuarantined) || f.registering[name] {
		f.mu.Unlock()
		return fmt.Errorf("crypto: register %q: provider already registered", name)
	}
	f.registering[name] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.registering, name)
		f.mu.Unlock()
	}()

	e := &provEntry{p: p, info: info, caps: caps, capSet: map[Algorithm]Capability{}}
	for _, c := range caps {
		e.capSet[c.Alg] = c
	}
	var admitErr error
	for _, c := range caps {
		if err := c.Alg.Validate(); err != nil {
			e.selfTest = SelfTestResult{FailedVector: c.Alg.String() + ": capability", Error: err.Error()}
			admitErr = err
			break
		}
	}
	if admitErr == nil {
		if f.opts.SkipSelfTests {
			e.selfTest = SelfTestResult{Passed: true, Skipped: true}
		} else {
			e.selfTest = f.selfTest(ctx, p, caps)
			if !e.selfTest.Passed {
				admitErr = errors.New(e.selfTest.Error)
			}
		}
	}
	if admitErr == nil {
		tput, vec, err := f.measure(ctx, p, caps)
		if err != nil {
			e.selfTest.Passed = false
			e.selfTest.FailedVector = vec
			e.selfTest.Error = err.Error()
			admitErr = err
		}
		e.tput = tput
	}
	if admitErr != nil {
		e.state.Store(stQuarantined)
		f.mu.Lock()
		f.provs[name] = e
		f.publishLocked()
		f.mu.Unlock()
		f.log.Warn("crypto: provider quarantined", "provider", name, "vector", e.selfTest.FailedVector, "error", e.selfTest.Error)
		if ctx.Err() != nil {
			return fmt.Errorf("crypto: register %q: %w (%w)", name, ErrQuarantined, ctx.Err())
		}
		return fmt.Errorf("crypto: register %q: %w: %s: %s", name, ErrQuarantined, e.selfTest.FailedVector, e.selfTest.Error)
	}
	f.mu.Lock()
	if f.closed.Load() {
		f.mu.Unlock()
		return fmt.Errorf("crypto: register %q: %w", name, ErrClosed)
	}
	e.state.Store(stOK)
	f.provs[name] = e
	delete(f.removed, name)
	f.publishLocked()
	f.mu.Unlock()
	f.log.Info("crypto: provider admitted", "provider", name, "kind", info.Kind.String(), "algorithms", len(caps))

	// Move bindings that the new provider serves better.
	moved := f.maintainAll(func(b *Binding) bool {
		_, ok := e.capSet[b.alg]
		return ok
	})
	if moved > 0 {
		f.log.Info("crypto: bindings rebound", "provider", name, "count", moved)
	}
	return nil
}

// Deregister migrates every binding off the named provider (to the best
// remaining provider, or to unbound if none supports its algorithm), waits
// until the provider's sessions have drained their in-flight requests and
// are closed, then removes it. While it runs the provider is listed as
// unloading and is never selected. Deregister blocks: it must not be
// called from inside a provider's Submit, Close or completion callback (use
// ReportFault there, or call Deregister from another goroutine). To refuse
// instead of leaving bindings unbound, use DeregisterUnused.
func (f *Framework) Deregister(ctx context.Context, name string) error {
	return f.deregister(ctx, name, nil)
}

// deregister implements Deregister and, with leaving not nil (the
// providers leaving together, name included), DeregisterUnused.
func (f *Framework) deregister(ctx context.Context, name string, leaving []string) error {
	f.mu.Lock()
	e := f.provs[name]
	if e == nil {
		f.mu.Unlock()
		return fmt.Errorf("crypto: deregister %q: %w", name, ErrNoProvider)
	}
	if leaving != nil {
		if err := f.checkRemoveLocked(leaving); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	prev := e.state.Swap(stUnloading)
	f.publishLocked()
	f.mu.Unlock()
	if prev != stQuarantined {
		f.log.Info("crypto: provider unloading", "provider", name)
	}
	for {
		f.maintainAll(func(b *Binding) bool {
			w := b.curp.Load()
			return w != nil && w.prov == e
		})
		if e.sessions.load() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("crypto: deregister %q: %d sessions still draining: %w", name, e.sessions.load(), ctx.Err())
		case <-time.After(200 * time.Microsecond):
		}
	}
	f.mu.Lock()
	if f.provs[name] == e {
		delete(f.provs, name)
		if e.faults.Load() > 0 {
			e.faultMu.Lock()
			f.removed[name] = e.lastFault
			e.faultMu.Unlock()
		}
	}
	e.state.Store(stRemoved)
	f.publishLocked()
	f.mu.Unlock()
	f.log.Info("crypto: provider removed", "provider", name)
	return nil
}

// ReportFault records a fault of the named provider (for example a
// virtio device that died): the provider is marked degraded and every
// binding on it is rebound to the best other provider, in the background.
// Requests that the provider completes with StatusError are retried on the
// new provider. ReportFault never blocks and may be called from any
// goroutine, including from inside the provider's Submit or completion.
// Unknown names are ignored.
func (f *Framework) ReportFault(name string, err error) {
	if e := f.snap.Load().byName[name]; e != nil {
		f.fault(e, err)
	}
}

func (f *Framework) fault(e *provEntry, err error) {
	e.faults.Add(1)
	msg := "fault"
	if err != nil {
		msg = err.Error()
	}
	e.faultMu.Lock()
	e.lastFault = msg
	e.faultMu.Unlock()
	if !e.state.CompareAndSwap(stOK, stDegraded) {
		// Already degraded (or leaving): its bindings were kicked then.
		return
	}
	f.mu.Lock()
	f.publishLocked()
	f.mu.Unlock()
	f.log.Warn("crypto: provider degraded", "provider", e.name(), "error", msg)
	// One background migration for all of the provider's bindings (not a
	// goroutine per binding: a thousand of them creating sessions at once
	// would starve the traffic of every other binding).
	f.goBG(func() {
		f.maintainAll(func(b *Binding) bool {
			w := b.curp.Load()
			return w != nil && w.prov == e
		})
	})
}

// publishLocked rebuilds the selection snapshot. f.mu must be held.
func (f *Framework) publishLocked() {
	s := &snapshot{best: map[Algorithm]*provEntry{}, byName: make(map[string]*provEntry, len(f.provs))}
	for n, e := range f.provs {
		s.provs = append(s.provs, e)
		s.byName[n] = e
	}
	slices.SortFunc(s.provs, func(a, b *provEntry) int { return cmp.Compare(a.name(), b.name()) })
	for _, e := range s.provs {
		for a := range e.capSet {
			if better(e, s.best[a], a) {
				s.best[a] = e
			}
		}
	}
	f.snap.Store(s)
}

// better reports whether a is a better choice than b for alg: ok beats
// degraded; then measured throughput (outside tieMargin), then priority,
// then name. Quarantined, unloading and removed providers never win.
func better(a, b *provEntry, alg Algorithm) bool {
	sa := a.state.Load()
	if sa != stOK && sa != stDegraded {
		return false
	}
	if b == nil {
		return true
	}
	sb := b.state.Load()
	if sb != stOK && sb != stDegraded {
		return true
	}
	if sa != sb {
		return sa == stOK
	}
	ta, tb := a.score(alg), b.score(alg)
	if ta > tb*(1+tieMargin) {
		return true
	}
	if tb > ta*(1+tieMargin) {
		return false
	}
	if a.info.Priority != b.info.Priority {
		return a.info.Priority > b.info.Priority
	}
	return a.name() < b.name()
}

// shouldMove reports whether a binding on cur should move to target.
func (f *Framework) shouldMove(cur, target *provEntry, alg Algorithm) bool {
	if target == nil || target == cur {
		return false
	}
	if cur == nil {
		return true
	}
	switch cur.state.Load() {
	case stOK:
	case stDegraded:
		return target.state.Load() == stOK
	default:
		return true
	}
	return target.state.Load() == stOK && target.score(alg) > cur.score(alg)*(1+f.opts.Hysteresis)
}

func (f *Framework) allBindings() []*Binding {
	var out []*Binding
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		for _, b := range sh.m {
			out = append(out, b)
		}
		sh.mu.Unlock()
	}
	return out
}

// Providers returns a status snapshot of every known provider (admitted,
// quarantined, degraded or unloading), sorted by name.
func (f *Framework) Providers() []ProviderStatus {
	s := f.snap.Load()
	out := make([]ProviderStatus, 0, len(s.provs))
	for _, e := range s.provs {
		ps := ProviderStatus{
			Name:         e.info.Name,
			Kind:         e.info.Kind,
			Priority:     e.info.Priority,
			Emulated:     e.info.Emulated,
			Params:       cloneMap(e.info.Params),
			Capabilities: append([]Capability(nil), e.caps...),
			State:        stateNames[e.state.Load()],
			SelfTest:     e.selfTest,
			Sessions:     e.sessions.load(),
			RebindsIn:    e.rebindsIn.Load(),
			RebindsOut:   e.rebindsOut.Load(),
			Faults:       e.faults.Load(),
		}
		e.faultMu.Lock()
		ps.LastFault = e.lastFault
		e.faultMu.Unlock()
		for _, c := range e.caps {
			t, ok := e.tput[c.Alg]
			if !ok {
				continue
			}
			for i, size := range CalibrationSizes {
				ps.Throughput = append(ps.Throughput, Throughput{Alg: c.Alg, Size: size, BytesPerSec: t[i]})
			}
		}
		out = append(out, ps)
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Bindings returns a status snapshot of every open binding, by ID.
func (f *Framework) Bindings() []BindingStatus {
	bs := f.allBindings()
	slices.SortFunc(bs, func(a, b *Binding) int { return cmp.Compare(a.id, b.id) })
	out := make([]BindingStatus, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.Status())
	}
	return out
}

// Best returns the name of the provider a new binding for alg would use,
// or "" if none.
func (f *Framework) Best(alg Algorithm) string {
	if e := f.snap.Load().best[alg]; e != nil {
		return e.name()
	}
	return ""
}

// Close stops the framework: Bind and Register fail with ErrClosed, every
// provider is deregistered (its bindings become unbound and fail new
// requests with ErrNoProvider) and background work is waited for, within
// ctx. Open bindings must still be closed by their owners. Close is
// idempotent.
func (f *Framework) Close(ctx context.Context) error {
	f.mu.Lock()
	f.closed.Store(true)
	names := make([]string, 0, len(f.provs))
	for n := range f.provs {
		names = append(names, n)
	}
	f.mu.Unlock()
	slices.Sort(names)
	var errs []error
	for _, n := range names {
		if err := f.Deregister(ctx, n); err != nil && !errors.Is(err, ErrNoProvider) {
			errs = append(errs, err)
		}
	}
	f.stopOnce.Do(func() { close(f.stop) })
	<-f.wdDone
	f.bgMu.Lock()
	f.bgStopped = true
	f.bgMu.Unlock()
	done := make(chan struct{})
	go func() { f.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("crypto: close: background work: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// watchdog keeps the coarse clock, detects requests that exceed
// RequestTimeout (a fault of their provider) and resubmits requests whose
// retry was refused by backpressure.
func (f *Framework) watchdog() {
	defer close(f.wdDone)
	tick := f.opts.RequestTimeout / 8
	if tick < time.Millisecond {
		tick = time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	f.clock.Store(f.now())
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		now := f.now()
		f.clock.Store(now)
		for _, b := range f.allBindings() {
			b.check(now)
		}
	}
}
