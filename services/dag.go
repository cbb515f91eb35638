package services

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Outcome is the result of one node of RunDAG.
type Outcome struct {
	Start time.Time // when run was called (zero if blocked)
	End   time.Time // when run returned, or when the node was found blocked
	Err   error     // run's error; nil for success
	// BlockedBy is the index of the failed node that kept this node from
	// running (the root cause, transitively through hard edges), or -1.
	BlockedBy int
	// AfterFailed lists the direct requirements, over ordering-only
	// edges, that had failed or were blocked when the node ran.
	AfterFailed []int
}

// Ran reports whether run was called for the node.
func (o Outcome) Ran() bool { return !o.Start.IsZero() }

// RunDAG calls run(ctx, i) for every node i = 0..len(deps)-1 as soon as
// all nodes in deps[i] have finished, with no other limit on parallelism
// (no levels). An edge orders; it does not forbid, as rc(8)'s REQUIRE and
// systemd's After= do: a node whose requirement failed still runs, and
// its Outcome lists that requirement in AfterFailed. Only a hard edge
// (hard(i, d) true; systemd's Requisite=) forbids: a node one of whose
// hard requirements failed or was blocked is not run, its Outcome has
// BlockedBy set to the root-cause node and Err wrapping ErrBlocked. A nil
// hard makes every edge ordering-only. deps must be acyclic (nodes on a
// cycle never run and RunDAG would not return, so callers break cycles
// first; see BreakCycles). RunDAG returns when every node is finished. If
// ctx is cancelled, nodes not yet started fail with ctx.Err().
//
// The optional onDone is called from each node's goroutine right after the
// node finishes (for live status); it must be safe for concurrent use.
func RunDAG(ctx context.Context, deps [][]int, hard func(i, d int) bool, run func(ctx context.Context, i int) error, onDone func(i int, o Outcome)) []Outcome {
	n := len(deps)
	out := make([]Outcome, n)
	done := make([]chan struct{}, n)
	for i := range done {
		done[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		go func() {
			defer wg.Done()
			defer close(done[i])
			o := Outcome{BlockedBy: -1}
			for _, d := range deps[i] {
				<-done[d]
				od := out[d]
				switch {
				case od.Err == nil:
				case hard != nil && hard(i, d):
					if o.BlockedBy < 0 {
						o.BlockedBy = d
						if od.BlockedBy >= 0 {
							o.BlockedBy = od.BlockedBy
						}
						o.Err = ErrBlocked
					}
				default:
					o.AfterFailed = append(o.AfterFailed, d)
				}
			}
			if o.Err == nil {
				if err := ctx.Err(); err != nil {
					o.Err = err
				} else {
					o.Start = time.Now()
					o.Err = run(ctx, i)
				}
			}
			o.End = time.Now()
			out[i] = o // published to waiters by close(done[i])
			if onDone != nil {
				onDone(i, o)
			}
		}()
	}
	wg.Wait()
	return out
}

// BreakCycles returns the nodes that lie on a dependency cycle (or depend
// on a node outside 0..n-1), using Kahn's algorithm; the remaining nodes
// form a DAG. Callers mark the returned nodes failed and drop their edges.
func BreakCycles(deps [][]int) []int {
	n := len(deps)
	indeg := make([]int, n)
	rdeps := make([][]int, n)
	bad := make([]bool, n)
	for i, ds := range deps {
		for _, d := range ds {
			if d < 0 || d >= n {
				bad[i] = true
				continue
			}
			indeg[i]++
			rdeps[d] = append(rdeps[d], i)
		}
	}
	queue := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 && !bad[i] {
			queue = append(queue, i)
		}
	}
	seen := make([]bool, n)
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		seen[i] = true
		for _, r := range rdeps[i] {
			indeg[r]--
			if indeg[r] == 0 && !bad[r] {
				queue = append(queue, r)
			}
		}
	}
	var cyc []int
	for i := range n {
		if !seen[i] {
			cyc = append(cyc, i)
		}
	}
	return cyc
}

// CriticalChain returns, for a finished timeline, the chain of services
// that determined when the last one became ready: starting from the span
// that finished last, it repeatedly follows the requirement that became
// ready last (systemd-analyze critical-chain). The result is ordered from
// the first service to the last.
func CriticalChain(tl Timeline) []Span {
	by := make(map[string]Span, len(tl.Spans))
	var last *Span
	for i := range tl.Spans {
		s := tl.Spans[i]
		by[s.Name] = s
		if s.Ready > 0 && (last == nil || s.Ready > last.Ready) {
			last = &tl.Spans[i]
		}
	}
	if last == nil {
		return nil
	}
	chain := []Span{*last}
	seen := map[string]bool{last.Name: true}
	cur := *last
	for {
		var next *Span
		for _, r := range cur.Requires {
			s, ok := by[r]
			if !ok || seen[r] || s.Ready <= 0 {
				continue
			}
			if next == nil || s.Ready > next.Ready {
				next = &s
			}
		}
		if next == nil {
			break
		}
		seen[next.Name] = true
		chain = append(chain, *next)
		cur = *next
	}
	slices.Reverse(chain)
	return chain
}
