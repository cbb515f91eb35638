package rcorder

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Differential tests: the production emulator (freebsd.go) and Order
// against the naive transliteration of FreeBSD's rcorder.c in
// freebsd_ref_test.go, on random trees with cycles, missing providers,
// BEFORE lines and names provided by several files.

// TestReferenceMatchesProbes pins the transliteration itself to the real
// FreeBSD output: the -p levels and every message, in order (the noise
// lines included), with the CR kept in tokens as FreeBSD keeps it.
func TestReferenceMatchesProbes(t *testing.T) {
	for _, p := range loadProbes(t) {
		t.Run(p.name, func(t *testing.T) {
			scripts, errs := Parse(p.fsys, p.files...)
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			for i := range scripts {
				s := &scripts[i]
				if len(s.CRLines) == 0 {
					continue
				}
				// Every header line of the probe's CRLF file ends in CR.
				for _, l := range [][]string{s.Provides, s.Requires, s.Before} {
					if len(l) > 0 {
						l[len(l)-1] += "\r"
					}
				}
			}
			ref := freebsdReference(scripts)
			if ref.hung {
				t.Fatal("reference did not terminate")
			}
			got := ref.groups(scripts)
			for _, g := range got {
				slices.Sort(g)
			}
			want := make([][]string, len(p.levels))
			for i, l := range p.levels {
				want[i] = slices.Sorted(slices.Values(l))
			}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("levels %q, FreeBSD %q", got, want)
			}
			if !slices.Equal(ref.msgs, p.stderr) {
				t.Errorf("messages:\n got %q\nwant %q", ref.msgs, p.stderr)
			}
			if ref.exit != p.exit {
				t.Errorf("exit %d, FreeBSD %d", ref.exit, p.exit)
			}
		})
	}
}

// randomTree makes a tree of up to maxFiles scripts over a pool of names;
// density is the mean number of REQUIREs per script.
func randomTree(rng *rand.Rand, maxFiles, names int, density float64) []Script {
	n := 1 + rng.IntN(maxFiles)
	pool := make([]string, names)
	for i := range pool {
		pool[i] = fmt.Sprintf("n%d", i)
	}
	scripts := make([]Script, n)
	for i := range scripts {
		s := &scripts[i]
		s.Path = fmt.Sprintf("rc.d/f%02d", i)
		for range rng.IntN(3) {
			s.Provides = append(s.Provides, pool[rng.IntN(names)])
		}
		for rng.Float64() < density/(1+density) {
			s.Requires = append(s.Requires, pool[rng.IntN(names)])
		}
		for rng.IntN(6) == 0 {
			s.Before = append(s.Before, pool[rng.IntN(names)])
		}
	}
	return scripts
}

var refLoopMsg = regexp.MustCompile("^Circular dependency on provision `.*': (.*)\\.$")

// checkAgainstReference checks Order and the emulator against the
// transliteration on one tree.
func checkAgainstReference(t testing.TB, scripts []Script) {
	t.Helper()
	ref := freebsdReference(scripts)
	if ref.hung {
		t.Skip("FreeBSD's walk would not terminate on this tree")
	}
	for i, ok := range ref.printed {
		if !ok {
			t.Fatalf("reference never printed %s", scripts[i].Path)
		}
	}
	em := newEmulator(scripts)
	if raw := em.run(); !slices.Equal(raw, ref.seq) {
		t.Fatalf("emulator sequences %v, FreeBSD %v", raw, ref.seq)
	}

	r := Order(scripts, Filter{})
	checkValid(t, r)
	if got := r.ExitCode(); got != ref.exit {
		t.Fatalf("exit %d, FreeBSD %d; problems %q; FreeBSD %q", got, ref.exit, problemTexts(r), ref.msgs)
	}

	// Levels: FreeBSD's, except that a script FreeBSD puts on a lower
	// level than a script it waits for outside its cycle moves to the
	// lowest level above it. Recomputed here naively: components by
	// reachability, then scripts in an order where every script comes
	// after those it waits for in other components.
	n := len(scripts)
	reach := make([][]bool, n)
	for i := range reach {
		reach[i] = make([]bool, n)
		for _, d := range r.Deps(i) {
			reach[i][d] = true
		}
	}
	for k := range n {
		for i := range n {
			if reach[i][k] {
				for j := range n {
					reach[i][j] = reach[i][j] || reach[k][j]
				}
			}
		}
	}
	sameComp := func(a, b int) bool { return a == b || reach[a][b] && reach[b][a] }
	want := slices.Clone(ref.seq)
	vals := slices.Compact(slices.Sorted(slices.Values(ref.seq)))
	done := make([]bool, n)
	for left := n; left > 0; {
		progressed := false
		for v := range n {
			if done[v] {
				continue
			}
			ready := true
			for _, d := range r.Deps(v) {
				if !sameComp(v, d) && !done[d] {
					ready = false
				}
			}
			if !ready {
				continue
			}
			need := want[v]
			for _, d := range r.Deps(v) {
				if !sameComp(v, d) {
					need = max(need, want[d])
				}
			}
			if need > want[v] {
				k := slices.IndexFunc(vals, func(x int) bool { return x > need })
				if k < 0 {
					vals = append(vals, need+1)
					k = len(vals) - 1
				}
				want[v] = vals[k]
			}
			done[v] = true
			left--
			progressed = true
		}
		if !progressed {
			t.Fatal("components do not form a DAG")
		}
	}
	if got, w := r.LevelGroups(), groupBySeq(scripts, want, nil); !slices.EqualFunc(sortedGroups(got), sortedGroups(w), slices.Equal) {
		t.Fatalf("levels %q, want %q (FreeBSD %q)", got, w, ref.groups(scripts))
	}
	// Within a level, command-line order unless a script waits for
	// another one of the same level.
	for _, g := range r.LevelGroups() {
		idx := make([]int, len(g))
		for k, p := range g {
			idx[k] = slices.IndexFunc(scripts, func(s Script) bool { return s.Path == p })
		}
		if slices.IsSorted(idx) {
			continue
		}
		linked := false
		for _, a := range idx {
			for _, b := range idx {
				if a != b && !sameComp(a, b) && slices.Contains(r.Deps(a), b) {
					linked = true
				}
			}
		}
		if !linked {
			t.Fatalf("level %q is not in command-line order", g)
		}
	}

	// Messages: FreeBSD's "no providers" and "unknown provision" ones
	// (duplicates once), and, for every cycle Keel reports that FreeBSD
	// traces through distinct files, FreeBSD's text from the first time
	// it meets that cycle.
	gotMsgs := problemTexts(r)
	keelCycles := map[string]string{}
	for _, p := range r.Problems {
		if p.Kind == Cycle {
			keelCycles[cycleKey(p.Cycle)] = p.Text
		}
	}
	seenCycle := map[string]bool{}
	for _, m := range ref.msgs {
		if sm := refLoopMsg.FindStringSubmatch(m); sm != nil {
			names := strings.Split(sm[1], " -> ")
			names = names[:len(names)-1]
			var cyc []int
			for _, name := range names {
				cyc = append(cyc, slices.IndexFunc(scripts, func(s Script) bool { return s.Path == name }))
			}
			if len(slices.Compact(slices.Sorted(slices.Values(cyc)))) == 1 {
				cyc = cyc[:1] // FreeBSD prints a self-loop as "x -> x -> x"
			}
			key := cycleKey(cyc)
			if seenCycle[key] {
				continue
			}
			seenCycle[key] = true
			if text, ok := keelCycles[key]; ok && text != m {
				t.Fatalf("cycle %q printed as %q, FreeBSD %q", names, text, m)
			}
			continue
		}
		if keptMessage.MatchString(m) && !slices.Contains(gotMsgs, m) {
			t.Fatalf("FreeBSD prints %q; Keel prints %q", m, gotMsgs)
		}
	}
}

func sortedGroups(g [][]string) [][]string {
	out := make([][]string, len(g))
	for i, l := range g {
		out[i] = slices.Sorted(slices.Values(l))
	}
	return out
}

func TestFreeBSDReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2020))
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for i := range iters {
		var scripts []Script
		switch i % 3 {
		case 0: // small and dense: cycles, self-loops, re-entries
			scripts = randomTree(rng, 8, 6, 1.5)
		case 1: // larger and sparser: mostly acyclic, some cycles
			scripts = randomTree(rng, 40, 40, 1)
		default: // the fuzz decoder's shape
			data := make([]byte, 1+rng.IntN(60))
			for k := range data {
				data[k] = byte(rng.UintN(256))
			}
			scripts = scriptsFromBytes(data)
		}
		t.Run("", func(t *testing.T) { checkAgainstReference(t, scripts) })
		if t.Failed() {
			for _, s := range scripts {
				t.Logf("%s: PROVIDE %q REQUIRE %q BEFORE %q", s.Path, s.Provides, s.Requires, s.Before)
			}
			t.FailNow()
		}
	}
}

// TestFreeBSDWalkSubtleties pins, tree by tree, the details of FreeBSD's
// walk that an approximation gets wrong. Each expectation is the
// transliteration's output (checked against real FreeBSD by
// TestReferenceMatchesProbes) and Order's.
func TestFreeBSDWalkSubtleties(t *testing.T) {
	cases := []struct {
		name   string
		specs  []string
		levels string // Order's levels, "/" between levels
		seq    []int  // FreeBSD's raw sequence numbers, command-line order
		msgs   []string
	}{
		// p and q both provide and require n. q's own loop marks q; then
		// p meets n in progress, but no remaining provider of n (only p)
		// is on the stack: tracing fails, p gets no issue and keeps a
		// low sequence (a re-walk later sets it to 1).
		{"tracing failure marks nobody",
			[]string{"p: PROVIDE: n|REQUIRE: n", "q: PROVIDE: n|REQUIRE: n"},
			"p / q", []int{1, 3},
			[]string{"Circular dependency on provision `n': q -> q -> q."}},
		// Every remaining provider of the provision is tried, in
		// provider-list order (last parsed first), not only the first.
		{"loop search tries every provider",
			[]string{"a: PROVIDE: n2 n0|REQUIRE: n2", "b: PROVIDE: n0", "c: PROVIDE: n2|REQUIRE: n2", "d: REQUIRE: n0"},
			"b / c / a d", []int{4, 1, 2, 4},
			[]string{"Circular dependency on provision `n2': a -> c -> a.", "Circular dependency on provision `n2': a -> a -> a."}},
		// The stack is searched from its most recent entry down: c is on
		// it twice here (a re-entry).
		{"loop entry is the most recent stack entry",
			[]string{"a: PROVIDE: n1|REQUIRE: n3", "b: PROVIDE: n2", "c: PROVIDE: n1 n0|REQUIRE: n1 n0|BEFORE: n3", "d: PROVIDE: n2 n3|REQUIRE: n2"},
			"a b / c / d", []int{1, 1, 5, 6},
			[]string{"Circular dependency on provision `n0': c -> c -> c.", "Circular dependency on provision `n2': d -> d -> d."}},
		// BEFORE requirements are prepended to the provider's list, so
		// walked before its own REQUIREs (appending them gives a: 1).
		{"BEFORE requirements are walked first",
			[]string{"a: REQUIRE: n|BEFORE: n", "b: PROVIDE: n|REQUIRE: n"},
			"b / a", []int{4, 3},
			[]string{"Circular dependency on provision `fake_prov_00000000': a -> b -> a."}},
		// BEFORE lines are processed last first (bl_list is a prepended
		// list), which also numbers the fake provisions.
		{"BEFORE lines are processed last first",
			[]string{"a: PROVIDE: n3|BEFORE: n2", "b: PROVIDE: n2 n3|BEFORE: n3"},
			"b / a", []int{4, 3},
			[]string{"Circular dependency on provision `fake_prov_00000001': a -> b -> a."}},
		// FreeBSD prints a before b although a waits for b (b's BEFORE
		// n3 makes every provider of n3 wait for it): b's provisions are
		// published at its re-entered visit's sequence. Keel moves a to
		// the level above b.
		{"a script FreeBSD puts below what it waits for is raised",
			[]string{"a: PROVIDE: n3", "b: PROVIDE: n3|BEFORE: n3 n3"},
			"b / a", []int{2, 3},
			[]string{"Circular dependency on provision `fake_prov_00000001': b -> b -> b."}},
		// FreeBSD: "a b / d / c" (a is relinked and re-walked to 1,
		// although it waits for d). Keel moves a to the lowest existing
		// level above d, c's, rather than making a level of its own, so
		// b, d and c keep FreeBSD's levels; c waits for a, so a is
		// listed first.
		{"a raised script joins the next existing level",
			[]string{"a: PROVIDE: n0|REQUIRE: n3", "b: BEFORE: n3", "c: PROVIDE: n0|REQUIRE: n0", "d: PROVIDE: n3"},
			"b / d / a c", []int{1, 1, 4, 2},
			[]string{"Circular dependency on provision `n0': c -> c -> c."}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scripts := tree(t, c.specs...)
			ref := freebsdReference(scripts)
			if !slices.Equal(ref.seq, c.seq) {
				t.Errorf("reference sequences %v, want %v (messages %q)", ref.seq, c.seq, ref.msgs)
			}
			checkAgainstReference(t, scripts)
			r := Order(scripts, Filter{})
			if got := levelsString(r); got != c.levels {
				t.Errorf("levels %q, want %q", got, c.levels)
			}
			var loops []string
			for _, m := range problemTexts(r) {
				if refLoopMsg.MatchString(m) && slices.Contains(ref.msgs, m) {
					loops = append(loops, m)
				}
			}
			if !slices.Equal(loops, c.msgs) {
				t.Errorf("FreeBSD loop messages %q, want %q (all: %q)", loops, c.msgs, problemTexts(r))
			}
		})
	}
}

func FuzzFreeBSDReference(f *testing.F) {
	f.Add([]byte{5, 0, 1, 3, 1, 8, 0})
	f.Add([]byte{3, 3, 0, 11, 1, 19, 2, 0, 1, 8, 2, 16, 0})
	f.Add([]byte{11, 3, 0, 0, 0, 5, 0, 46, 1, 13, 2, 14, 5, 7, 1})
	// Trees on which the first emulator (loop search from the oldest
	// stack entry, first provider only, no tracing failure) disagreed
	// with FreeBSD.
	f.Add([]byte{209, 217, 196, 242, 131, 214, 195, 161, 91, 103, 11, 14, 40, 60, 226, 140, 72, 181, 189, 191, 40, 206, 30, 34, 111, 244, 56, 71, 16, 212, 80, 179, 236, 245, 82, 115, 76, 31, 184, 56, 146, 138, 81, 100, 243, 63, 12, 205, 4, 43, 181, 163, 16, 112, 244, 87, 134, 89})
	f.Add([]byte{239, 53, 239, 157, 165, 16, 120, 140, 57, 17, 46, 210, 203, 155, 243, 194, 116, 8, 66, 44, 42, 105, 129, 118, 80, 160, 115, 97, 11, 153, 130, 240, 27, 201, 53, 210, 143, 193, 39, 56, 237, 12, 21, 119, 140, 108, 137, 14, 56, 45, 236, 223, 126, 3, 247, 171, 177, 53, 195, 23})
	f.Add([]byte{80, 129, 151, 220, 143, 107, 165, 65, 153, 75, 253, 128, 164, 59, 122, 235, 169, 188, 70, 135, 143, 185, 125, 146, 236, 91, 9, 55, 199, 28, 143, 148, 109, 114, 158, 47, 191, 168, 239, 62, 236, 239, 2, 76, 87, 123, 26, 184, 221, 123, 128, 122, 132, 235, 165, 156})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstReference(t, scriptsFromBytes(data))
	})
}

// TestFixtureAgainstReference compares Order with the transliteration on
// the realistic appliance tree, as is and with a few REQUIREs added at
// random, which creates cycles inside a real-looking tree.
func TestFixtureAgainstReference(t *testing.T) {
	base := loadFixture(t)
	t.Run("as is", func(t *testing.T) { checkAgainstReference(t, base) })
	rng := rand.New(rand.NewPCG(3, 1402))
	for v := range 40 {
		scripts := slices.Clone(base)
		for range 1 + rng.IntN(3) {
			from, to := rng.IntN(len(scripts)), rng.IntN(len(scripts))
			if len(scripts[to].Provides) == 0 {
				continue
			}
			s := &scripts[from]
			s.Requires = append(slices.Clip(s.Requires), scripts[to].Provides[0])
			s.RequireLines = nil // hand-edited: no line numbers
		}
		t.Run(fmt.Sprint(v), func(t *testing.T) { checkAgainstReference(t, scripts) })
	}
}
