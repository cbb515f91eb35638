package replay

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func readVectors(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/antireplay_vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// TestESNInferenceVectors runs the derived RFC 4303 A2.2 cases (W=64).
func TestESNInferenceVectors(t *testing.T) {
	n := 0
	for _, l := range readVectors(t) {
		if !strings.HasPrefix(l, "T=") {
			continue
		}
		// T=0000000100000100 seql=00000120 -> 0000000100000120
		var ts, ss, ws string
		f := strings.Fields(l)
		ts, ss, ws = strings.TrimPrefix(f[0], "T="), strings.TrimPrefix(f[1], "seql="), f[3]
		top, _ := strconv.ParseUint(ts, 16, 64)
		seql, _ := strconv.ParseUint(ss, 16, 32)
		want, _ := strconv.ParseUint(ws, 16, 64)
		if got := InferESN(top, uint32(seql), 64); got != want {
			t.Errorf("%s: got %016x", l, got)
		}
		// Through a Window with that top.
		w, _ := New(64, true)
		w.top = top
		if got := w.Infer(uint32(seql)); got != want {
			t.Errorf("window %s: got %016x", l, got)
		}
		n++
	}
	if n != 8 {
		t.Fatalf("parsed %d ESN cases, want 8", n)
	}
}

// TestRFC6479Sequence runs the derived 4-block (W=192) window sequence.
func TestRFC6479Sequence(t *testing.T) {
	w, err := New(192, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.blocks) != 4 {
		t.Fatalf("blocks = %d, want 4", len(w.blocks))
	}
	in := false
	n := 0
	for _, l := range readVectors(t) {
		if strings.HasPrefix(l, "# RFC-6479 window") {
			in = true
			continue
		}
		if !in || strings.TrimSpace(l) == "" {
			continue
		}
		f := strings.Fields(l)
		seq, _ := strconv.ParseUint(f[0], 10, 64)
		want := f[1] == "True"
		if got := w.Check(seq) && w.Update(seq); got != want {
			t.Errorf("step %d seq %d: got %v want %v", n+1, seq, got, want)
		}
		n++
	}
	if n != 16 {
		t.Fatalf("parsed %d steps, want 16", n)
	}
}

// TestWireGuardSequence ports the WireGuard selftest table. WireGuard
// accepts top-Wwg .. top (Wwg+1 values) and counts from 0; ESP windows
// cover T-W+1 .. T and count from 1, so W = Wwg+1 and every value is
// shifted by +1. R (WireGuard's reject-after limit) maps to SetMax(R).
func TestWireGuardSequence(t *testing.T) {
	const W = MaxSize
	const wwg = W - 1
	const tlim = wwg + 1
	const r = ^uint64(0) - (1 << 4) // R = 2^64 - 2^4 - 1, shifted +1
	type step struct {
		v    uint64
		want bool
	}
	steps := []step{
		{0, true}, {1, true}, {1, false}, {9, true}, {8, true}, {7, true}, {7, false},
		{tlim, true}, {tlim - 1, true}, {tlim - 1, false}, {tlim - 2, true}, {2, true}, {2, false},
		{tlim + 16, true}, {3, false}, {tlim + 16, false}, {tlim * 4, true}, {tlim*4 - (tlim - 1), true},
		{10, false}, {tlim*4 - tlim, false}, {tlim*4 - (tlim + 1), false}, {tlim*4 - (tlim - 2), true},
		{tlim*4 + 1 - tlim, false}, {0, false},
	}
	w, _ := New(W, true)
	w.SetMax(r - 1) // values >= R are rejected
	check := func(i int, s step, v uint64) {
		t.Helper()
		if got := w.Check(v) && w.Update(v); got != s.want {
			t.Errorf("step %d value %d: got %v want %v", i+1, v, got, s.want)
		}
	}
	for i, s := range steps {
		check(i, s, s.v+1)
	}
	// Steps 25-34 use values near R (already shifted).
	rs := []struct {
		v    uint64
		want bool
	}{
		{r, false}, {r - 1, true}, {r, false}, {r - 1, false}, {r - 2, true},
		{r + 1, false}, {r + 2, false}, {r - 2, false}, {r - 3, true}, {1, false},
	}
	for i, s := range rs {
		check(24+i, step{s.v, s.want}, s.v)
	}
}

// TestWireGuardBulk ports the bulk tests, shifted by +1 (value 0 -> 1).
func TestWireGuardBulk(t *testing.T) {
	const W = MaxSize
	const wwg = W - 1
	type op struct {
		from, to uint64 // inclusive, iterated from -> to (either direction)
		want     bool
	}
	cases := [][]op{
		{{1, wwg, true}, {0, 0, true}, {0, 0, false}},
		{{2, wwg + 1, true}, {1, 1, true}, {0, 0, false}},
		{{wwg + 1, 1, true}},
		{{wwg + 2, 2, true}, {0, 0, false}},
		{{wwg, 1, true}, {wwg + 1, wwg + 1, true}, {0, 0, false}},
		{{wwg, 1, true}, {0, 0, true}, {wwg + 1, wwg + 1, true}},
	}
	for ci, c := range cases {
		w, _ := New(W, false)
		for _, o := range c {
			step := uint64(1)
			if o.to < o.from {
				step = ^uint64(0)
			}
			for v := o.from; ; v += step {
				if got := w.Check(v+1) && w.Update(v+1); got != o.want {
					t.Fatalf("bulk %d value %d: got %v want %v", ci+1, v, got, o.want)
				}
				if v == o.to {
					break
				}
			}
		}
	}
}

// TestBoundaries pins the RFC 4303 window edge and the sequence limits.
func TestBoundaries(t *testing.T) {
	for _, size := range []int{1, 32, 64, 65, 1000, 4096} {
		w, err := New(size, false)
		if err != nil {
			t.Fatal(err)
		}
		top := uint64(100000)
		if !w.Update(top) {
			t.Fatal("update top")
		}
		lo := top - uint64(size) + 1
		if size > 1 && !w.Check(lo) {
			t.Errorf("size %d: T-W+1 rejected", size)
		}
		if w.Check(lo - 1) {
			t.Errorf("size %d: T-W accepted", size)
		}
		if w.Check(top) {
			t.Errorf("size %d: duplicate top accepted", size)
		}
	}
	if _, err := New(MaxSize+1, false); err == nil {
		t.Error("window above MaxSize accepted")
	}
	if _, err := New(-1, false); err == nil {
		t.Error("negative window accepted")
	}
	w, _ := New(64, false)
	if w.Check(0) {
		t.Error("seq 0 accepted")
	}
	if w.Check(1 << 32) {
		t.Error("33-bit seq accepted without ESN")
	}
	// Disabled window: duplicates pass, but top is tracked.
	w, _ = New(0, true)
	for i := 0; i < 3; i++ {
		if !w.Update(5) {
			t.Fatal("disabled window rejected a duplicate")
		}
	}
	if w.Top() != 5 {
		t.Fatalf("top %d", w.Top())
	}
}

// TestAgainstModel compares the ring with a naive set model.
func TestAgainstModel(t *testing.T) {
	for _, size := range []int{1, 63, 64, 200, 4096} {
		w, _ := New(size, true)
		seen := map[uint64]bool{}
		var top uint64
		x := uint64(12345)
		for i := 0; i < 20000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
			var seq uint64
			switch x >> 62 {
			case 0:
				seq = top + 1 + (x>>32)%3
			case 1:
				seq = top + (x>>32)%uint64(3*size+200)
			default:
				seq = top - (x>>32)%uint64(2*size+2)
			}
			if seq > 1<<40 {
				seq = 1
			}
			want := seq != 0 && !seen[seq] && (seq > top || top-seq < uint64(size))
			if got := w.Check(seq); got != want {
				t.Fatalf("size %d step %d seq %d top %d: check %v want %v", size, i, seq, top, got, want)
			}
			if want {
				w.Update(seq)
				seen[seq] = true
				if seq > top {
					top = seq
				}
			}
		}
	}
}

func BenchmarkCheckUpdate(b *testing.B) {
	w, _ := New(1024, true)
	var s uint64
	for b.Loop() {
		s++
		if w.Check(s) {
			w.Update(s)
		}
	}
}

// TestAdvanceMatchesUpdate: Advance, with Update as its fallback, leaves
// a window in the state Update alone does (top, and the bitmap of a
// window with a size), for in-order,
// block-crossing, late, duplicate and out-of-window sequence numbers.
func TestAdvanceMatchesUpdate(t *testing.T) {
	for _, size := range []int{0, 1, 64, 200, 4096} {
		a, _ := New(size, false)
		u, _ := New(size, false)
		x := uint64(777)
		var top uint64
		for i := 0; i < 50000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
			var seq uint64
			switch x >> 61 {
			case 0, 1, 2, 3:
				seq = top + 1
			case 4:
				seq = top + 1 + (x>>32)%130
			case 5:
				seq = top - (x>>32)%uint64(size+70)
			default:
				seq = top
			}
			if i%1000 == 999 {
				seq = a.max + (x>>40)%2 // at and past the limit
			}
			got := a.Advance(seq) || a.Update(seq)
			want := u.Update(seq)
			// A size-0 window's bits are never read (Advance may set them).
			if got != want || a.top != u.top || (size > 0 && !slices.Equal(a.blocks, u.blocks)) {
				t.Fatalf("size %d step %d seq %d: got %v want %v, top %d vs %d", size, i, seq, got, want, a.top, u.top)
			}
			top = u.top
		}
	}
}
