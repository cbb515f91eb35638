package modules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Loader loads and unloads modules of a catalog, kld style.
//
// Reference counting follows kldstat: a module's Refs is 1 if it was
// requested by name (Load, LoadList, LoadOne: the "user" reference) plus
// one per loaded or loading module that depends on it. A module pulled in
// only as a dependency is unloaded again, best effort, when its last holder
// leaves.
//
// Concurrency: all methods are safe for concurrent use. No lock is held
// while hooks run; instead each Load or Unload call owns the modules it is
// changing until it returns, and another call that needs one of them waits
// for it (honouring its ctx). Loads and unloads of the same module are thus
// serialized, while calls on unrelated modules run in parallel. Hooks must
// not call Load, LoadList, LoadOne or Unload on the Loader running them
// (ErrReentrant).
type Loader struct {
	cat *catalog
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	recs   map[string]*record
	nextID int
	subs   map[*Subscription]struct{}
}

// Option configures a Loader.
type Option func(*Loader)

// WithCatalog makes the Loader use mods instead of the global catalog
// (isolated tests, tools). The descriptors are validated and copied like
// Register does; an invalid or duplicate descriptor panics.
func WithCatalog(mods []Module) Option {
	c := newCatalog()
	for _, m := range mods {
		if err := c.add(m); err != nil {
			panic("modules: WithCatalog: " + err.Error())
		}
	}
	return func(l *Loader) { l.cat = c }
}

// WithLogger sets the logger for forced unloads, ignored soft orderings and
// best-effort cleanups. nil discards. The default is slog.Default().
func WithLogger(log *slog.Logger) Option {
	return func(l *Loader) {
		if log == nil {
			log = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		l.log = log
	}
}

// NewLoader returns a Loader with nothing loaded, using the global catalog
// (looked up at each Load, so it sees every module registered from init())
// unless WithCatalog says otherwise.
func NewLoader(opts ...Option) *Loader {
	l := &Loader{
		cat:  global,
		log:  slog.Default(),
		now:  time.Now,
		recs: make(map[string]*record),
		subs: make(map[*Subscription]struct{}),
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// record is a module present in the loader's table (loading, loaded or
// unloading). Fields are guarded by Loader.mu; mod is immutable.
type record struct {
	mod      Module
	id       int
	state    State
	explicit bool
	holders  map[string]struct{}
	loadedAt time.Time
	last     EventType // last event published for it (0: none yet)
	lastAt   time.Time
	owner    *call // non-nil while a call is changing the module
}

// call is one Load or Unload in progress; done is closed when it releases
// the records it owns.
type call struct{ done chan struct{} }

func newCall() *call { return &call{done: make(chan struct{})} }

func (r *record) refs() int {
	n := len(r.holders)
	if r.explicit {
		n++
	}
	return n
}

func (r *record) holderNames() []string {
	return slices.Sorted(maps.Keys(r.holders))
}

func (r *record) event(t EventType, at time.Time, snapshot bool) Event {
	return Event{Type: t, Module: r.mod.Name, Kind: r.mod.Kind, Version: r.mod.Version, Time: at, Snapshot: snapshot}
}

// publishLocked records and sends an event for r. l.mu must be held.
func (l *Loader) publishLocked(r *record, t EventType, forced, aborted bool) {
	now := l.now()
	r.last, r.lastAt = t, now
	e := r.event(t, now, false)
	e.Forced, e.Aborted = forced, aborted
	for s := range l.subs {
		s.push(e)
	}
}

// hookMark tags the ctx given to hooks so that re-entrant calls are caught.
type hookMark struct {
	l      *Loader
	active atomic.Bool
}

type hookKey struct{}

func (l *Loader) inHook(ctx context.Context) bool {
	m, ok := ctx.Value(hookKey{}).(*hookMark)
	return ok && m.l == l && m.active.Load()
}

// runHook calls f (if any) with a marked ctx, turning a panic into an error.
func (l *Loader) runHook(ctx context.Context, name, op string, f func(context.Context) error) (err error) {
	if f == nil {
		return nil
	}
	m := &hookMark{l: l}
	m.active.Store(true)
	defer m.active.Store(false)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
		if err != nil {
			err = &HookError{Module: name, Op: op, Err: err}
		}
	}()
	return f(context.WithValue(ctx, hookKey{}, m))
}

// wait blocks until c releases its modules or ctx ends.
func wait(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Load loads the named modules and, first, their hard dependencies, in an
// order computed with gonum (dependencies first, soft Pre/Post honoured
// among the modules of this call and ties broken by name, so the order of
// names does not matter). The ctx is passed to every Load hook. Duplicate
// names are allowed; no names is a no-op.
//
// A named module that is already loaded is not loaded again: no hook runs
// and no event is sent, as with kldload -n (FreeBSD kldload without -n
// reports EEXIST: see LoadOne). Load still returns nil for it; if it was
// present only as a dependency it gains its user reference, so it stays
// loaded when its dependents leave.
//
// Errors (wrapped as "modules: load: ..."): every unknown module
// (ErrUnknown, listing the known ones), every version mismatch
// (ErrVersion, e.g. "ipsec requires crypto >= 2, have 1"), a dependency
// cycle with its path (ErrCycle), a failed Load hook (ErrLoadFailed, with
// the hook's error), ctx ending (its cause), or ErrReentrant. Nothing is
// loaded when planning fails. When a hook fails partway, the modules this
// call loaded are unloaded again in reverse order (their Unload hooks run
// with ctx's values but without its cancellation; a refusal is overridden
// and logged), so no half-applied load remains.
func (l *Loader) Load(ctx context.Context, names ...string) error {
	_, err := l.load(ctx, names)
	return err
}

// LoadOne loads name like Load and returns its kldstat id. Like kldload(2),
// if name was already loaded it returns its id and an error wrapping
// ErrExist (nothing else happens: no hook, no event, no extra reference
// except the user reference of a module that was only a dependency).
func (l *Loader) LoadOne(ctx context.Context, name string) (int, error) {
	already, err := l.load(ctx, []string{name})
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	id := 0
	if r := l.recs[name]; r != nil {
		id = r.id
	}
	l.mu.Unlock()
	if len(already) > 0 {
		return id, fmt.Errorf("modules: load: %s: %w", name, ErrExist)
	}
	return id, nil
}

// LoadList loads an rc.conf kld_list: white-space separated names, loaded
// in dependency order whatever their order in list. As with rc.d/kld, an
// entry may be a file name or path ("/boot/modules/aesni.ko" means aesni).
// Semantics and errors are those of Load.
func (l *Loader) LoadList(ctx context.Context, list string) error {
	f := strings.Fields(list)
	for i, s := range f {
		n := strings.TrimSuffix(s[strings.LastIndexByte(s, '/')+1:], ".ko")
		if n == "" {
			return fmt.Errorf("modules: load: kld_list entry %q names no module: %w", s, ErrUnknown)
		}
		f[i] = n
	}
	return l.Load(ctx, f...)
}

// load implements Load and returns the requested names that were already
// loaded.
func (l *Loader) load(ctx context.Context, names []string) (already []string, err error) {
	if l.inHook(ctx) {
		return nil, fmt.Errorf("modules: load: %w", ErrReentrant)
	}
	if len(names) == 0 {
		return nil, nil
	}
	requested := make(map[string]bool, len(names))
	for _, n := range names {
		requested[n] = true
	}
	p, err := plan(l.cat, names)
	if err != nil {
		return nil, fmt.Errorf("modules: load: %w", err)
	}
	for _, d := range p.dropped {
		l.log.Warn("modules: soft ordering ignored, it contradicts hard dependencies",
			"before", d.before, "after", d.after)
	}

	c := newCall()
	var toLoad []*record
	var pinned []*record
	for {
		l.mu.Lock()
		if w := l.conflictLocked(p.order); w != nil {
			l.mu.Unlock()
			if err := wait(ctx, w); err != nil {
				return nil, fmt.Errorf("modules: load: %w", err)
			}
			continue
		}
		// Reserve atomically: absent modules become "loading", owned by c,
		// and hold their dependencies, so nothing we need can leave.
		for _, m := range p.order {
			if r := l.recs[m.Name]; r != nil {
				if requested[m.Name] {
					already = append(already, m.Name)
					if !r.explicit {
						r.explicit = true
						pinned = append(pinned, r)
					}
				}
				continue
			}
			l.nextID++
			r := &record{mod: m, id: l.nextID, state: StateLoading, explicit: requested[m.Name],
				holders: make(map[string]struct{}), owner: c}
			l.recs[m.Name] = r
			for _, d := range m.Depends {
				l.recs[d.Name].holders[m.Name] = struct{}{}
			}
			toLoad = append(toLoad, r)
		}
		l.mu.Unlock()
		break
	}

	for i, r := range toLoad {
		err := context.Cause(ctx)
		if err == nil {
			err = l.runHook(ctx, r.mod.Name, "load", r.mod.Load)
		}
		if err != nil {
			l.rollback(ctx, c, toLoad[:i], toLoad[i:], pinned)
			return nil, fmt.Errorf("modules: load: %w", err)
		}
		l.mu.Lock()
		r.state = StateLoaded
		r.loadedAt = l.now()
		l.publishLocked(r, Loaded, false, false)
		l.mu.Unlock()
	}
	l.mu.Lock()
	for _, r := range toLoad {
		r.owner = nil
	}
	l.mu.Unlock()
	close(c.done)
	return already, nil
}

// conflictLocked returns a call that owns a module of order, or one loading
// or unloading a module with which order has a soft ordering (so that Pre
// and Post also hold against concurrent loads). l.mu must be held.
func (l *Loader) conflictLocked(order []Module) *call {
	in := make(map[string]bool, len(order))
	for _, m := range order {
		in[m.Name] = true
	}
	for _, m := range order {
		if r := l.recs[m.Name]; r != nil && r.owner != nil {
			return r.owner
		}
		for _, s := range slices.Concat(m.Pre, m.Post) {
			if r := l.recs[s]; r != nil && r.owner != nil {
				return r.owner
			}
		}
	}
	for _, r := range l.recs {
		if r.owner == nil {
			continue
		}
		for _, s := range slices.Concat(r.mod.Pre, r.mod.Post) {
			if in[s] {
				return r.owner
			}
		}
	}
	return nil
}

// rollback undoes a failed load: records never loaded are dropped, loaded
// ones are unloaded in reverse order, user references taken are returned,
// and dependencies left without holders are collected.
func (l *Loader) rollback(ctx context.Context, c *call, loaded, notLoaded, pinned []*record) {
	uctx := context.WithoutCancel(ctx)
	var freed []string
	l.mu.Lock()
	for _, r := range pinned {
		r.explicit = false
		freed = append(freed, r.mod.Name)
	}
	for _, r := range slices.Backward(notLoaded) {
		freed = append(freed, l.removeLocked(r)...)
	}
	l.mu.Unlock()
	for _, r := range slices.Backward(loaded) {
		l.mu.Lock()
		r.state = StateUnloading
		l.publishLocked(r, Unloading, false, false)
		l.mu.Unlock()
		hctx := withUnload(uctx, UnloadContext{Leaving: []string{r.mod.Name}, Forced: true})
		if err := l.runHook(hctx, r.mod.Name, "unload", r.mod.Unload); err != nil {
			l.log.Warn("modules: rolling back a failed load, unload refusal overridden",
				"module", r.mod.Name, "err", err)
		}
		l.mu.Lock()
		freed = append(freed, l.removeLocked(r)...)
		l.publishLocked(r, Unloaded, false, false)
		l.mu.Unlock()
	}
	close(c.done)
	l.collect(uctx, freed)
}

// removeLocked deletes r from the table and from its dependencies' holders,
// returning those dependencies. l.mu must be held.
func (l *Loader) removeLocked(r *record) []string {
	delete(l.recs, r.mod.Name)
	r.owner = nil
	var deps []string
	for _, d := range r.mod.Depends {
		if dr := l.recs[d.Name]; dr != nil {
			delete(dr.holders, r.mod.Name)
			deps = append(deps, d.Name)
		}
	}
	return deps
}

// collect unloads, best effort and unforced, the modules among names (and
// then their own dependencies) that are loaded only as dependencies and no
// longer held. A refusal leaves the module loaded with zero refs (it can be
// unloaded by name later) and is logged.
func (l *Loader) collect(ctx context.Context, names []string) {
	refused := make(map[string]bool)
	for len(names) > 0 {
		l.mu.Lock()
		var r *record
		for _, n := range names {
			x := l.recs[n]
			if x != nil && !x.explicit && len(x.holders) == 0 && x.owner == nil &&
				x.state == StateLoaded && !refused[n] && (r == nil || x.id > r.id) {
				r = x
			}
		}
		if r == nil {
			l.mu.Unlock()
			return
		}
		c := newCall()
		r.owner = c
		r.state = StateUnloading
		l.publishLocked(r, Unloading, false, false)
		l.mu.Unlock()
		hctx := withUnload(ctx, UnloadContext{Leaving: []string{r.mod.Name}})
		err := l.runHook(hctx, r.mod.Name, "unload", r.mod.Unload)
		l.mu.Lock()
		if err != nil {
			r.state, r.owner = StateLoaded, nil
			l.publishLocked(r, Loaded, false, true)
			refused[r.mod.Name] = true
			l.log.Warn("modules: unused dependency refused to unload; it stays loaded",
				"module", r.mod.Name, "err", err)
		} else {
			names = append(names, l.removeLocked(r)...)
			l.publishLocked(r, Unloaded, false, false)
		}
		l.mu.Unlock()
		close(c.done)
	}
}

// UnloadOption modifies Unload.
type UnloadOption func(*unloadOpts)

type unloadOpts struct{ force bool }

// Force makes Unload override refusals (kldunload -f): the modules holding
// the target are unloaded first, dependents before dependencies, and Unload
// hook errors are ignored. Every forced unload is logged at Warn level and
// its events carry Forced.
func Force() UnloadOption { return func(o *unloadOpts) { o.force = true } }

// Unload unloads the named module; it is UnloadAll with one name.
func (l *Loader) Unload(ctx context.Context, name string, opts ...UnloadOption) error {
	return l.UnloadAll(ctx, []string{name}, opts...)
}

// UnloadAll unloads the named modules as a whole (kldunload a b), all or
// nothing. Their hooks run with ctx, dependents before dependencies; if
// it has to wait for a load or unload of one of them in progress, it
// honours ctx. Duplicate names are allowed; no names is a no-op.
//
// Without Force it refuses, changing nothing, with a *BusyError
// (errors.Is ErrBusy) that names the holders while loaded or loading
// modules outside the set depend on a module of it, or that wraps the
// error of a Quiesce hook refusing (every module of the set is asked,
// with the whole set, before any Unload hook runs). An Unload hook that
// still refuses (its error wrapping ErrBusy gives a *BusyError, any other
// a *HookError) makes UnloadAll load again, in load order, the modules of
// the set it had already unloaded, so that the set stays loaded as a
// whole; since subscribers saw Unloading, the refusing module then gets
// a Loaded event with Aborted set, and the reloaded ones Unloaded then
// Loaded. A module that fails to load again is logged and left unloaded.
//
// With Force, the modules holding the set are unloaded first (and,
// transitively, theirs), Quiesce is skipped and Unload hook errors are
// ignored. Every forced unload is logged at Warn level and its events
// carry Forced. UnloadFromContext tells hooks which modules leave and
// whether the unload is forced.
//
// After the modules leave, their dependencies that were loaded only as
// dependencies and are no longer held are unloaded too (best effort, with
// ctx's values but not its cancellation). Naming a module that is not
// loaded returns an error wrapping ErrNotLoaded, and unloads nothing.
func (l *Loader) UnloadAll(ctx context.Context, names []string, opts ...UnloadOption) error {
	var o unloadOpts
	for _, f := range opts {
		f(&o)
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	what := strings.Join(names, ", ")
	if l.inHook(ctx) {
		return fmt.Errorf("modules: unload %s: %w", what, ErrReentrant)
	}
	if len(names) == 0 {
		return nil
	}
	c := newCall()
	var set []*record
	for {
		l.mu.Lock()
		set = set[:0]
		seen := map[string]bool{}
		for _, n := range names {
			r := l.recs[n]
			if r == nil {
				l.mu.Unlock()
				return fmt.Errorf("modules: unload: %s: %w", n, ErrNotLoaded)
			}
			set = append(set, r)
			seen[n] = true
		}
		if o.force {
			// The set and, transitively, everything holding it.
			for i := 0; i < len(set); i++ {
				for h := range set[i].holders {
					if !seen[h] {
						seen[h] = true
						set = append(set, l.recs[h])
					}
				}
			}
		}
		var w *call
		for _, x := range set {
			if x.owner != nil {
				w = x.owner
				break
			}
		}
		if w != nil {
			l.mu.Unlock()
			if err := wait(ctx, w); err != nil {
				return fmt.Errorf("modules: unload: %s: %w", what, err)
			}
			continue
		}
		if !o.force {
			for _, r := range set {
				var outside []string
				for _, h := range r.holderNames() {
					if !seen[h] {
						outside = append(outside, h)
					}
				}
				if len(outside) > 0 {
					l.mu.Unlock()
					return fmt.Errorf("modules: unload: %w", &BusyError{Module: r.mod.Name, Holders: outside})
				}
			}
		}
		// A dependent always has a higher id than its dependencies.
		slices.SortFunc(set, func(a, b *record) int { return b.id - a.id })
		for _, x := range set {
			x.owner = c
		}
		if o.force {
			l.log.Warn("modules: forced unload", "modules", what, "unloading", recordNames(set))
		}
		l.mu.Unlock()
		break
	}
	leaving := slices.Sorted(slices.Values(recordNames(set)))
	hctx := withUnload(ctx, UnloadContext{Leaving: leaving, Forced: o.force})
	release := func() {
		l.mu.Lock()
		for _, r := range set {
			if l.recs[r.mod.Name] == r {
				r.owner = nil
			}
		}
		l.mu.Unlock()
		close(c.done)
	}

	if !o.force {
		for _, r := range set {
			q := r.mod.Quiesce
			if q == nil {
				continue
			}
			err := l.runHook(hctx, r.mod.Name, "quiesce", func(ctx context.Context) error { return q(ctx, leaving) })
			var he *HookError
			if errors.As(err, &he) && errors.Is(he.Err, ErrBusy) {
				err = he.Err // "x is busy: <why>", not "x: quiesce hook: ..."
			}
			if err != nil {
				release()
				if errors.Is(err, ErrBusy) {
					return fmt.Errorf("modules: unload: %w", &BusyError{Module: r.mod.Name, Err: err})
				}
				return fmt.Errorf("modules: unload: %w", err)
			}
		}
	}

	var freed []string
	for i, r := range set {
		l.mu.Lock()
		r.state = StateUnloading
		l.publishLocked(r, Unloading, o.force, false)
		l.mu.Unlock()
		err := l.runHook(hctx, r.mod.Name, "unload", r.mod.Unload)
		if err != nil && !o.force {
			l.mu.Lock()
			r.state = StateLoaded
			l.publishLocked(r, Loaded, false, true)
			l.mu.Unlock()
			l.reload(ctx, set[:i])
			release()
			if errors.Is(err, ErrBusy) {
				return fmt.Errorf("modules: unload: %w", &BusyError{Module: r.mod.Name, Err: err})
			}
			return fmt.Errorf("modules: unload: %w", err)
		}
		if err != nil {
			l.log.Warn("modules: forced unload ignored the unload hook's refusal",
				"module", r.mod.Name, "err", err)
		}
		l.mu.Lock()
		freed = append(freed, l.removeLocked(r)...)
		r.owner = c // still this call's until it returns
		l.publishLocked(r, Unloaded, o.force, false)
		l.mu.Unlock()
	}
	l.mu.Lock()
	for _, r := range set {
		r.owner = nil
	}
	l.mu.Unlock()
	close(c.done)
	l.collect(context.WithoutCancel(ctx), freed)
	return nil
}

// reload undoes the unloads of gone (unloaded by the calling UnloadAll,
// dependents first): it puts each back in the table, dependencies first,
// with its id and references, and runs its Load hook again. A module that
// fails to load is logged and left out.
func (l *Loader) reload(ctx context.Context, gone []*record) {
	lctx := context.WithoutCancel(ctx)
	for _, r := range slices.Backward(gone) {
		l.mu.Lock()
		if l.recs[r.mod.Name] != nil {
			// Loaded anew by another call meanwhile: that one stays.
			l.mu.Unlock()
			continue
		}
		r.state = StateLoading
		l.recs[r.mod.Name] = r
		for _, d := range r.mod.Depends {
			if dr := l.recs[d.Name]; dr != nil {
				dr.holders[r.mod.Name] = struct{}{}
			}
		}
		l.mu.Unlock()
		err := l.runHook(lctx, r.mod.Name, "load", r.mod.Load)
		l.mu.Lock()
		if err != nil {
			l.removeLocked(r)
			l.mu.Unlock()
			l.log.Error("modules: a module unloaded by a refused unload did not load again; it stays unloaded",
				"module", r.mod.Name, "err", err)
			continue
		}
		r.state = StateLoaded
		r.loadedAt = l.now()
		l.publishLocked(r, Loaded, false, false)
		l.mu.Unlock()
	}
}

func recordNames(rs []*record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.mod.Name
	}
	return out
}

// Stat returns one kldstat-like row per module in the table (loading,
// loaded or unloading), ordered by id, which is assigned increasingly as
// modules are loaded. The rows are copies the caller owns.
func (l *Loader) Stat() []Stat {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Stat, 0, len(l.recs))
	for _, r := range l.recs {
		deps := make([]string, len(r.mod.Depends))
		for i, d := range r.mod.Depends {
			deps[i] = d.Name
		}
		out = append(out, Stat{
			ID: r.id, Refs: r.refs(), Name: r.mod.Name, Version: r.mod.Version,
			Kind: r.mod.Kind, State: r.state, LoadedAt: r.loadedAt,
			DependsOn: deps, Holders: r.holderNames(), Explicit: r.explicit,
			Description: r.mod.Description,
		})
	}
	slices.SortFunc(out, func(a, b Stat) int { return a.ID - b.ID })
	return out
}

// IsLoaded reports whether name is loaded: its Load hook has succeeded and
// its unload has not begun.
func (l *Loader) IsLoaded(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.recs[name]
	return r != nil && r.state == StateLoaded
}
