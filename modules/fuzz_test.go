package modules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// FuzzLoadList feeds arbitrary kld_list text (rc.conf is operator input):
// LoadList must never panic, must fail with ErrUnknown exactly when a name
// is unknown (leaving nothing loaded), and otherwise load every listed module
// after its dependencies.
func FuzzLoadList(f *testing.F) {
	for _, s := range []string{"", "aesni glxsb", "ipsec\taesni.ko /boot/modules/glxsb.ko", "nosuch aesni",
		"ike ike ike", " \n\r\x00", "crypto/ ../aesni .ko"} {
		f.Add(s)
	}
	cat := []string{"crypto", "aesni crypto post:cryptosoft", "cryptosoft crypto", "glxsb crypto pre:cryptosoft",
		"ipsec crypto", "ike ipsec"}
	known := map[string]bool{}
	for _, s := range cat {
		known[spec(s).Name] = true
	}
	f.Fuzz(func(t *testing.T, list string) {
		j := &journal{}
		l, _ := newTestLoader(t, hooked(j, nil, cat...))
		err := l.LoadList(context.Background(), list)
		allKnown := true
		var want []string
		for _, w := range strings.Fields(list) {
			n := w[strings.LastIndex(w, "/")+1:]
			n = strings.TrimSuffix(n, ".ko")
			want = append(want, n)
			allKnown = allKnown && known[n]
		}
		if !allKnown {
			if !errors.Is(err, ErrUnknown) || len(l.Stat()) != 0 || len(j.take()) != 0 {
				t.Fatalf("%q: err %v, stat %v", list, err, l.Stat())
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", list, err)
		}
		got := j.take()
		for _, n := range want {
			i := slices.Index(got, "load:"+n)
			if i < 0 {
				t.Fatalf("%q: %s not loaded: %v", list, n, got)
			}
		}
		for i, h := range got {
			for _, d := range spec(cat[slices.IndexFunc(cat, func(s string) bool { return spec(s).Name == h[5:] })]).Depends {
				if j := slices.Index(got, "load:"+d.Name); j < 0 || j > i {
					t.Fatalf("%q: %s loaded before its dependency %s: %v", list, h, d.Name, got)
				}
			}
		}
	})
}

// FuzzPlan builds a catalog of up to 8 modules from the input (hard, pre
// and post edges from bit masks) and checks plan's result: a load order
// that satisfies every hard edge and every soft edge it kept, or a
// CycleError whose paths are real hard-dependency cycles.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{3, 0x02, 0, 0, 0x04, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 0x02, 0, 0, 0x04, 0, 0, 0x01, 0, 0})
	f.Add([]byte{4, 0, 0x08, 0, 0, 0, 0x01, 0x02, 0, 0x04, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		n := int(data[0]%8) + 1
		data = data[1:]
		name := func(i int) string { return fmt.Sprintf("m%d", i) }
		mods := make([]Module, n)
		hard := map[[2]string]bool{}
		for i := range mods {
			mods[i].Name = name(i)
			var b [3]byte
			copy(b[:], data[min(len(data), 3*i):min(len(data), 3*i+3)])
			for k := range n {
				if k == i {
					continue
				}
				if b[0]&(1<<k) != 0 {
					mods[i].Depends = append(mods[i].Depends, Dependency{Name: name(k)})
					hard[[2]string{name(k), name(i)}] = true
				}
				if b[1]&(1<<k) != 0 {
					mods[i].Pre = append(mods[i].Pre, name(k))
				}
				if b[2]&(1<<k) != 0 {
					mods[i].Post = append(mods[i].Post, name(k))
				}
			}
		}
		cat := newCatalog()
		var roots []string
		for _, m := range mods {
			if err := cat.add(m); err != nil {
				t.Fatal(err)
			}
			roots = append(roots, m.Name)
		}
		p, err := plan(cat, roots)
		if err != nil {
			var ce *CycleError
			if !errors.As(err, &ce) || len(ce.Cycles) == 0 {
				t.Fatalf("err %v", err)
			}
			for _, c := range ce.Cycles {
				if c[0] != c[len(c)-1] {
					t.Fatalf("open cycle %v", c)
				}
				for k := 0; k+1 < len(c); k++ { // c[k] requires c[k+1]
					if !hard[[2]string{c[k+1], c[k]}] {
						t.Fatalf("cycle %v: %s does not require %s", c, c[k], c[k+1])
					}
				}
			}
			return
		}
		if len(p.order) != n {
			t.Fatalf("order %d of %d modules", len(p.order), n)
		}
		pos := map[string]int{}
		for i, m := range p.order {
			pos[m.Name] = i
		}
		dropped := map[softEdge]bool{}
		for _, d := range p.dropped {
			dropped[d] = true
		}
		for e := range hard {
			if pos[e[0]] > pos[e[1]] {
				t.Fatalf("%s loaded after its dependent %s", e[0], e[1])
			}
		}
		for _, m := range mods {
			for _, q := range m.Pre {
				if !dropped[softEdge{q, m.Name}] && pos[q] > pos[m.Name] {
					t.Fatalf("pre %s of %s not honoured", q, m.Name)
				}
			}
			for _, q := range m.Post {
				if !dropped[softEdge{m.Name, q}] && pos[q] < pos[m.Name] {
					t.Fatalf("post %s of %s not honoured", q, m.Name)
				}
			}
		}
	})
}
