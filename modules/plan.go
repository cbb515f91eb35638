package modules

import (
	"errors"
	"slices"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
)

// softEdge is a Pre/Post ordering edge that could not be honoured because it
// contradicts the hard dependencies (or earlier soft edges).
type softEdge struct{ before, after string }

// loadPlan is the result of planning a Load: the hard-dependency closure of
// the requested modules in load order.
type loadPlan struct {
	order   []Module
	dropped []softEdge
}

// plan resolves the hard-dependency closure of roots against cat and orders
// it with gonum: hard edges first (a cycle is an error), then the soft
// Pre/Post edges among members of the closure that do not create a cycle.
// Ties are broken by name, so the order does not depend on the order of
// roots. Every unknown module and version mismatch is reported, joined.
func plan(cat *catalog, roots []string) (loadPlan, error) {
	mods := make(map[string]Module)
	var errs []error
	var known []string
	unknown := func(name, by string) {
		if known == nil {
			known = cat.names()
		}
		errs = append(errs, &UnknownError{Name: name, RequiredBy: by, Known: known})
	}
	queue := slices.Clone(roots)
	slices.Sort(queue)
	queue = slices.Compact(queue)
	for _, r := range queue {
		m, ok := cat.get(r)
		if !ok {
			unknown(r, "")
			continue
		}
		mods[r] = m
	}
	for i := 0; i < len(queue); i++ {
		m, ok := mods[queue[i]]
		if !ok {
			continue
		}
		for _, d := range m.Depends {
			dm, seen := mods[d.Name]
			if !seen {
				var ok bool
				if dm, ok = cat.get(d.Name); !ok {
					unknown(d.Name, m.Name)
					continue
				}
				mods[d.Name] = dm
				queue = append(queue, d.Name)
			}
			if dm.Version < d.Min || (d.Max != 0 && dm.Version > d.Max) {
				errs = append(errs, &VersionError{Module: m.Name, Dep: d, Have: dm.Version})
			}
		}
	}
	if len(errs) > 0 {
		return loadPlan{}, errors.Join(errs...)
	}

	// Node IDs follow name order, so gonum's lexical tie-break is by name.
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	slices.Sort(names)
	id := make(map[string]int64, len(names))
	g := simple.NewDirectedGraph()
	for i, n := range names {
		id[n] = int64(i)
		g.AddNode(simple.Node(i))
	}
	edge := func(from, to string) graph.Edge {
		return g.NewEdge(g.Node(id[from]), g.Node(id[to]))
	}
	// Hard edges point from the dependency to the dependent: sorted order
	// loads dependencies first. Register forbids self-edges, which would
	// panic in gonum.
	for _, n := range names {
		for _, d := range mods[n].Depends {
			g.SetEdge(edge(d.Name, n))
		}
	}
	if _, err := topo.SortStabilized(g, nil); err != nil {
		var u topo.Unorderable
		if errors.As(err, &u) {
			return loadPlan{}, cycleError(g, u, names)
		}
		return loadPlan{}, err
	}

	// Soft edges, in name order, skipped when they would close a cycle.
	var dropped []softEdge
	soft := func(before, after string) {
		if _, ok := mods[before]; !ok {
			return
		}
		if _, ok := mods[after]; !ok {
			return
		}
		b, a := g.Node(id[before]), g.Node(id[after])
		if g.HasEdgeFromTo(b.ID(), a.ID()) {
			return
		}
		if topo.PathExistsIn(g, a, b) {
			dropped = append(dropped, softEdge{before, after})
			return
		}
		g.SetEdge(g.NewEdge(b, a))
	}
	for _, n := range names {
		m := mods[n]
		for _, p := range m.Pre {
			soft(p, n)
		}
		for _, p := range m.Post {
			soft(n, p)
		}
	}
	sorted, err := topo.SortStabilized(g, nil)
	if err != nil {
		return loadPlan{}, err // unreachable: soft edges never close a cycle
	}
	out := loadPlan{order: make([]Module, len(sorted)), dropped: dropped}
	for i, nd := range sorted {
		out.order[i] = mods[names[nd.ID()]]
	}
	return out, nil
}

// cycleError names one elementary cycle per strongly connected component,
// the shortest that gonum's DirectedCyclesIn finds in it.
func cycleError(g *simple.DirectedGraph, u topo.Unorderable, names []string) error {
	ce := &CycleError{}
	for _, comp := range u {
		sub := simple.NewDirectedGraph()
		in := make(map[int64]bool, len(comp))
		for _, n := range comp {
			sub.AddNode(n)
			in[n.ID()] = true
		}
		for _, n := range comp {
			to := g.From(n.ID())
			for to.Next() {
				if t := to.Node(); in[t.ID()] {
					sub.SetEdge(sub.NewEdge(n, t))
				}
			}
		}
		var best []string
		for _, c := range topo.DirectedCyclesIn(sub) {
			p := requiresPath(c, names)
			if best == nil || len(p) < len(best) || (len(p) == len(best) && strings.Join(p, " ") < strings.Join(best, " ")) {
				best = p
			}
		}
		if best != nil {
			ce.Cycles = append(ce.Cycles, best)
		}
	}
	slices.SortFunc(ce.Cycles, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return ce
}

// requiresPath turns a gonum cycle (dependency -> dependent edges, first
// node repeated last) into a "requires" path rotated to start at its
// alphabetically first module and closed with it.
func requiresPath(c []graph.Node, names []string) []string {
	ring := make([]string, 0, len(c))
	for _, n := range c {
		ring = append(ring, names[n.ID()])
	}
	if len(ring) > 1 && ring[0] == ring[len(ring)-1] {
		ring = ring[:len(ring)-1]
	}
	slices.Reverse(ring)
	start := 0
	for i, n := range ring {
		if n < ring[start] {
			start = i
		}
	}
	out := append(slices.Clone(ring[start:]), ring[:start]...)
	return append(out, out[0])
}
