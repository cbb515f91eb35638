package rcorder

import (
	"testing"
	"slices"
	"math/rand/v2"
)

func TestTmpOld(t *testing.T) {
	variants := []struct{ name string; f, a, tl bool }{
		{"fallback", true, true, true},
		{"firstprovider", false, false, true},
		{"bottomfirst", false, true, false},
	}
	for _, v := range variants {
		oldVar.fallback, oldVar.allProv, oldVar.tail = v.f, v.a, v.tl
		rng := rand.New(rand.NewPCG(3, 4))
		var best []Script
		cnt := 0
		for it := 0; it < 300000; it++ {
			scripts := randomTree(rng, 5, 4, 1.2)
			ref := freebsdReference(scripts)
			if ref.hung { continue }
			old := oldNewEmulator(scripts).run()
			if slices.Equal(old, ref.seq) { continue }
			cnt++
			if best == nil || tsize(scripts) < tsize(best) { best = scripts }
		}
		if best == nil { t.Logf("== %s: no diff", v.name); continue }
		ref := freebsdReference(best)
		t.Logf("== %s (%d) ref %v old %v", v.name, cnt, ref.seq, oldNewEmulator(best).run())
		for _, s := range best { t.Logf("  %s P%v R%v B%v", s.Path, s.Provides, s.Requires, s.Before) }
		for _, m := range ref.msgs { t.Logf("   %s", m) }
	}
}
func tsize(sc []Script) int { size := 0; for _, s := range sc { size += 1 + len(s.Provides)+len(s.Requires)+len(s.Before) }; return size }
