package replay

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// model is the plain reference for Window: the set of every sequence
// number accepted, the highest one (the window edge is top-size+1) and the
// limit. It shares no code with the ring bitmap.
type model struct {
	size, max, top uint64
	seen           map[uint64]bool
}

func newModel(size int, esn bool) *model {
	m := &model{size: uint64(size), max: 1<<32 - 1, seen: map[uint64]bool{}}
	if esn {
		m.max = ^uint64(0)
	}
	return m
}

// check is RFC 4303 section 3.4.3 read literally: 0 and numbers above the
// limit are never valid; a number above the highest seen is new; with a
// window, a number is valid when it lies in T-W+1 .. T and was not seen.
func (m *model) check(seq uint64) bool {
	if seq == 0 || seq > m.max {
		return false
	}
	if seq > m.top || m.size == 0 {
		return true
	}
	return m.top-seq < m.size && !m.seen[seq]
}

func (m *model) update(seq uint64) bool {
	if !m.check(seq) {
		return false
	}
	if m.size > 0 {
		m.seen[seq] = true
	}
	if seq > m.top {
		m.top = seq
	}
	return true
}

// windowOpLen is the size of one operation in a FuzzWindow input: an
// operation byte and a 32-bit operand.
const windowOpLen = 5

// runWindowOps drives a Window and the model with the operations encoded in
// ops and fails at the first difference in Check, Update, Advance or Top.
// The operation byte's low two bits pick the call (Check alone; Check then
// Update, as the inbound path does; Update alone; Advance with Update as
// its fallback), the next three how the operand becomes a sequence number,
// so that inputs reach the window edge, the redundant block, the limit
// and large jumps, not only the neighbourhood of 0.
func runWindowOps(t *testing.T, size int, esn bool, ops []byte) {
	t.Helper()
	w, err := New(size, esn)
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(size, esn)
	sz := uint64(size)
	for i := 0; i+windowOpLen <= len(ops); i += windowOpLen {
		op, v := ops[i], uint64(binary.BigEndian.Uint32(ops[i+1:]))
		var seq uint64
		switch (op >> 2) & 7 {
		case 0: // in order, small gaps
			seq = m.top + 1 + v%4
		case 1: // a jump forward
			seq = m.top + v
		case 2: // late, inside or just outside the window
			seq = m.top - v%(2*sz+2)
		case 3: // at the window edge T-W+1, give or take 2
			seq = m.top - sz + v%5 - 1
		case 4: // absolute 32-bit number
			seq = v
		case 5: // at the limit
			seq = m.max - v%4
		case 6: // lower the limit
			lim := m.top + v
			w.SetMax(lim)
			if lim < m.max {
				m.max = lim
			}
			continue
		case 7:
			if v%16 != 0 { // rarely: forget everything
				seq = m.top - v%(sz+1)
				break
			}
			w.Reset()
			m.top, m.seen = 0, map[uint64]bool{}
			continue
		}
		where := func() string {
			return fmt.Sprintf("size %d esn %v op %d (%#02x) seq %d top %d", size, esn, i/windowOpLen, op, seq, m.top)
		}
		want := m.check(seq)
		if got := w.Check(seq); got != want {
			t.Fatalf("%s: Check = %v, model %v", where(), got, want)
		}
		var got bool
		switch op & 3 {
		case 0:
			continue
		case 1:
			got = w.Check(seq) && w.Update(seq)
		case 2:
			got = w.Update(seq)
		case 3:
			got = w.Advance(seq) || w.Update(seq)
		}
		if want := m.update(seq); got != want {
			t.Fatalf("%s: update = %v, model %v", where(), got, want)
		}
		if w.Top() != m.top {
			t.Fatalf("%s: Top = %d, model %d", where(), w.Top(), m.top)
		}
		if m.check(seq) != w.Check(seq) {
			t.Fatalf("%s: Check after update = %v, model %v", where(), w.Check(seq), m.check(seq))
		}
	}
}

// windowSizes are the sizes every model test runs: 0, the extremes, each
// side of a block boundary (where the redundant block matters) and
// RFC 4303's defaults.
var windowSizes = []int{0, 1, 2, 32, 63, 64, 65, 127, 128, 129, 191, 192, 193, 200, 255, 256, 257, 1000, 1024, 4095, MaxSize}

// TestWindowRandomAgainstModel runs seeded random operations against the
// model for every size, with and without ESN. The seed is fixed, so that
// a run is reproducible (the fuzzer explores); it is in every subtest's
// name, and KEEL_REPLAY_SEED=n runs with seed n instead ("random" picks
// one from the clock).
func TestWindowRandomAgainstModel(t *testing.T) {
	seed := replaySeed(t)
	for _, size := range windowSizes {
		for _, esn := range []bool{false, true} {
			t.Run(fmt.Sprintf("size=%d/esn=%v/seed=%d", size, esn, seed), func(t *testing.T) {
				runWindowOps(t, size, esn, randomOps(seed, size, esn, 4000))
			})
		}
	}
}

// TestWindowEverySize: a shorter seeded run against the model for every
// supported size, 0 to MaxSize, with and without ESN: long enough (ops
// spanning about four windows) to fill the window and probe its edge.
func TestWindowEverySize(t *testing.T) {
	seed := replaySeed(t)
	for size := 0; size <= MaxSize; size++ {
		for _, esn := range []bool{false, true} {
			ops := randomOps(seed, size, esn, 200+size/2)
			if !t.Run(fmt.Sprintf("size=%d/esn=%v/seed=%d", size, esn, seed), func(t *testing.T) { runWindowOps(t, size, esn, ops) }) {
				return // one size's failure is enough to read
			}
		}
	}
}

// replaySeed is the seed of the random model tests: fixed, so that a run
// is reproducible, unless KEEL_REPLAY_SEED gives one (or "random").
func replaySeed(t *testing.T) uint64 {
	switch s := os.Getenv("KEEL_REPLAY_SEED"); s {
	case "":
		return 6479
	case "random":
		return uint64(time.Now().UnixNano())
	default:
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_REPLAY_SEED: %v", err)
		}
		return seed
	}
}

// randomOps returns n random operations for runWindowOps, mostly in-order
// traffic with late packets, so that the window is full when its edge is
// probed.
func randomOps(seed uint64, size int, esn bool, n int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(size)<<1|b2u(esn)))
	ops := make([]byte, n*windowOpLen)
	for i := 0; i < len(ops); i += windowOpLen {
		ops[i] = byte(r.IntN(4)) | byte(weighted(r))<<2
		binary.BigEndian.PutUint32(ops[i+1:], r.Uint32())
	}
	return ops
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// weighted picks an operand mode: in-order 50%, late 20%, edge 15%, the
// rest spread over jumps, absolute numbers, the limit and resets.
func weighted(r *rand.Rand) int {
	switch x := r.IntN(100); {
	case x < 50:
		return 0
	case x < 70:
		return 2
	case x < 85:
		return 3
	case x < 90:
		return 1
	case x < 93:
		return 4
	case x < 95:
		return 5
	case x < 96:
		return 6
	default:
		return 7
	}
}

// TestRedundantBlock is the mutation the model tests were written for: a
// ring without RFC 6479's redundant block reuses the block of T-W+1 for
// T and forgets it, so a replay of the window's oldest number passes.
func TestRedundantBlock(t *testing.T) {
	for size := 2; size <= MaxSize; size++ {
		for _, first := range []uint64{1, 63, 64, 65, 73, 127, 128} {
			w, _ := New(size, false)
			last := first + uint64(size) - 1
			if !w.Update(first) || !w.Update(last) {
				t.Fatalf("size %d: Update(%d), Update(%d) refused", size, first, last)
			}
			if w.Check(first) {
				t.Errorf("size %d: Update(%d); Update(%d); Check(%d) accepts a replay", size, first, last, first)
			}
		}
	}
}

// FuzzWindow compares Window with the model on every Check and Update:
// size is taken modulo MaxSize+1, ops is a sequence of 5-byte operations
// (see runWindowOps).
func FuzzWindow(f *testing.F) {
	f.Add(uint16(64), false, []byte{1, 0, 0, 0, 1, 1, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, size uint16, esn bool, ops []byte) {
		runWindowOps(t, int(size)%(MaxSize+1), esn, ops)
	})
}
