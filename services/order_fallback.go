package services

// Temporary: used until package rcorder lands; replaced by order.go.

import (
	"fmt"
)

// orderGraph returns, for each header, the indices it must wait for, and
// problems (missing requirements).
func orderGraph(hs []Header) (deps [][]int, problems []string) {
	prov := map[string][]int{}
	for i, h := range hs {
		for _, p := range h.Provides {
			prov[p] = append(prov[p], i)
		}
	}
	deps = make([][]int, len(hs))
	add := func(i, d int) {
		if i == d {
			return
		}
		for _, x := range deps[i] {
			if x == d {
				return
			}
		}
		deps[i] = append(deps[i], d)
	}
	for i, h := range hs {
		for _, r := range h.Requires {
			ps, ok := prov[r]
			if !ok {
				problems = append(problems, fmt.Sprintf("requirement `%s' in file `%s' has no providers.", r, h.Path))
			}
			for _, p := range ps {
				add(i, p)
			}
		}
		for _, b := range h.Before {
			for _, p := range prov[b] {
				add(p, i)
			}
		}
	}
	return deps, problems
}
