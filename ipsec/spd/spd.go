package spd

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultCacheEntries is the flow cache size used by New without
// WithCacheEntries: 65536 entries of 64 bytes (4 MiB), in 4-way buckets.
const DefaultCacheEntries = 1 << 16

// Option configures New.
type Option func(*config)

type config struct {
	cacheEntries int
}

// WithCacheEntries sets the flow cache size (rounded up to a power of two,
// at least 4). 0 disables the cache: every Lookup classifies.
func WithCacheEntries(n int) Option {
	return func(c *config) { c.cacheEntries = n }
}

// SPD is a Security Policy Database. All methods are safe for concurrent
// use: Lookup, LookupLinear, Classify, Policies and Generation never block
// and never see a half-applied change; Replace, Add, Delete and Flush are
// serialized with each other and publish a new immutable snapshot
// atomically. A *Policy returned by a lookup stays valid (and unchanged)
// after later changes, but no longer describes the SPD.
type SPD struct {
	mu    sync.Mutex // serializes writers
	tab   atomic.Pointer[table]
	cache *flowCache // nil when disabled
	seed  uint64
	gen   uint64 // last generation issued; guarded by mu
}

// New returns an empty SPD (every lookup misses).
func New(opts ...Option) *SPD {
	c := config{cacheEntries: DefaultCacheEntries}
	for _, o := range opts {
		o(&c)
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	s := &SPD{seed: binary.LittleEndian.Uint64(b[:]) | 1}
	if c.cacheEntries > 0 {
		s.cache = newFlowCache(c.cacheEntries)
	}
	s.gen = 1
	s.tab.Store(compile(nil, s.gen, s.seed))
	return s
}

// Validate checks a policy list as Replace would: every policy valid and no
// two policies with the same direction and (canonical) selector. It does not
// modify ps.
func Validate(ps []Policy) error {
	type key struct {
		d Dir
		s Selector
	}
	seen := make(map[key]int, len(ps))
	for i := range ps {
		p := &ps[i]
		if err := p.Validate(); err != nil {
			return fmt.Errorf("policy %d (%s): %w", i, p.Pos, err)
		}
		k := key{p.Dir, p.Sel.canonical()}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("policy %d (%s): %w: same selector and direction as policy %d (%s)", i, p.Pos, ErrExists, j, ps[j].Pos)
		}
		seen[k] = i
	}
	return nil
}

// Replace atomically swaps the whole policy list for a deep copy of ps, in
// order (Index is reassigned to the position in ps). If ps fails Validate,
// nothing changes and the error is returned. Cost is O(len(ps)).
func (s *SPD) Replace(ps []Policy) error {
	if err := Validate(ps); err != nil {
		return err
	}
	cp := make([]Policy, len(ps))
	for i := range ps {
		cp[i] = ps[i].clone()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked(cp)
	return nil
}

// Add appends p (a deep copy) as the last policy, like setkey spdadd. It
// fails with ErrExists if a policy with the same direction and selector is
// present, or with ErrInvalid. Each Add recompiles the classifier (O(n));
// use Replace for bulk loads.
func (s *SPD) Add(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.tab.Load().all
	sel := p.Sel.canonical()
	for i := range cur {
		if cur[i].Dir == p.Dir && cur[i].Sel == sel {
			return fmt.Errorf("%w: %s (from %s)", ErrExists, cur[i].String(), cur[i].Pos)
		}
	}
	ps := make([]Policy, len(cur), len(cur)+1)
	copy(ps, cur) // policies are immutable once published: sharing Requests is safe
	ps = append(ps, p.clone())
	s.publishLocked(ps)
	return nil
}

// Delete removes the policy with direction dir and selector sel, like
// setkey spddelete, or fails with ErrNotFound.
func (s *SPD) Delete(dir Dir, sel Selector) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.tab.Load().all
	sel = sel.canonical()
	for i := range cur {
		if cur[i].Dir == dir && cur[i].Sel == sel {
			ps := make([]Policy, 0, len(cur)-1)
			ps = append(ps, cur[:i]...)
			ps = append(ps, cur[i+1:]...)
			s.publishLocked(ps)
			return nil
		}
	}
	return fmt.Errorf("%w: %v -P %v", ErrNotFound, sel, dir)
}

// Flush removes every policy, like setkey spdflush.
func (s *SPD) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishLocked(nil)
}

// publishLocked canonicalizes and indexes ps (which it takes ownership of),
// compiles it and publishes it under a new generation.
func (s *SPD) publishLocked(ps []Policy) {
	for i := range ps {
		ps[i].Index = i
		ps[i].Sel = ps[i].Sel.canonical()
	}
	s.gen++
	s.tab.Store(compile(ps, s.gen, s.seed))
}

// Generation returns the generation of the current snapshot. It increases
// by at least one on every change (Replace, Add, Delete, Flush).
func (s *SPD) Generation() uint64 { return s.tab.Load().gen }

// Len returns the number of policies.
func (s *SPD) Len() int { return len(s.tab.Load().all) }

// Policies returns a deep copy of the policies in order.
func (s *SPD) Policies() []Policy {
	cur := s.tab.Load().all
	out := make([]Policy, len(cur))
	for i := range cur {
		out[i] = cur[i].clone()
	}
	return out
}

// Lookup returns the first policy of direction dir whose selector matches
// f, exactly as LookupLinear would, using the flow cache and, on a miss, the
// compiled classifier. It does not allocate. The returned policy must not
// be modified.
func (s *SPD) Lookup(dir Dir, f Flow) (*Policy, bool) {
	return s.lookup(s.tab.Load(), dir, f)
}

// View is one generation of an SPD, as View returned it: its lookups see
// that generation only, however the SPD changes after. The zero View
// has no policies.
type View struct {
	s *SPD
	t *table
}

// View returns the current generation of the SPD.
func (s *SPD) View() View { return View{s, s.tab.Load()} }

// Generation returns the view's generation (0 for the zero View).
func (v View) Generation() uint64 {
	if v.t == nil {
		return 0
	}
	return v.t.gen
}

// Lookup is SPD.Lookup on the view's generation (sharing the SPD's flow
// cache, whose entries are tagged by generation). It does not allocate.
func (v View) Lookup(dir Dir, f Flow) (*Policy, bool) {
	if v.t == nil {
		return nil, false
	}
	return v.s.lookup(v.t, dir, f)
}

func (s *SPD) lookup(t *table, dir Dir, f Flow) (*Policy, bool) {
	if dir >= numDirs {
		return nil, false
	}
	var k flowKey
	k.set(dir, &f)
	c := s.cache
	if c == nil {
		return t.result(t.classify(dir, &k))
	}
	h := k.hash(s.seed)
	if r, ok := c.get(h, &k, t.gen); ok {
		return t.result(r)
	}
	r := t.classify(dir, &k)
	c.put(h, &k, t.gen, r)
	return t.result(r)
}

// Classify is Lookup without the flow cache: it always runs the compiled
// classifier (the cache miss path). It does not allocate.
func (s *SPD) Classify(dir Dir, f Flow) (*Policy, bool) {
	t := s.tab.Load()
	if dir >= numDirs {
		return nil, false
	}
	var k flowKey
	k.set(dir, &f)
	return t.result(t.classify(dir, &k))
}

// LookupLinear is the reference first-match linear scan. It is O(n) and
// meant for tests, diagnostics and benchmarks.
func (s *SPD) LookupLinear(dir Dir, f Flow) (*Policy, bool) {
	t := s.tab.Load()
	for i := range t.all {
		p := &t.all[i]
		if p.Dir == dir && p.Sel.Matches(f) {
			return p, true
		}
	}
	return nil, false
}

// Stats describes the compiled classifier of the current snapshot.
type Stats struct {
	Generation   uint64
	Policies     int
	Tuples       [3]int // classifier hash tables, indexed by Dir
	CacheEntries int
}

// Stats returns classifier statistics, for status output and benchmarks.
func (s *SPD) Stats() Stats {
	t := s.tab.Load()
	st := Stats{Generation: t.gen, Policies: len(t.all)}
	for d := range t.dirs {
		st.Tuples[d] = len(t.dirs[d].tuples)
	}
	if s.cache != nil {
		st.CacheEntries = len(s.cache.ent)
	}
	return st
}
