package spd

import "sync/atomic"

// cacheEntry is one flow cache slot, exactly one 64-byte cache line. All
// fields are atomics so that the seqlock protocol is race-detector clean; on
// amd64 and arm64 atomic loads are plain loads.
//
// Protocol: a writer claims the entry by CAS-ing seq from even to odd, stores
// the fields and releases with seq+2. A reader loads seq (must be even), the
// fields, then seq again; if unchanged the fields are consistent. Readers
// never write, so hits on different CPUs do not contend. A writer that loses
// the CAS simply does not cache (it never waits).
type cacheEntry struct {
	seq atomic.Uint64
	w   [5]atomic.Uint64
	gen atomic.Uint64 // table generation the result belongs to; 0 = empty
	res atomic.Uint64 // policy index + 1; 0 = no matching policy
}

// cacheWays is the associativity of the flow cache.
const cacheWays = 4

// flowCache is a 4-way set-associative hashed flow cache. It is invalidated
// wholesale by generation: entries whose gen differs from the current
// table's are misses and are preferred victims. Within one generation a
// bucket fills from way 0 up, so a lookup stops at the first stale way (if a
// race breaks that order, the only effect is an extra miss: a hit always
// compares the full key and the generation).
type flowCache struct {
	ent   []cacheEntry
	bmask uint64 // bucket mask; bucket b is ent[4b : 4b+4]
}

func newFlowCache(n int) *flowCache {
	size := cacheWays
	for size < n {
		size <<= 1
	}
	return &flowCache{ent: make([]cacheEntry, size), bmask: uint64(size/cacheWays - 1)}
}

func (c *flowCache) get(h uint64, k *flowKey, gen uint64) (int32, bool) {
	b := (h & c.bmask) * cacheWays
	for i := range uint64(cacheWays) {
		e := &c.ent[b+i]
		s := e.seq.Load()
		if s&1 != 0 {
			continue
		}
		if e.gen.Load() != gen {
			return 0, false
		}
		if e.w[4].Load() != k.w[4] || e.w[0].Load() != k.w[0] ||
			e.w[1].Load() != k.w[1] || e.w[2].Load() != k.w[2] || e.w[3].Load() != k.w[3] {
			continue
		}
		r := e.res.Load()
		if e.seq.Load() != s {
			continue
		}
		return int32(r) - 1, true
	}
	return 0, false
}

func (c *flowCache) put(h uint64, k *flowKey, gen uint64, r int32) {
	b := (h & c.bmask) * cacheWays
	e := &c.ent[b+(h>>40)%cacheWays] // victim if all ways are current
	for i := range uint64(cacheWays) {
		if c.ent[b+i].gen.Load() != gen {
			e = &c.ent[b+i]
			break
		}
	}
	s := e.seq.Load()
	if s&1 != 0 || !e.seq.CompareAndSwap(s, s+1) {
		return // another writer owns it; skip caching this once
	}
	for i := range k.w {
		e.w[i].Store(k.w[i])
	}
	e.res.Store(uint64(r + 1))
	e.gen.Store(gen)
	e.seq.Store(s + 2)
}
