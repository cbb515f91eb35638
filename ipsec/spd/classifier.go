package spd

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"slices"
)

// flowKey is a flow (or a selector) packed into five words:
// src hi/lo, dst hi/lo (16-byte form; IPv4 as IPv4-mapped) and meta.
type flowKey struct {
	w [5]uint64
}

// meta word layout.
const (
	metaDirShift    = 60
	metaSrcFamShift = 56
	metaDstFamShift = 52
	metaProtoShift  = 32
	metaSportShift  = 16

	famNone = 0 // invalid address (or wildcard in a tuple)
	fam4    = 1
	fam6    = 2
)

func famOf(a netip.Addr) uint64 {
	if a.Is4() {
		return fam4
	}
	if a.Is6() {
		return fam6
	}
	return famNone
}

func (k *flowKey) set(dir Dir, f *Flow) {
	s := f.Src.As16()
	d := f.Dst.As16()
	k.w[0] = binary.BigEndian.Uint64(s[:8])
	k.w[1] = binary.BigEndian.Uint64(s[8:])
	k.w[2] = binary.BigEndian.Uint64(d[:8])
	k.w[3] = binary.BigEndian.Uint64(d[8:])
	k.w[4] = uint64(dir)<<metaDirShift | famOf(f.Src)<<metaSrcFamShift | famOf(f.Dst)<<metaDstFamShift |
		uint64(f.Proto)<<metaProtoShift | uint64(f.SrcPort)<<metaSportShift | uint64(f.DstPort)
}

func (k *flowKey) srcFam() uint64 { return k.w[4] >> metaSrcFamShift & 0xf }
func (k *flowKey) dstFam() uint64 { return k.w[4] >> metaDstFamShift & 0xf }

// wyhash-style mixing; seeded per SPD so that flows cannot be chosen to
// collide without knowing the seed.
const (
	p0 = 0xa0761d6478bd642f
	p1 = 0xe7037ed1a0b428db
	p2 = 0x8ebc6af09c88c6e3
	p3 = 0x589965cc75374cc3
	p4 = 0x1d8e4e27c47d124f
)

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func hash5(seed uint64, w *[5]uint64) uint64 {
	h := mix(w[0]^seed^p0, w[1]^p1)
	h = mix(w[2]^h^p2, w[3]^p3)
	return mix(w[4]^h^p4, seed^p1)
}

func (k *flowKey) hash(seed uint64) uint64 { return hash5(seed, &k.w) }

// mask128 returns the top n bits of a 128-bit value as hi, lo masks.
func mask128(n int) (hi, lo uint64) {
	if n >= 64 {
		return math.MaxUint64, ^uint64(0) << (128 - n) // shift by 64 yields 0
	}
	return ^uint64(0) << (64 - n), 0
}

// tupleID identifies one tuple: a combination of address families, prefix
// lengths and which of proto/ports are exact.
type tupleID struct {
	srcFam, dstFam   uint64
	srcBits, dstBits int // in the 128-bit space
	proto, sp, dp    bool
}

// slot is one compact open-addressing slot: a hash tag and the policy.
// The full key lives in the parallel keys array and is read only when the
// tag matches, so a probe that misses touches 8 bytes, not 48.
type slot struct {
	tag  uint32
	prio int32 // policy index + 1; 0 = empty
}

// tuple is one hash table of the tuple-space classifier.
type tuple struct {
	srcFam, dstFam uint64
	mask           [5]uint64 // applied to the flow key; meta mask has no dir/fam bits
	famBits        uint64    // OR-ed into the masked meta word
	minPrio        int32     // lowest policy index in this tuple
	srcLen, dstLen uint8     // index into dirTable.srcLens/dstLens; noLen for wildcards
	slots          []slot
	keys           [][5]uint64 // keys[i] belongs to slots[i]
	smask          uint64
}

// noLen marks a wildcard address dimension of a tuple (always passes the
// staged filter).
const noLen = 255

// stageThreshold is the number of tuples above which classify first runs
// the per-dimension prefix filter (staged lookup): for each distinct
// (family, prefix length) of one address dimension, a hash set of the
// masked prefixes present says whether any policy could match the flow's
// address at that length; tuples whose source or destination length cannot
// match are skipped without probing them. Below it, probing every tuple is
// cheaper than the filter.
const stageThreshold = 12

// lenSet is the set of distinct masked prefixes of one family and length in
// one address dimension.
type lenSet struct {
	fam            uint64
	hiMask, loMask uint64 // applied to the address words
	slots          []lenSlot
	smask          uint64
}

type lenSlot struct {
	hi, lo uint64
	used   bool
}

func lenHash(seed, hi, lo uint64) uint64 { return mix(hi^seed^p2, lo^p3) }

func (ls *lenSet) add(seed, hi, lo uint64) {
	i := lenHash(seed, hi, lo) & ls.smask
	for {
		s := &ls.slots[i]
		if !s.used {
			*s = lenSlot{hi: hi, lo: lo, used: true}
			return
		}
		if s.hi == hi && s.lo == lo {
			return
		}
		i = (i + 1) & ls.smask
	}
}

func (ls *lenSet) has(seed, hi, lo uint64) bool {
	hi &= ls.hiMask
	lo &= ls.loMask
	i := lenHash(seed, hi, lo) & ls.smask
	for {
		s := &ls.slots[i]
		if !s.used {
			return false
		}
		if s.hi == hi && s.lo == lo {
			return true
		}
		i = (i + 1) & ls.smask
	}
}

// maxLens bounds the distinct (family, length) pairs of one dimension:
// 33 IPv4 lengths + 129 IPv6 lengths, plus one wildcard slot.
const maxLens = 33 + 129 + 1

// dirTable is the classifier of one direction: tuples sorted by minPrio.
type dirTable struct {
	tuples           []tuple
	staged           bool
	srcLens, dstLens []lenSet
	// Staged tuples grouped by (srcLen, dstLen) in CSR form: the tuples of
	// group g = s*(len(dstLens)+1)+d are grpIdx[grpOff[g]:grpOff[g+1]], where
	// index len(srcLens) (len(dstLens)) stands for a wildcard dimension.
	grpOff []uint32
	grpIdx []uint32
}

// table is an immutable compiled snapshot of the SPD.
type table struct {
	gen  uint64
	seed uint64
	all  []Policy
	dirs [numDirs]dirTable
}

func selectorTuple(s *Selector) tupleID {
	id := tupleID{proto: s.Proto != 0, sp: s.SrcPort != 0, dp: s.DstPort != 0}
	if s.Src.IsValid() {
		id.srcFam = famOf(s.Src.Addr())
		id.srcBits = s.Src.Bits()
		if id.srcFam == fam4 {
			id.srcBits += 96
		}
	}
	if s.Dst.IsValid() {
		id.dstFam = famOf(s.Dst.Addr())
		id.dstBits = s.Dst.Bits()
		if id.dstFam == fam4 {
			id.dstBits += 96
		}
	}
	return id
}

func newTuple(id tupleID) tuple {
	t := tuple{srcFam: id.srcFam, dstFam: id.dstFam, minPrio: math.MaxInt32}
	t.mask[0], t.mask[1] = mask128(id.srcBits)
	t.mask[2], t.mask[3] = mask128(id.dstBits)
	if id.proto {
		t.mask[4] |= 0xff << metaProtoShift
	}
	if id.sp {
		t.mask[4] |= 0xffff << metaSportShift
	}
	if id.dp {
		t.mask[4] |= 0xffff
	}
	t.famBits = id.srcFam<<metaSrcFamShift | id.dstFam<<metaDstFamShift
	return t
}

// maskedKey computes the tuple's key for flow key k.
func (t *tuple) maskedKey(k *flowKey, out *[5]uint64) {
	out[0] = k.w[0] & t.mask[0]
	out[1] = k.w[1] & t.mask[1]
	out[2] = k.w[2] & t.mask[2]
	out[3] = k.w[3] & t.mask[3]
	out[4] = k.w[4]&t.mask[4] | t.famBits
}

func (t *tuple) insert(seed uint64, key *[5]uint64, prio int32) {
	h := hash5(seed, key)
	i, tag := h&t.smask, uint32(h>>32)
	for {
		s := &t.slots[i]
		if s.prio == 0 {
			s.tag = tag
			s.prio = prio + 1
			t.keys[i] = *key
			return
		}
		if s.tag == tag && t.keys[i] == *key {
			if prio+1 < s.prio {
				s.prio = prio + 1
			}
			return
		}
		i = (i + 1) & t.smask
	}
}

func (t *tuple) find(seed uint64, key *[5]uint64) int32 {
	h := hash5(seed, key)
	i, tag := h&t.smask, uint32(h>>32)
	for {
		s := &t.slots[i]
		if s.prio == 0 {
			return -1
		}
		if s.tag == tag && t.keys[i] == *key {
			return s.prio - 1
		}
		i = (i + 1) & t.smask
	}
}

// compile builds the classifier for ps, which must be canonical and
// indexed (ps[i].Index == i).
func compile(ps []Policy, gen, seed uint64) *table {
	t := &table{gen: gen, seed: seed, all: ps}
	for d := Dir(0); d < numDirs; d++ {
		groups := map[tupleID][]int32{}
		var order []tupleID
		for i := range ps {
			if ps[i].Dir != d {
				continue
			}
			id := selectorTuple(&ps[i].Sel)
			if _, ok := groups[id]; !ok {
				order = append(order, id)
			}
			groups[id] = append(groups[id], int32(i))
		}
		tuples := make([]tuple, 0, len(order))
		for _, id := range order {
			members := groups[id]
			tp := newTuple(id)
			size := 4
			for size < 2*len(members) {
				size <<= 1
			}
			tp.slots = make([]slot, size)
			tp.keys = make([][5]uint64, size)
			tp.smask = uint64(size - 1)
			for _, pi := range members {
				var k flowKey
				sel := &ps[pi].Sel
				f := Flow{Src: sel.Src.Addr(), Dst: sel.Dst.Addr(), Proto: sel.Proto, SrcPort: sel.SrcPort, DstPort: sel.DstPort}
				k.set(0, &f)
				var mk [5]uint64
				tp.maskedKey(&k, &mk)
				tp.insert(seed, &mk, pi)
				tp.minPrio = min(tp.minPrio, pi)
			}
			tuples = append(tuples, tp)
		}
		// Tuples are created in order of first member, so they are already
		// sorted by minPrio; sort anyway to make the invariant explicit.
		slices.SortFunc(tuples, func(a, b tuple) int { return int(a.minPrio) - int(b.minPrio) })
		dt := &t.dirs[d]
		dt.tuples = tuples
		if len(tuples) > stageThreshold {
			dt.staged = true
			dt.srcLens = buildLenSets(ps, d, seed, tuples, true)
			dt.dstLens = buildLenSets(ps, d, seed, tuples, false)
			dt.group()
		}
	}
	return t
}

func (dt *dirTable) lenIndexes(tp *tuple) (int, int) {
	s, d := int(tp.srcLen), int(tp.dstLen)
	if tp.srcLen == noLen {
		s = len(dt.srcLens)
	}
	if tp.dstLen == noLen {
		d = len(dt.dstLens)
	}
	return s, d
}

// group builds the (srcLen, dstLen) -> tuples index.
func (dt *dirTable) group() {
	nD1 := len(dt.dstLens) + 1
	n := (len(dt.srcLens) + 1) * nD1
	dt.grpOff = make([]uint32, n+1)
	for i := range dt.tuples {
		s, d := dt.lenIndexes(&dt.tuples[i])
		dt.grpOff[s*nD1+d+1]++
	}
	for g := 1; g <= n; g++ {
		dt.grpOff[g] += dt.grpOff[g-1]
	}
	fill := append([]uint32(nil), dt.grpOff[:n]...)
	dt.grpIdx = make([]uint32, len(dt.tuples))
	for i := range dt.tuples { // in minPrio order within each group
		s, d := dt.lenIndexes(&dt.tuples[i])
		g := s*nD1 + d
		dt.grpIdx[fill[g]] = uint32(i)
		fill[g]++
	}
}

// buildLenSets builds the staged filter of one address dimension of
// direction d and records each tuple's lenSet index.
func buildLenSets(ps []Policy, d Dir, seed uint64, tuples []tuple, src bool) []lenSet {
	type lenID struct {
		fam  uint64
		bits int
	}
	idx := map[lenID]int{}
	var sets []lenSet
	var members [][][2]uint64
	for i := range ps {
		if ps[i].Dir != d {
			continue
		}
		pf := ps[i].Sel.Dst
		if src {
			pf = ps[i].Sel.Src
		}
		if !pf.IsValid() {
			continue
		}
		id := lenID{famOf(pf.Addr()), pf.Bits()}
		if id.fam == fam4 {
			id.bits += 96
		}
		j, ok := idx[id]
		if !ok {
			j = len(sets)
			idx[id] = j
			ls := lenSet{fam: id.fam}
			ls.hiMask, ls.loMask = mask128(id.bits)
			sets = append(sets, ls)
			members = append(members, nil)
		}
		a := pf.Addr().As16()
		members[j] = append(members[j], [2]uint64{binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])})
	}
	for j := range sets {
		size := 4
		for size < 2*len(members[j]) {
			size <<= 1
		}
		sets[j].slots = make([]lenSlot, size)
		sets[j].smask = uint64(size - 1)
		for _, m := range members[j] {
			sets[j].add(seed, m[0]&sets[j].hiMask, m[1]&sets[j].loMask)
		}
	}
	for i := range tuples {
		tp := &tuples[i]
		fam, m0, m1 := tp.dstFam, tp.mask[2], tp.mask[3]
		if src {
			fam, m0, m1 = tp.srcFam, tp.mask[0], tp.mask[1]
		}
		li := uint8(noLen)
		if fam != famNone {
			for j := range sets {
				if sets[j].fam == fam && sets[j].hiMask == m0 && sets[j].loMask == m1 {
					li = uint8(j)
				}
			}
		}
		if src {
			tp.srcLen = li
		} else {
			tp.dstLen = li
		}
	}
	return sets
}

// classify returns the index of the first policy of dir matching k, or -1.
func (t *table) classify(dir Dir, k *flowKey) int32 {
	best := int32(math.MaxInt32)
	sf, df := k.srcFam(), k.dstFam()
	dt := &t.dirs[dir]
	tuples := dt.tuples
	if dt.staged {
		return t.classifyStaged(dt, k, sf, df)
	}
	for i := range tuples {
		tp := &tuples[i]
		if tp.minPrio >= best {
			break
		}
		if (tp.srcFam != famNone && tp.srcFam != sf) || (tp.dstFam != famNone && tp.dstFam != df) {
			continue
		}
		var mk [5]uint64
		tp.maskedKey(k, &mk)
		if p := tp.find(t.seed, &mk); p >= 0 && p < best {
			best = p
		}
	}
	if best == math.MaxInt32 {
		return -1
	}
	return best
}

// classifyStaged first finds which source and destination prefix lengths
// can match k at all, then probes only the tuples of those length pairs
// (plus wildcard dimensions).
func (t *table) classifyStaged(dt *dirTable, k *flowKey, sf, df uint64) int32 {
	var sl, dl [maxLens]uint8
	ns, nd := 0, 0
	for i := range dt.srcLens {
		if ls := &dt.srcLens[i]; ls.fam == sf && ls.has(t.seed, k.w[0], k.w[1]) {
			sl[ns] = uint8(i)
			ns++
		}
	}
	sl[ns] = uint8(len(dt.srcLens)) // wildcard source
	ns++
	for i := range dt.dstLens {
		if ls := &dt.dstLens[i]; ls.fam == df && ls.has(t.seed, k.w[2], k.w[3]) {
			dl[nd] = uint8(i)
			nd++
		}
	}
	dl[nd] = uint8(len(dt.dstLens)) // wildcard destination
	nd++
	nD1 := len(dt.dstLens) + 1
	best := int32(math.MaxInt32)
	for _, s := range sl[:ns] {
		for _, d := range dl[:nd] {
			g := int(s)*nD1 + int(d)
			for _, ti := range dt.grpIdx[dt.grpOff[g]:dt.grpOff[g+1]] {
				tp := &dt.tuples[ti]
				if tp.minPrio >= best {
					break // group is in minPrio order
				}
				var mk [5]uint64
				tp.maskedKey(k, &mk)
				if p := tp.find(t.seed, &mk); p >= 0 && p < best {
					best = p
				}
			}
		}
	}
	if best == math.MaxInt32 {
		return -1
	}
	return best
}

func (t *table) result(r int32) (*Policy, bool) {
	if r < 0 || int(r) >= len(t.all) {
		return nil, false
	}
	return &t.all[r], true
}
