package rcorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// tree builds scripts from "path: header lines separated by |" specs.
func tree(t testing.TB, specs ...string) []Script {
	t.Helper()
	var out []Script
	for _, spec := range specs {
		path, body, _ := strings.Cut(spec, ":")
		body = strings.TrimSpace(body)
		var text string
		if body != "" {
			for _, l := range strings.Split(body, "|") {
				text += "# " + strings.TrimSpace(l) + "\n"
			}
		}
		s, err := ParseReader(path, strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func levelsString(r *Result) string {
	var lines []string
	for _, g := range r.LevelGroups() {
		lines = append(lines, strings.Join(g, " "))
	}
	return strings.Join(lines, " / ")
}

func problemTexts(r *Result) []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, p.Text)
	}
	return out
}

// checkValid asserts the invariants of every Result: each script printed
// exactly once, and every link that is not on a cycle satisfied.
func checkValid(t testing.TB, r *Result) {
	t.Helper()
	if len(r.Order) != len(r.Scripts) {
		t.Fatalf("Order has %d entries for %d scripts", len(r.Order), len(r.Scripts))
	}
	pos := make([]int, len(r.Scripts))
	seen := make([]bool, len(r.Scripts))
	for p, i := range r.Order {
		if seen[i] {
			t.Fatalf("script %d ordered twice", i)
		}
		seen[i] = true
		pos[i] = p
	}
	for _, e := range r.Edges {
		if r.cycleLink(e.From, e.To) {
			continue
		}
		// Downstream of a cycle FreeBSD may put both on one level (see
		// Result.Levels); the order must still have To first.
		if r.Levels[e.To] > r.Levels[e.From] || pos[e.To] >= pos[e.From] {
			t.Fatalf("%s waits for %s (%s %q) but is not after it: levels %d, %d",
				r.Scripts[e.From].Path, r.Scripts[e.To].Path, e.Kind, e.Name, r.Levels[e.From], r.Levels[e.To])
		}
	}
	for i, w := range r.WaitFor() {
		for _, d := range w {
			if pos[d] >= pos[i] {
				t.Fatalf("WaitFor(%d) contains %d, which is not earlier", i, d)
			}
		}
	}
}

func TestOrderRules(t *testing.T) {
	cases := []struct {
		name   string
		specs  []string
		filter Filter
		levels string // printed, "/" between levels
		exit   int
		msgs   []string // exact problem texts, in order
	}{
		{"level is 1 + highest requirement",
			[]string{"x: PROVIDE: x|REQUIRE: y", "y: PROVIDE: y|REQUIRE: z", "z: PROVIDE: z", "w: PROVIDE: w|REQUIRE: z"},
			Filter{}, "z / y w / x", 0, nil},
		{"ties broken by command-line order",
			[]string{"c: PROVIDE: c", "a: PROVIDE: a", "b: PROVIDE: b"}, Filter{}, "c a b", 0, nil},
		{"a requirement waits for every provider",
			[]string{"user: REQUIRE: mail", "m1: PROVIDE: mail|REQUIRE: base", "m2: PROVIDE: mail", "base: PROVIDE: base"},
			Filter{}, "m2 base / m1 / user", 0, nil},
		{"BEFORE makes every provider wait",
			[]string{"b1: PROVIDE: b", "b2: PROVIDE: b", "a: PROVIDE: a|BEFORE: b"},
			Filter{}, "a / b1 b2", 0, nil},
		{"BEFORE of an unknown provision warns",
			[]string{"a: PROVIDE: a|BEFORE: b zz", "b: PROVIDE: b"},
			Filter{}, "a / b", 0, []string{"file `a' is before unknown provision `zz'"}},
		{"BEFORE of a name only required is not unknown (FreeBSD)",
			[]string{"a: BEFORE: zz", "b: REQUIRE: zz"},
			Filter{}, "a b", 1, []string{"requirement `zz' in file `b' has no providers."}},
		{"missing requirement: error, still printed, ignored for levels",
			[]string{"a: PROVIDE: a|REQUIRE: nothere", "b: PROVIDE: b|REQUIRE: a"},
			Filter{}, "a / b", 1, []string{"requirement `nothere' in file `a' has no providers."}},
		{"missing requirement reported once per file and name",
			[]string{"a: REQUIRE: x x|REQUIRE: x"},
			Filter{}, "a", 1, []string{"requirement `x' in file `a' has no providers."}},
		{"file without header is printed",
			[]string{"empty:", "a: PROVIDE: a"}, Filter{}, "empty a", 0, nil},
		{"cycle is pushed to the end, as FreeBSD",
			[]string{"a: PROVIDE: a|REQUIRE: b", "b: PROVIDE: b|REQUIRE: c", "c: PROVIDE: c|REQUIRE: a", "d: PROVIDE: d"},
			Filter{}, "d / c / b / a", 1, []string{"Circular dependency on provision `a': a -> b -> c -> a."}},
		{"self requirement",
			[]string{"self: PROVIDE: self|REQUIRE: self", "x: PROVIDE: x"},
			Filter{}, "x / self", 1, []string{"Circular dependency on provision `self': self -> self -> self."}},
		// FreeBSD names the provision of a loop through a BEFORE line by
		// its internal fake provision (make_fake_provision).
		{"BEFORE own provision is a cycle",
			[]string{"a: PROVIDE: a|BEFORE: a"},
			Filter{}, "a", 1, []string{"Circular dependency on provision `fake_prov_00000000': a -> a -> a."}},
		// FreeBSD publishes self's provision with the sequence of its
		// inner (re-entered) visit, so x lands on self's level: FreeBSD's
		// -p prints "self x" on one line. Keel keeps the level and lists
		// x after self.
		{"a dependent of a cycle stays after it",
			[]string{"x: REQUIRE: self", "self: PROVIDE: self|REQUIRE: self"},
			Filter{}, "self x", 1, []string{"Circular dependency on provision `self': self -> self -> self."}},
		{"a dependent of a cycle is listed after it within a level",
			[]string{"a: PROVIDE: a", "x: REQUIRE: self", "self: PROVIDE: self|REQUIRE: self"},
			Filter{}, "a / self x", 1, []string{"Circular dependency on provision `self': self -> self -> self."}},
		// c's self-loop is never traced by FreeBSD's walk (c is reached
		// after a's loop is found); Keel reports it in FreeBSD's form.
		{"untraced self-loop in FreeBSD's form",
			[]string{"a: PROVIDE: n2 n0|REQUIRE: n2", "b: PROVIDE: n0", "c: PROVIDE: n2|REQUIRE: n2", "d: REQUIRE: n0"},
			Filter{}, "b / c / a d", 1, []string{
				"Circular dependency on provision `n2': a -> c -> a.",
				"Circular dependency on provision `n2': a -> a -> a.",
				"Circular dependency on provision `n2': c -> c -> c.",
			}},
		{"every cycle is reported",
			[]string{"a: PROVIDE: a|REQUIRE: b", "b: PROVIDE: b|REQUIRE: a c", "c: PROVIDE: c|REQUIRE: b", "p: PROVIDE: p|REQUIRE: q", "q: PROVIDE: q|REQUIRE: p"},
			Filter{}, "", 1, nil},
		{"-k keeps any matching keyword",
			[]string{"a: PROVIDE: a|KEYWORD: one", "b: PROVIDE: b|REQUIRE: a|KEYWORD: two", "c: PROVIDE: c|REQUIRE: b"},
			Filter{Keep: []string{"one", "two"}}, "a / b", 0, nil},
		{"-s skips any matching keyword, levels unchanged",
			[]string{"a: PROVIDE: a|KEYWORD: nostart firstboot", "b: PROVIDE: b|REQUIRE: a", "c: PROVIDE: c|REQUIRE: b|KEYWORD: shutdown"},
			Filter{Skip: []string{"firstboot", "nostart"}}, "b / c", 0, nil},
		{"-k and -s together",
			[]string{"a: KEYWORD: x y", "b: KEYWORD: x", "c: KEYWORD: y"},
			Filter{Keep: []string{"x"}, Skip: []string{"y"}}, "b", 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Order(tree(t, c.specs...), c.filter)
			checkValid(t, r)
			if c.levels != "" {
				if got := levelsString(r); got != c.levels {
					t.Errorf("levels %q, want %q", got, c.levels)
				}
			}
			if got := r.ExitCode(); got != c.exit {
				t.Errorf("exit %d, want %d", got, c.exit)
			}
			if c.msgs != nil || c.exit == 0 {
				if got := problemTexts(r); !slices.Equal(got, c.msgs) {
					t.Errorf("problems %q, want %q", got, c.msgs)
				}
			}
		})
	}
}

func TestFilterDoesNotChangeLevels(t *testing.T) {
	specs := []string{"a: PROVIDE: a|KEYWORD: nostart", "b: PROVIDE: b|REQUIRE: a", "c: PROVIDE: c|REQUIRE: b|KEYWORD: firstboot"}
	all := Order(tree(t, specs...), Filter{})
	some := Order(tree(t, specs...), Filter{Skip: []string{"nostart", "firstboot"}})
	if !slices.Equal(all.Levels, some.Levels) || !slices.Equal(all.Order, some.Order) {
		t.Fatalf("filter changed the order: %v vs %v", all.Levels, some.Levels)
	}
	if !slices.Equal(some.Printed, []int{1}) {
		t.Fatalf("Printed = %v", some.Printed)
	}
}

func TestEveryCycleAndBreakingLine(t *testing.T) {
	scripts := tree(t,
		"a: PROVIDE: a|REQUIRE: b",
		"b: PROVIDE: b|REQUIRE: a|REQUIRE: c",
		"c: PROVIDE: c|REQUIRE: b",
		"p: PROVIDE: p|REQUIRE: q|BEFORE: q",
		"q: PROVIDE: q",
	)
	r := Order(scripts, Filter{})
	var cycles []*Problem
	for i := range r.Problems {
		if r.Problems[i].Kind == Cycle {
			cycles = append(cycles, &r.Problems[i])
			if !errors.Is(&r.Problems[i], ErrCycle) {
				t.Error("cycle problem does not match ErrCycle")
			}
		}
	}
	keys := map[string]bool{}
	for _, c := range cycles {
		keys[cycleKey(c.Cycle)] = true
	}
	for _, want := range [][]int{{0, 1}, {1, 2}, {3, 4}} {
		if !keys[cycleKey(want)] {
			t.Errorf("cycle %v not reported; got %q", want, problemTexts(r))
		}
	}
	if len(cycles) != 3 {
		t.Errorf("%d cycles reported, want 3: %q", len(cycles), problemTexts(r))
	}
	for _, c := range cycles {
		assertBreaks(t, scripts, c)
	}
}

// assertBreaks removes the header line c.Break names and checks that the
// cycle is gone.
func assertBreaks(t testing.TB, scripts []Script, c *Problem) {
	t.Helper()
	if c.Break == nil {
		t.Fatalf("no breaking line for %s", c.Text)
	}
	fixed := slices.Clone(scripts)
	fixed[c.Break.File] = withoutLine(scripts[c.Break.File], c.Break.Line)
	r := Order(fixed, Filter{})
	for _, p := range r.Problems {
		if p.Kind == Cycle && cycleKey(p.Cycle) == cycleKey(c.Cycle) {
			t.Fatalf("removing %s did not break %s", c.Break, c.Text)
		}
	}
}

func withoutLine(s Script, line int) Script {
	out := Script{Path: s.Path}
	keep := func(toks []string, lines []int, dst *[]string, dl *[]int) {
		for i, tok := range toks {
			if lines[i] != line {
				*dst = append(*dst, tok)
				*dl = append(*dl, lines[i])
			}
		}
	}
	keep(s.Provides, s.ProvideLines, &out.Provides, &out.ProvideLines)
	keep(s.Requires, s.RequireLines, &out.Requires, &out.RequireLines)
	keep(s.Before, s.BeforeLines, &out.Before, &out.BeforeLines)
	keep(s.Keywords, s.KeywordLines, &out.Keywords, &out.KeywordLines)
	return out
}

func TestBreakPrefersLineBreakingMostCycles(t *testing.T) {
	// a waits for b through one line; b1 and b2 both provide b and both
	// wait for a: removing a's REQUIRE breaks both cycles.
	scripts := tree(t, "a: PROVIDE: a|REQUIRE: b", "b1: PROVIDE: b|REQUIRE: a", "b2: PROVIDE: b|REQUIRE: a")
	r := Order(scripts, Filter{})
	n := 0
	for i := range r.Problems {
		p := &r.Problems[i]
		if p.Kind != Cycle {
			continue
		}
		n++
		if p.Break == nil || p.Break.Path != "a" || p.Break.Text != "# REQUIRE: b" {
			t.Errorf("%s: break %v, want a's REQUIRE line", p.Text, p.Break)
		}
		if got, want := p.BreakText(), "cycle broken by removing line 2 of `a': # REQUIRE: b"; got != want {
			t.Errorf("BreakText %q, want %q", got, want)
		}
	}
	if n != 2 {
		t.Fatalf("%d cycles, want 2", n)
	}
}

func TestNoSingleBreakingLine(t *testing.T) {
	// Each link is declared on two lines: no single removal helps.
	scripts := tree(t, "a: PROVIDE: a|PROVIDE: x|REQUIRE: b|REQUIRE: y", "b: PROVIDE: b|PROVIDE: y|REQUIRE: a|REQUIRE: x")
	r := Order(scripts, Filter{})
	for _, p := range r.Problems {
		if p.Kind == Cycle && p.Break != nil {
			t.Errorf("%s: break %v, but no single line breaks it", p.Text, p.Break)
		}
	}
	if r.ExitCode() != 1 {
		t.Fatal("want exit 1")
	}
}

func TestLargeComponentIsCoveredNotEnumerated(t *testing.T) {
	// A complete digraph on 30 scripts has astronomically many
	// elementary cycles; Keel must answer quickly with a covering set.
	var specs []string
	names := make([]string, 30)
	for i := range names {
		names[i] = string(rune('A'+i/26)) + string(rune('a'+i%26))
	}
	for _, n := range names {
		specs = append(specs, n+": PROVIDE: "+n+"|REQUIRE: "+strings.Join(names, " "))
	}
	r := Order(tree(t, specs...), Filter{})
	checkValid(t, r)
	n := 0
	for _, p := range r.Problems {
		if p.Kind == Cycle {
			n++
		}
	}
	if n == 0 || n > maxCoverCycles+len(names) {
		t.Fatalf("%d cycles reported", n)
	}
}

func TestWaitForAndDeps(t *testing.T) {
	r := Order(tree(t, "a: PROVIDE: a|REQUIRE: b", "b: PROVIDE: b|REQUIRE: a", "c: PROVIDE: c|REQUIRE: a b", "d: PROVIDE: d|BEFORE: c"), Filter{})
	checkValid(t, r)
	w := r.WaitFor()
	slices.Sort(w[2])
	if !slices.Equal(w[2], []int{0, 1, 3}) {
		t.Errorf("WaitFor(c) = %v", w[2])
	}
	if len(w[0])+len(w[1]) != 1 {
		t.Errorf("exactly one cycle link must survive in WaitFor: %v %v", w[0], w[1])
	}
	if !r.InCycle(0) || r.InCycle(2) {
		t.Error("InCycle wrong")
	}
	if got := r.Deps(3); len(got) != 0 {
		t.Errorf("Deps(d) = %v", got)
	}
}

func TestExplain(t *testing.T) {
	r := Order(tree(t, "x: PROVIDE: x|REQUIRE: y w", "y: PROVIDE: y|REQUIRE: z", "z: PROVIDE: z", "w: PROVIDE: w|REQUIRE: nothere", "v: PROVIDE: v|BEFORE: z"), Filter{})
	got, err := r.Explain("x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"x: level 4 of 4",
		"x (level 4) requires `y' (line 2), provided by y (level 3)",
		"y (level 3) requires `z' (line 2), provided by z (level 2)",
		"z (level 2) provides `z', and v (level 1) is BEFORE it (line 2)",
		"v (level 1) waits for nothing",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("explanation lacks %q:\n%s", want, got)
		}
	}
	got, _ = r.Explain("nothere") // not a script, not provided
	if got != "" {
		t.Errorf("Explain(nothere) = %q", got)
	}
	if _, err := r.Explain("nothere"); !errors.Is(err, ErrUnknownName) {
		t.Errorf("err = %v, want ErrUnknownName", err)
	}
	got, _ = r.Explain("w")
	if !strings.Contains(got, "requires `nothere', which nothing provides") {
		t.Errorf("missing requirement not explained:\n%s", got)
	}
	rc := Order(tree(t, "a: PROVIDE: a|REQUIRE: b", "b: PROVIDE: b|REQUIRE: a"), Filter{})
	got, _ = rc.Explain("a")
	if !strings.Contains(got, "is on a dependency cycle") {
		t.Errorf("cycle not explained:\n%s", got)
	}
	// x shares self's level (FreeBSD's walk): said so, not hidden.
	rt := Order(tree(t, "x: REQUIRE: self", "self: PROVIDE: self|REQUIRE: self"), Filter{})
	got, _ = rt.Explain("x")
	if !strings.Contains(got, "x (level 1) sits where FreeBSD's walk of a dependency cycle put it") {
		t.Errorf("level set by the walk not explained:\n%s", got)
	}
}

func TestRenderers(t *testing.T) {
	r := Order(tree(t,
		"a: PROVIDE: a|REQUIRE: nothere",
		"b: PROVIDE: b|REQUIRE: a|KEYWORD: nostart",
		"c: PROVIDE: c|BEFORE: a",
		"s: PROVIDE: s|REQUIRE: s"), Filter{Skip: []string{"nostart"}})
	var list, lv, probs, dotb, js bytes.Buffer
	r.WriteList(&list)
	if got := list.String(); got != "c\na\ns\n" {
		t.Errorf("list %q", got)
	}
	r.WriteLevels(&lv)
	if got := lv.String(); got != "c\na s\n" {
		t.Errorf("levels %q", got)
	}
	r.WriteProblems(&probs, "rcorder: ")
	for _, want := range []string{
		"rcorder: requirement `nothere' in file `a' has no providers.\n",
		"rcorder: Circular dependency on provision `s': s -> s -> s.\n",
		"rcorder: cycle broken by removing line 2 of `s': # REQUIRE: s\n",
	} {
		if !strings.Contains(probs.String(), want) {
			t.Errorf("problems lack %q:\n%s", want, probs.String())
		}
	}
	if err := r.WriteDOT(&dotb); err != nil {
		t.Fatal(err)
	}
	d := dotb.String()
	for _, want := range []string{"digraph rcorder {", "b -> a;", "a -> c [style=dashed];", "s -> s [color=red];", `"missing: nothere"`, `a -> "missing: nothere" [color=red];`, "b [style=dotted];", "s [color=red];"} {
		if !strings.Contains(d, want) {
			t.Errorf("DOT lacks %q:\n%s", want, d)
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Files []struct {
			Path  string
			Level int
		}
		Levels   [][]string
		Edges    []struct{ From, To, Kind, Name string }
		Problems []struct {
			Kind, Severity, Message string
			Cycle                   []string
			Break                   *struct{ File, Text string }
		}
		Exit int
	}
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Exit != 1 || len(out.Files) != 3 || out.Files[0].Path != "c" || len(out.Levels) != 2 || len(out.Edges) != 3 {
		t.Errorf("JSON %+v", out)
	}
	var kinds []string
	for _, p := range out.Problems {
		kinds = append(kinds, p.Kind+"/"+p.Severity)
	}
	if !slices.Equal(kinds, []string{"cycle/error", "missing/error"}) { // FreeBSD's walk starts at the last file
		t.Errorf("JSON problem kinds %v", kinds)
	}
}

func TestOrderAllocsDoNotGrowWithTree(t *testing.T) {
	fsys, names := genFS(2000, 3)
	scripts, _ := Parse(fsys, names...)
	small := testing.AllocsPerRun(3, func() { Order(scripts[:200], Filter{}) })
	large := testing.AllocsPerRun(3, func() { Order(scripts, Filter{}) })
	// An acyclic tree is ordered with flat arrays: allocations grow with
	// the number of map and slice doublings, not with every script.
	if large > 0.1*2000 || small > 0.5*200 {
		t.Errorf("Order allocations: %.0f for 200 scripts, %.0f for 2000", small, large)
	}
}
