package rcorder

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
)

func FuzzParseReader(f *testing.F) {
	for _, p := range loadProbes(f) {
		for _, file := range p.fsys {
			f.Add(file.Data)
		}
	}
	f.Add([]byte("# PROVIDE: a \\\n b\r\n# REQUIRE:\tc\x00d\n# BEFORE: e\\\\\n# KEYWORD: nostart\nexit\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseReader("f", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		all := [][]string{s.Provides, s.Requires, s.Before, s.Keywords}
		lines := [][]int{s.ProvideLines, s.RequireLines, s.BeforeLines, s.KeywordLines}
		for k, toks := range all {
			if len(lines[k]) != len(toks) {
				t.Fatalf("%d tokens but %d line numbers", len(toks), len(lines[k]))
			}
			for i, tok := range toks {
				if tok == "" || strings.ContainsAny(tok, " \t\n\x00") {
					t.Fatalf("bad token %q", tok)
				}
				if s.HeaderText(lines[k][i]) == "" {
					t.Fatalf("token %q on line %d, which is not a recorded header line", tok, lines[k][i])
				}
			}
		}
		for i, h := range s.Header {
			if i > 0 && h.Line <= s.Header[i-1].Line {
				t.Fatalf("header lines not increasing: %v", s.Header)
			}
			if k, _ := headerKind([]byte(h.Text)); k == kindNone {
				t.Fatalf("recorded header line %q is not a header", h.Text)
			}
		}
	})
}

// scriptsFromBytes decodes fuzz input into a small rc.d tree.
func scriptsFromBytes(data []byte) []Script {
	if len(data) == 0 {
		return nil
	}
	n := 1 + int(data[0])%12
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	scripts := make([]Script, n)
	for i := range scripts {
		scripts[i].Path = fmt.Sprintf("rc.d/s%02d", i)
	}
	line := 1
	for k := 1; k+1 < len(data); k += 2 {
		op, arg := data[k], data[k+1]
		s := &scripts[int(op>>3)%n]
		name := names[int(arg)%len(names)]
		line++
		switch op % 8 {
		case 0, 1, 2:
			s.Requires = append(s.Requires, name)
			s.RequireLines = append(s.RequireLines, line)
		case 3, 4:
			s.Provides = append(s.Provides, name)
			s.ProvideLines = append(s.ProvideLines, line)
		case 5:
			s.Before = append(s.Before, name)
			s.BeforeLines = append(s.BeforeLines, line)
		case 6:
			s.Keywords = append(s.Keywords, []string{"nostart", "firstboot", "shutdown"}[int(arg)%3])
			s.KeywordLines = append(s.KeywordLines, line)
		case 7:
			line += int(arg) % 3 // make lines shared or not
		}
	}
	return scripts
}

// checkOrder verifies a Result against an independent reading of the
// rules, using gonum directly.
func checkOrder(t testing.TB, scripts []Script, f Filter) {
	t.Helper()
	r := Order(scripts, f)
	checkValid(t, r)

	// Printed = Order filtered, each printed script exactly once.
	var want []int
	for _, i := range r.Order {
		if f.Match(&scripts[i]) {
			want = append(want, i)
		}
	}
	if !slices.Equal(r.Printed, want) {
		t.Fatalf("Printed %v, want %v", r.Printed, want)
	}

	// Independent graph and exit status.
	prov := map[string][]int{}
	for i, s := range scripts {
		for _, p := range s.Provides {
			prov[p] = append(prov[p], i)
		}
	}
	g := simple.NewDirectedGraph()
	for i := range scripts {
		g.AddNode(simple.Node(int64(i)))
	}
	missing, self := false, false
	link := func(from, to int) {
		if from == to {
			self = true
		} else {
			g.SetEdge(simple.Edge{F: simple.Node(int64(from)), T: simple.Node(int64(to))})
		}
	}
	for i, s := range scripts {
		for _, q := range s.Requires {
			if len(prov[q]) == 0 {
				missing = true
			}
			for _, p := range prov[q] {
				link(i, p)
			}
		}
		for _, b := range s.Before {
			for _, p := range prov[b] {
				link(p, i)
			}
		}
	}
	sorted, err := topo.Sort(g)
	cyclic := err != nil || self
	if wantExit := map[bool]int{false: 0, true: 1}[missing || cyclic]; r.ExitCode() != wantExit {
		t.Fatalf("exit %d, want %d (missing %v, cyclic %v): %q", r.ExitCode(), wantExit, missing, cyclic, problemTexts(r))
	}
	if !cyclic {
		// Acyclic: levels are exactly the longest-path levels.
		lvl := make([]int, len(scripts))
		for k := len(sorted) - 1; k >= 0; k-- {
			v := sorted[k].ID()
			lvl[v] = 1
			for _, d := range graphFrom(g, v) {
				lvl[v] = max(lvl[v], lvl[d]+1)
			}
		}
		if !slices.Equal(lvl, r.Levels) {
			t.Fatalf("levels %v, longest path %v", r.Levels, lvl)
		}
	}

	// Every reported cycle is a real cycle, and its breaking line breaks it.
	checked := 0
	for i := range r.Problems {
		p := &r.Problems[i]
		if p.Kind != Cycle {
			continue
		}
		for k := range p.Cycle {
			u, v := p.Cycle[k], p.Cycle[(k+1)%len(p.Cycle)]
			if !(u == v && r.selfLoop[u]) && !g.HasEdgeFromTo(int64(u), int64(v)) {
				t.Fatalf("%s: %d does not wait for %d", p.Text, u, v)
			}
		}
		if p.Break != nil && checked < 4 {
			checked++
			assertBreaks(t, scripts, p)
		}
	}
	if cyclic && checked == 0 && !slices.ContainsFunc(r.Problems, func(p Problem) bool { return p.Kind == Cycle }) {
		t.Fatal("cyclic graph but no cycle reported")
	}
}

func graphFrom(g *simple.DirectedGraph, v int64) []int64 {
	var out []int64
	it := g.From(v)
	for it.Next() {
		out = append(out, it.Node().ID())
	}
	return out
}

func FuzzOrder(f *testing.F) {
	f.Add([]byte{5, 0, 1, 3, 1, 8, 0})
	f.Add([]byte{3, 3, 0, 11, 1, 19, 2, 0, 1, 8, 2, 16, 0})
	f.Add([]byte{11, 3, 0, 0, 0, 5, 0, 46, 1, 13, 2, 14, 5, 7, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		scripts := scriptsFromBytes(data)
		checkOrder(t, scripts, Filter{Skip: []string{"nostart"}})
	})
}

// TestRandomTrees runs the fuzz property on many random trees, so that
// plain `go test` exercises it.
func TestRandomTrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 400
	if testing.Short() {
		n = 50
	}
	for i := 0; i < n; i++ {
		data := make([]byte, 1+rng.IntN(60))
		for k := range data {
			data[k] = byte(rng.UintN(256))
		}
		t.Run("", func(t *testing.T) {
			checkOrder(t, scriptsFromBytes(data), Filter{Keep: []string{"shutdown", "firstboot"}})
		})
		if t.Failed() {
			os.WriteFile(t.TempDir()+"/x", data, 0o644)
			t.Fatalf("failing input: %v", data)
		}
	}
}
