package rcorder

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
)

// Sentinel errors; every Problem unwraps to one of them.
var (
	// ErrNoProviders: a REQUIRE names something no script provides.
	ErrNoProviders = errors.New("requirement has no providers")
	// ErrCycle: scripts wait for each other.
	ErrCycle = errors.New("circular dependency")
	// ErrUnknownBefore: a BEFORE names something nobody provides or requires (warning).
	ErrUnknownBefore = errors.New("before unknown provision")
	// ErrCarriageReturn: a header line ended in CR, which was stripped (warning).
	ErrCarriageReturn = errors.New("carriage return in header")
	// ErrUnknownName: Explain was asked about a name no script has or provides.
	ErrUnknownName = errors.New("no such script or provision")
)

// Filter selects which scripts are printed, like rcorder's -k and -s.
// A script is kept when Keep is empty or one of its keywords is in Keep,
// and it is not skipped by having a keyword in Skip. Filtering never
// changes the graph or the levels.
type Filter struct {
	Keep []string // -k: keep a script if any of its keywords matches
	Skip []string // -s: skip a script if any of its keywords matches
}

// Match reports whether s passes the filter.
func (f Filter) Match(s *Script) bool {
	if len(f.Keep) > 0 && !anyIn(s.Keywords, f.Keep) {
		return false
	}
	return !anyIn(s.Keywords, f.Skip)
}

func anyIn(have, want []string) bool {
	for _, h := range have {
		if slices.Contains(want, h) {
			return true
		}
	}
	return false
}

// EdgeKind says which header line created an Edge.
type EdgeKind int

const (
	// RequireEdge: From has "# REQUIRE: Name" and To provides Name.
	RequireEdge EdgeKind = iota
	// BeforeEdge: To has "# BEFORE: Name" and From provides Name.
	BeforeEdge
)

// String returns "require" or "before".
func (k EdgeKind) String() string {
	if k == BeforeEdge {
		return "before"
	}
	return "require"
}

// Edge is one dependency: script From waits for script To. There is one
// Edge per (header token, provider) pair, so the same two scripts may be
// joined by several edges.
type Edge struct {
	From, To int // indices into Result.Scripts
	Kind     EdgeKind
	Name     string // the provision named by the REQUIRE or BEFORE token
	// Line is the line of the REQUIRE (in From) or BEFORE (in To) token;
	// ProvideLine the line of the matching PROVIDE (in To for a require
	// edge, in From for a before edge). Zero when unknown.
	Line, ProvideLine int
}

// ProblemKind classifies a Problem.
type ProblemKind int

const (
	// MissingProvider is an error: exit status 1.
	MissingProvider ProblemKind = iota
	// Cycle is an error: exit status 1.
	Cycle
	// UnknownBefore is a warning.
	UnknownBefore
	// CarriageReturn is a warning.
	CarriageReturn
)

var problemKindNames = [...]string{"missing", "cycle", "unknown-before", "carriage-return"}

// String returns a short stable name ("missing", "cycle", ...), used in JSON.
func (k ProblemKind) String() string {
	if int(k) < len(problemKindNames) {
		return problemKindNames[k]
	}
	return fmt.Sprintf("ProblemKind(%d)", int(k))
}

// LineRef names one header line of one script.
type LineRef struct {
	File int    // index into Result.Scripts
	Path string // the script's path
	Line int    // 1-based, 0 when unknown
	Text string // the header line, e.g. "# REQUIRE: a"
}

// String renders "path:line: text".
func (l LineRef) String() string {
	if l.Line == 0 {
		return fmt.Sprintf("%s: %s", l.Path, l.Text)
	}
	return fmt.Sprintf("%s:%d: %s", l.Path, l.Line, l.Text)
}

// Problem is a missing provider, a cycle, or a warning. Error returns
// FreeBSD's text without the "rcorder: " prefix; errors.Is matches the
// sentinel of its kind.
type Problem struct {
	Kind ProblemKind
	File int    // index of the script concerned; for a cycle, where it was found
	Path string // that script's path
	Line int    // header line concerned, 0 when unknown or not applicable
	Name string // the requirement, provision or BEFORE target concerned
	// Cycle lists the scripts of a cycle, each waiting for the next and
	// the last for the first (indices into Result.Scripts).
	Cycle []int
	// Break is the single header line whose removal breaks this cycle,
	// or nil when no single line does (each link is declared twice).
	Break *LineRef
	// Text is the message, e.g. "requirement `x' in file `f' has no providers."
	Text string
}

// Error returns the FreeBSD-format message.
func (p *Problem) Error() string { return p.Text }

// Unwrap returns the sentinel matching Kind.
func (p *Problem) Unwrap() error {
	switch p.Kind {
	case MissingProvider:
		return ErrNoProviders
	case Cycle:
		return ErrCycle
	case UnknownBefore:
		return ErrUnknownBefore
	default:
		return ErrCarriageReturn
	}
}

// IsError reports whether the problem makes rcorder exit with status 1.
func (p *Problem) IsError() bool { return p.Kind == MissingProvider || p.Kind == Cycle }

// Result is the outcome of Order. It is immutable once returned: all its
// methods only read it and are safe for concurrent use; callers must not
// modify its slices.
type Result struct {
	// Scripts are the inputs, in command-line order; every index in a
	// Result refers to this slice.
	Scripts []Script
	// Order lists every script in boot order: by level, then by
	// command-line position.
	Order []int
	// Printed is Order restricted to the scripts that pass Filter.
	Printed []int
	// Levels gives each script's 1-based level, numbered densely (1, 2,
	// 3, ...), as FreeBSD's rcorder -p numbers its lines. A script's
	// level is above those of all scripts it waits for, except along a
	// cycle and, downstream of a cycle, where it may share the level of a
	// script it waits for (FreeBSD's walk does that; Order then lists it
	// after that script). WaitFor gives the exact DAG.
	Levels []int
	// Edges holds every dependency, grouped by script (REQUIRE then BEFORE).
	Edges []Edge
	// Problems holds errors and warnings, in the order rcorder prints them.
	Problems []Problem
	// Filter is the filter Printed was made with.
	Filter Filter

	comp     []int32 // strongly connected component of each script
	cyclic   []bool  // per component: has a cycle (size > 1 or self-loop)
	selfLoop []bool  // per script
	deps     [][]int32
	pos      []int // position of each script in Order
	maxLevel int
}

// Failed reports whether any requirement is missing or any cycle exists.
func (r *Result) Failed() bool {
	for i := range r.Problems {
		if r.Problems[i].IsError() {
			return true
		}
	}
	return false
}

// ExitCode is rcorder's exit status: 1 if Failed, else 0.
func (r *Result) ExitCode() int {
	if r.Failed() {
		return 1
	}
	return 0
}

// InCycle reports whether script i is part of a dependency cycle.
func (r *Result) InCycle(i int) bool { return r.cyclic[r.comp[i]] }

// Deps returns the scripts that script i waits for directly (REQUIRE and
// BEFORE alike, cycles included), without duplicates, in edge order.
func (r *Result) Deps(i int) []int {
	out := make([]int, len(r.deps[i]))
	for k, d := range r.deps[i] {
		out[k] = int(d)
	}
	return out
}

// WaitFor returns the DAG a boot scheduler should follow: for each script
// (indexed like Scripts), the scripts it must wait for. It is Deps minus
// the links that point forward in Order, which only exist inside cycles,
// so the result is always acyclic and consistent with Order. Scripts
// outside Printed are included; a scheduler that does not run them
// should treat them as done.
func (r *Result) WaitFor() [][]int {
	out := make([][]int, len(r.Scripts))
	for i := range r.Scripts {
		var w []int
		for _, d := range r.deps[i] {
			if r.pos[d] < r.pos[i] {
				w = append(w, int(d))
			}
		}
		out[i] = w
	}
	return out
}

// Order computes the boot order of scripts with FreeBSD rcorder(8)
// semantics and the problems found. scripts is not modified; f only
// selects Result.Printed.
//
// A script's level is 1 plus the highest level among the scripts it waits
// for (every provider of each REQUIRE, and every script with a BEFORE on
// one of its provisions). On a tree with cycles the levels are exactly
// FreeBSD's (its depth-first walk, reproduced in freebsd.go, pushes the
// scripts found on a cycle after everything ordered so far), with one
// correction: where FreeBSD would put a script on a lower level than a
// script it waits for outside its own cycle, Keel moves it to the lowest
// existing level above that script (raiseLevels). Where FreeBSD puts the
// two on the same level, Keel keeps the level and lists the script after
// the one it waits for. So every REQUIRE and BEFORE that is not part of a
// cycle holds in Order; ties are otherwise broken by command-line order.
func Order(scripts []Script, f Filter) *Result {
	n := len(scripts)
	r := &Result{Scripts: scripts, Filter: f}

	// 1. FreeBSD's walk, for levels and for the order of its messages.
	em := newEmulator(scripts)
	raw := em.run()

	// 2. The edges, grouped by From, and each script's direct
	// dependencies without duplicates.
	r.buildEdges(em)

	// 3. Strongly connected components, with gonum. The walk above meets
	// a loop exactly when the graph has a cycle (FuzzOrder checks this
	// against gonum's topological sort), so an acyclic tree - the normal
	// case - skips building the gonum graph: every script is its own
	// component and the walk's levels are already the longest paths.
	r.comp = make([]int32, n)
	var sccs [][]graph.Node
	cyclic := em.loops > 0 || slices.Contains(r.selfLoop, true)
	if cyclic {
		g := simple.NewDirectedGraph()
		for i := 0; i < n; i++ {
			g.AddNode(simple.Node(int64(i)))
		}
		for i, ds := range r.deps {
			for _, d := range ds {
				// Self-edges never reach gonum (its simple graphs panic
				// on them); they are in r.selfLoop.
				g.SetEdge(simple.Edge{F: simple.Node(int64(i)), T: simple.Node(int64(d))})
			}
		}
		// gonum returns every component after the ones it waits for.
		sccs = topo.TarjanSCC(g)
		r.cyclic = make([]bool, len(sccs))
		for c, members := range sccs {
			for _, m := range members {
				r.comp[m.ID()] = int32(c)
				if r.selfLoop[m.ID()] {
					r.cyclic[c] = true
				}
			}
			if len(members) > 1 {
				r.cyclic[c] = true
			}
		}
		// 4. Levels: FreeBSD's, raised where needed so that every link
		// between different components points backwards.
		raiseLevels(raw, sccs, r.comp, r.deps)
	} else {
		r.cyclic = make([]bool, n)
		for i := range r.comp {
			r.comp[i] = int32(i)
		}
	}
	lvl := raw
	r.Levels = denseLevels(lvl)
	for _, l := range r.Levels {
		r.maxLevel = max(r.maxLevel, l)
	}
	r.Order = make([]int, n)
	for i := range r.Order {
		r.Order[i] = i
	}
	slices.SortStableFunc(r.Order, func(a, b int) int { return r.Levels[a] - r.Levels[b] })
	if cyclic {
		r.orderWithinLevels()
	}
	r.pos = make([]int, n)
	r.Printed = make([]int, 0, n)
	for p, i := range r.Order {
		r.pos[i] = p
		if f.Match(&scripts[i]) {
			r.Printed = append(r.Printed, i)
		}
	}

	// 5. Problems, in the order rcorder reports them.
	r.collectProblems(em, sccs)
	return r
}

type provRef struct {
	file int32
	line int32
}

// buildEdges fills r.Edges (sorted by From: REQUIRE edges, then BEFORE
// edges), r.deps and r.selfLoop.
func (r *Result) buildEdges(em *emulator) {
	scripts := r.Scripts
	n := len(scripts)
	// Providers of each provision, flat: provs[provOff[p]:provOff[p+1]].
	provOff := make([]int32, len(em.provs)+1)
	for i := range scripts {
		pids, _, _ := em.provIDs(i)
		for _, p := range pids {
			provOff[p+1]++
		}
	}
	for p := 1; p < len(provOff); p++ {
		provOff[p] += provOff[p-1]
	}
	provs := make([]provRef, provOff[len(provOff)-1])
	fill := slices.Clone(provOff[:len(provOff)-1])
	for i := range scripts {
		pids, _, _ := em.provIDs(i)
		for k, p := range pids {
			provs[fill[p]] = provRef{file: int32(i), line: int32(lineAt(scripts[i].ProvideLines, k))}
			fill[p]++
		}
	}
	providers := func(p int32) []provRef { return provs[provOff[p]:provOff[p+1]] }

	// Count edges per From, then place them (a counting sort).
	count := make([]int32, n+1)
	for i := range scripts {
		_, rids, bids := em.provIDs(i)
		for _, p := range rids {
			count[i+1] += int32(len(providers(p)))
		}
		for _, p := range bids {
			for _, pr := range providers(p) {
				count[pr.file+1]++
			}
		}
	}
	for i := 1; i <= n; i++ {
		count[i] += count[i-1]
	}
	r.Edges = make([]Edge, count[n])
	next := slices.Clone(count[:n])
	for i := range scripts {
		s := &scripts[i]
		_, rids, _ := em.provIDs(i)
		for k, p := range rids {
			for _, pr := range providers(p) {
				r.Edges[next[i]] = Edge{From: i, To: int(pr.file), Kind: RequireEdge, Name: s.Requires[k],
					Line: lineAt(s.RequireLines, k), ProvideLine: int(pr.line)}
				next[i]++
			}
		}
	}
	for i := range scripts {
		s := &scripts[i]
		_, _, bids := em.provIDs(i)
		for k, p := range bids {
			for _, pr := range providers(p) {
				f := pr.file
				r.Edges[next[f]] = Edge{From: int(f), To: i, Kind: BeforeEdge, Name: s.Before[k],
					Line: lineAt(s.BeforeLines, k), ProvideLine: int(pr.line)}
				next[f]++
			}
		}
	}

	r.selfLoop = make([]bool, n)
	r.deps = make([][]int32, n)
	stamp := make([]int32, n) // stamp[to] == from+1: already a dependency
	flat := make([]int32, 0, len(r.Edges))
	for i := 0; i < n; i++ {
		start := len(flat)
		for _, e := range r.Edges[count[i]:count[i+1]] {
			if e.To == i {
				r.selfLoop[i] = true
				continue
			}
			if stamp[e.To] == int32(i+1) {
				continue
			}
			stamp[e.To] = int32(i + 1)
			flat = append(flat, int32(e.To))
		}
		r.deps[i] = flat[start:len(flat):len(flat)]
	}
}

// raiseLevels raises, in place, the FreeBSD sequence numbers raw of the
// scripts that FreeBSD would put on a lower level than a script they wait
// for outside their own strongly connected component. On a tree with cycles
// FreeBSD can do that in two ways: a file re-entered along a cycle
// publishes its provisions with the sequence of its inner visit, lower
// than the one it ends with; and its second unlink from the file list
// relinks finished files, which are then walked again with no
// requirements left (sequence 1, or the end for cycle members).
//
// A raised script joins the lowest existing level above everything it
// waits for, and only becomes a new last level when there is none, so no
// other script changes level group. sccs must list every component after
// the ones it waits for (gonum's TarjanSCC order).
func raiseLevels(raw []int, sccs [][]graph.Node, comp []int32, deps [][]int32) {
	var vals []int // distinct sequence numbers in use, ascending; built lazily
	for _, members := range sccs {
		for _, m := range members {
			v := m.ID()
			need := raw[v] // max of v and what it waits for in other components
			for _, d := range deps[v] {
				if comp[d] != comp[v] {
					need = max(need, raw[d])
				}
			}
			if need == raw[v] {
				continue // at most a tie, which orderWithinLevels settles
			}
			if vals == nil {
				vals = slices.Clone(raw)
				slices.Sort(vals)
				vals = slices.Compact(vals)
			}
			k, found := slices.BinarySearch(vals, need)
			if found {
				k++
			}
			if k == len(vals) {
				vals = append(vals, need+1)
			}
			raw[v] = vals[k]
		}
	}
}

// orderWithinLevels reorders each level of r.Order in which a script
// waits for another script of the same level outside its own cycle
// (possible only downstream of a cycle, where FreeBSD puts both on one
// level): the level is then listed in the topological order of those
// links that is smallest in command-line order. Other levels keep
// command-line order.
func (r *Result) orderWithinLevels() {
	var (
		slot  []int32 // slot[script] = 1 + its position in the current level, else 0
		indeg []int32
		rev   [][]int32
		ready intHeap
	)
	for start := 0; start < len(r.Order); {
		end := start + 1
		for end < len(r.Order) && r.Levels[r.Order[end]] == r.Levels[r.Order[start]] {
			end++
		}
		group := r.Order[start:end]
		start = end
		if len(group) < 2 {
			continue
		}
		if slot == nil {
			slot = make([]int32, len(r.Scripts))
		}
		for k, v := range group {
			slot[v] = int32(k + 1)
		}
		links := 0
		for _, v := range group {
			for _, d := range r.deps[v] {
				if slot[d] != 0 && r.comp[d] != r.comp[v] {
					links++
				}
			}
		}
		if links > 0 {
			indeg = slices.Grow(indeg[:0], len(group))[:len(group)]
			clear(indeg)
			rev = slices.Grow(rev[:0], len(group))[:len(group)]
			for k := range rev {
				rev[k] = rev[k][:0]
			}
			for k, v := range group {
				for _, d := range r.deps[v] {
					if slot[d] != 0 && r.comp[d] != r.comp[v] {
						indeg[k]++
						rev[slot[d]-1] = append(rev[slot[d]-1], int32(k))
					}
				}
			}
			// Kahn's algorithm; group is in command-line order, so the
			// smallest ready position is the earliest on the command line.
			ready = ready[:0]
			for k := range group {
				if indeg[k] == 0 {
					heap.Push(&ready, k)
				}
			}
			out := make([]int, 0, len(group))
			for ready.Len() > 0 {
				k := heap.Pop(&ready).(int)
				out = append(out, group[k])
				for _, w := range rev[k] {
					if indeg[w]--; indeg[w] == 0 {
						heap.Push(&ready, int(w))
					}
				}
			}
			copy(group, out) // links between components cannot form a cycle
		}
		for _, v := range group {
			slot[v] = 0
		}
	}
}

// intHeap is a min-heap of ints for container/heap.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func lineAt(lines []int, k int) int {
	if k < len(lines) {
		return lines[k]
	}
	return 0
}

// denseLevels renumbers raw levels 1, 2, 3, ... keeping their order.
func denseLevels(raw []int) []int {
	vals := slices.Clone(raw)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	out := make([]int, len(raw))
	if len(vals) > 0 && vals[len(vals)-1] == len(vals) && vals[0] == 1 {
		copy(out, raw) // already dense: the common, acyclic case
		return out
	}
	for i, v := range raw {
		k, _ := slices.BinarySearch(vals, v)
		out[i] = k + 1
	}
	return out
}

func (r *Result) collectProblems(em *emulator, sccs [][]graph.Node) {
	scripts := r.Scripts
	for i := range scripts {
		if crs := scripts[i].CRLines; len(crs) > 0 {
			lines := make([]string, len(crs))
			for k, ln := range crs {
				lines[k] = strconv.Itoa(ln)
			}
			r.Problems = append(r.Problems, Problem{
				Kind: CarriageReturn, File: i, Path: scripts[i].Path, Line: crs[0],
				Text: fmt.Sprintf("file `%s' has header lines ending in a carriage return (%s %s); stripped, where FreeBSD would keep it in the last token",
					scripts[i].Path, map[bool]string{false: "line", true: "lines"}[len(lines) > 1], strings.Join(lines, ", ")),
			})
		}
	}
	for _, u := range em.unknown {
		s := &scripts[u.file]
		name := s.Before[u.tok]
		r.Problems = append(r.Problems, Problem{
			Kind: UnknownBefore, File: int(u.file), Path: s.Path, Line: lineAt(s.BeforeLines, int(u.tok)), Name: name,
			Text: fmt.Sprintf("file `%s' is before unknown provision `%s'", s.Path, name),
		})
	}
	cycles := r.findCycles(sccs)
	byKey := make(map[string]int, len(cycles))
	maxCycleLen := 0
	for i := range cycles {
		byKey[cycleKey(cycles[i].Cycle)] = i
		maxCycleLen = max(maxCycleLen, len(cycles[i].Cycle))
	}
	emitted := make([]bool, len(cycles))
	type mkey struct {
		file int32
		name string
	}
	seenMissing := map[mkey]bool{}
	for _, ev := range em.events {
		if ev.missing {
			s := &scripts[ev.file]
			name := s.Requires[ev.tok]
			k := mkey{ev.file, name}
			if seenMissing[k] {
				continue
			}
			seenMissing[k] = true
			r.Problems = append(r.Problems, Problem{
				Kind: MissingProvider, File: int(ev.file), Path: s.Path, Line: lineAt(s.RequireLines, int(ev.tok)), Name: name,
				Text: fmt.Sprintf("requirement `%s' in file `%s' has no providers.", name, s.Path),
			})
			continue
		}
		// A loop found by FreeBSD's walk: print it the way FreeBSD does
		// if it is one of the elementary cycles.
		if len(ev.path) == 0 {
			continue
		}
		files := ev.path[:len(ev.path)-1]
		var cyc []int
		if allSame(files) {
			cyc = []int{int(files[0])}
		} else if len(files) > maxCycleLen {
			continue // longer than any reported cycle: cannot match
		} else {
			for _, f := range files {
				cyc = append(cyc, int(f))
			}
		}
		i, ok := byKey[cycleKey(cyc)]
		if !ok || emitted[i] {
			continue
		}
		emitted[i] = true
		p := cycles[i]
		if len(cyc) > 1 {
			p.Cycle = cyc
		}
		p.Name = em.provs[ev.prov].name
		p.File = int(ev.file)
		p.Path = scripts[ev.file].Path
		p.Text = cycleText(em.label(ev.prov), r.pathNames(ev.path))
		r.Problems = append(r.Problems, p)
	}
	for i := range cycles {
		if !emitted[i] {
			r.Problems = append(r.Problems, cycles[i])
		}
	}
}

func allSame(xs []int32) bool {
	for _, x := range xs {
		if x != xs[0] {
			return false
		}
	}
	return len(xs) > 0
}

func (r *Result) pathNames(path []int32) []string {
	out := make([]string, len(path))
	for i, f := range path {
		out[i] = r.Scripts[f].Path
	}
	return out
}
