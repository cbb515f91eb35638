package rcorder

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
	"gonum.org/v1/gonum/graph/traverse"
)

const (
	// A strongly connected component with m links among n scripts has at
	// most 2^(m-n+1)-1 elementary cycles. Up to this cyclomatic number all
	// of them are listed (gonum's Johnson algorithm); above it, listing
	// them could take exponential time, so Keel reports shortest cycles
	// (gonum breadth-first search) until every link of the component is
	// on a reported cycle or the cap below is reached.
	maxCyclomaticForAll = 10
	// At most this many covering cycles are reported per component.
	maxCoverCycles = 64
)

func cycleText(name string, files []string) string {
	return fmt.Sprintf("Circular dependency on provision `%s': %s.", name, strings.Join(files, " -> "))
}

// cycleKey identifies an elementary cycle independently of its rotation.
func cycleKey(c []int) string {
	if len(c) == 0 {
		return ""
	}
	m := 0
	for i := range c {
		if c[i] < c[m] {
			m = i
		}
	}
	var b strings.Builder
	for k := range c {
		b.WriteString(strconv.Itoa(c[(m+k)%len(c)]))
		b.WriteByte(',')
	}
	return b.String()
}

func rotateToMin(c []int) []int {
	m := 0
	for i := range c {
		if c[i] < c[m] {
			m = i
		}
	}
	return append(slices.Clone(c[m:]), c[:m]...)
}

// findCycles lists the cycles of every cyclic component, each with the
// header line whose removal breaks it.
func (r *Result) findCycles(sccs [][]graph.Node) []Problem {
	var comps [][]int
	for c, members := range sccs {
		if !r.cyclic[c] {
			continue
		}
		ids := make([]int, len(members))
		for i, m := range members {
			ids[i] = int(m.ID())
		}
		slices.Sort(ids)
		comps = append(comps, ids)
	}
	if len(comps) == 0 {
		return nil
	}
	slices.SortFunc(comps, func(a, b []int) int { return a[0] - b[0] })
	byPair := make(map[[2]int32][]int32)
	for i, e := range r.Edges {
		if r.cyclic[r.comp[e.From]] && r.comp[e.From] == r.comp[e.To] {
			k := [2]int32{int32(e.From), int32(e.To)}
			byPair[k] = append(byPair[k], int32(i))
		}
	}
	var out []Problem
	for _, ids := range comps {
		var cycles [][]int
		for _, v := range ids {
			if r.selfLoop[v] {
				cycles = append(cycles, []int{v})
			}
		}
		if len(ids) > 1 {
			cycles = append(cycles, r.componentCycles(ids)...)
		}
		out = append(out, r.cycleProblems(cycles, byPair)...)
	}
	return out
}

// componentCycles returns elementary cycles (without self-loops) of the
// strongly connected component ids, each rotated to start at its
// smallest script index.
func (r *Result) componentCycles(ids []int) [][]int {
	c := r.comp[ids[0]]
	sub := simple.NewDirectedGraph()
	for _, v := range ids {
		sub.AddNode(simple.Node(int64(v)))
	}
	var links [][2]int
	for _, v := range ids {
		for _, d := range r.deps[v] {
			if r.comp[d] == c {
				sub.SetEdge(simple.Edge{F: simple.Node(int64(v)), T: simple.Node(int64(d))})
				links = append(links, [2]int{v, int(d)})
			}
		}
	}
	var cycles [][]int
	if len(links)-len(ids)+1 <= maxCyclomaticForAll {
		for _, nodes := range topo.DirectedCyclesIn(sub) {
			if len(nodes) > 1 && nodes[0].ID() == nodes[len(nodes)-1].ID() {
				nodes = nodes[:len(nodes)-1]
			}
			cyc := make([]int, len(nodes))
			for i, nd := range nodes {
				cyc[i] = int(nd.ID())
			}
			cycles = append(cycles, rotateToMin(cyc))
		}
		slices.SortFunc(cycles, slices.Compare)
		return cycles
	}
	covered := make(map[[2]int]bool, len(links))
	for _, l := range links {
		if covered[l] {
			continue
		}
		if len(cycles) == maxCoverCycles {
			break
		}
		u, v := l[0], l[1]
		p := shortestPath(sub, v, u)
		if len(p) == 0 {
			continue // cannot happen inside a strongly connected component
		}
		cyc := append([]int{u}, p[:len(p)-1]...)
		for i := range cyc {
			covered[[2]int{cyc[i], cyc[(i+1)%len(cyc)]}] = true
		}
		cycles = append(cycles, rotateToMin(cyc))
	}
	return cycles
}

// shortestPath returns the nodes of a shortest path from src to dst in g
// (both ends included), found with gonum's breadth-first walk, or nil.
func shortestPath(g *simple.DirectedGraph, src, dst int) []int {
	parent := map[int64]int64{}
	bf := traverse.BreadthFirst{Traverse: func(e graph.Edge) bool {
		to := e.To().ID()
		if _, ok := parent[to]; !ok && to != int64(src) {
			parent[to] = e.From().ID()
		}
		return true
	}}
	if bf.Walk(g, simple.Node(int64(src)), func(n graph.Node, _ int) bool { return n.ID() == int64(dst) }) == nil {
		return nil
	}
	var rev []int
	for at := int64(dst); ; at = parent[at] {
		rev = append(rev, int(at))
		if at == int64(src) {
			break
		}
	}
	slices.Reverse(rev)
	return rev
}

// lineKey identifies one header line; lines of hand-built scripts without
// line numbers are told apart by kind and name instead.
type lineKey struct {
	file int32
	line int
	kind int8 // 0 REQUIRE, 1 BEFORE, 2 PROVIDE
	name string
}

func (k lineKey) decl() bool { return k.kind != 2 }

func keyFor(file, line int, kind int8, name string) lineKey {
	if line > 0 {
		return lineKey{file: int32(file), line: line, kind: kind}
	}
	return lineKey{file: int32(file), kind: kind, name: name}
}

// hopBreakers returns the header lines whose removal alone removes every
// reason for script u to wait for script v.
func (r *Result) hopBreakers(u, v int, byPair map[[2]int32][]int32) []lineKey {
	var cands []lineKey
	for n, ei := range byPair[[2]int32{int32(u), int32(v)}] {
		e := &r.Edges[ei]
		var just [2]lineKey
		if e.Kind == RequireEdge {
			just = [2]lineKey{keyFor(e.From, e.Line, 0, e.Name), keyFor(e.To, e.ProvideLine, 2, e.Name)}
		} else {
			just = [2]lineKey{keyFor(e.To, e.Line, 1, e.Name), keyFor(e.From, e.ProvideLine, 2, e.Name)}
		}
		if n == 0 {
			cands = append(cands, just[:]...)
			continue
		}
		cands = slices.DeleteFunc(cands, func(k lineKey) bool { return k != just[0] && k != just[1] })
	}
	return cands
}

func (r *Result) cycleProblems(cycles [][]int, byPair map[[2]int32][]int32) []Problem {
	type cand struct {
		key lineKey
		hop int
	}
	perCycle := make([][]cand, len(cycles))
	score := map[lineKey]int{}
	for ci, cyc := range cycles {
		seen := map[lineKey]bool{}
		for h := range cyc {
			u, v := cyc[h], cyc[(h+1)%len(cyc)]
			for _, k := range r.hopBreakers(u, v, byPair) {
				perCycle[ci] = append(perCycle[ci], cand{k, h})
				if !seen[k] {
					seen[k] = true
					score[k]++
				}
			}
		}
	}
	out := make([]Problem, 0, len(cycles))
	for ci, cyc := range cycles {
		last := len(cyc) - 1
		var best *cand
		better := func(c *cand) bool {
			if best == nil {
				return true
			}
			if c.key.decl() != best.key.decl() {
				return c.key.decl()
			}
			return score[c.key] > score[best.key]
		}
		// Prefer the link that closes the cycle, then the others in order.
		for _, want := range append([]int{last}, seqInts(last)...) {
			for i := range perCycle[ci] {
				c := &perCycle[ci][i]
				if c.hop == want && better(c) {
					best = c
				}
			}
		}
		first, closing := cyc[0], cyc[last]
		name := ""
		if es := byPair[[2]int32{int32(closing), int32(first)}]; len(es) > 0 {
			name = r.Edges[es[0]].Name
		}
		names := make([]string, 0, len(cyc)+1)
		for _, f := range cyc {
			names = append(names, r.Scripts[f].Path)
		}
		names = append(names, r.Scripts[first].Path)
		if len(cyc) == 1 {
			// FreeBSD meets a self-loop on re-entering the script and
			// prints it as "x -> x -> x".
			names = append(names, r.Scripts[first].Path)
		}
		p := Problem{
			Kind: Cycle, File: closing, Path: r.Scripts[closing].Path, Name: name,
			Cycle: slices.Clone(cyc), Text: cycleText(name, names),
		}
		if best != nil {
			p.Break = r.lineRef(best.key)
		}
		out = append(out, p)
	}
	return out
}

func seqInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func (r *Result) lineRef(k lineKey) *LineRef {
	s := &r.Scripts[k.file]
	ref := &LineRef{File: int(k.file), Path: s.Path, Line: k.line}
	if k.line > 0 {
		ref.Text = s.HeaderText(k.line)
	}
	if ref.Text == "" {
		ref.Text = [...]string{"# REQUIRE: ", "# BEFORE: ", "# PROVIDE: "}[k.kind] + k.name
	}
	return ref
}

// BreakText describes p.Break for humans, e.g.
// "cycle broken by removing line 3 of `t4/c': # REQUIRE: a". It is empty
// for problems that are not cycles.
func (p *Problem) BreakText() string {
	if p.Kind != Cycle {
		return ""
	}
	if p.Break == nil {
		return "no single header line breaks this cycle: every link in it is declared more than once"
	}
	if p.Break.Line == 0 {
		return fmt.Sprintf("cycle broken by removing from `%s': %s", p.Break.Path, p.Break.Text)
	}
	return fmt.Sprintf("cycle broken by removing line %d of `%s': %s", p.Break.Line, p.Break.Path, p.Break.Text)
}
