package modules

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// benchCatalog is a kld_list-sized catalog: crypto, 4 providers, ipsec and
// ike on top, and n independent leaf modules.
func benchCatalog(n int) []Module {
	specs := []string{"crypto", "aesni crypto post:cryptosoft", "cryptosoft crypto", "glxsb crypto pre:cryptosoft",
		"virtio crypto", "ipsec crypto>=1", "ike ipsec"}
	for i := range n {
		specs = append(specs, fmt.Sprintf("leaf%02d", i))
	}
	var mods []Module
	for _, s := range specs {
		mods = append(mods, spec(s))
	}
	return mods
}

// BenchmarkLoadUnload measures one Load plus one Unload of a module with
// no dependencies, and of a module pulling in a chain of two.
func BenchmarkLoadUnload(b *testing.B) {
	for _, name := range []string{"leaf00", "ike"} {
		b.Run(name, func(b *testing.B) {
			l, _ := newTestLoader(b, benchCatalog(1))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Load(ctx, name); err != nil {
					b.Fatal(err)
				}
				if err := l.Unload(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoadList measures loading a 17-module kld_list (unordered) and
// unloading it again.
func BenchmarkLoadList(b *testing.B) {
	mods := benchCatalog(10)
	var names []string
	for i := len(mods) - 1; i >= 0; i-- {
		names = append(names, mods[i].Name)
	}
	list := strings.Join(names, " ")
	l, _ := newTestLoader(b, mods)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.LoadList(ctx, list); err != nil {
			b.Fatal(err)
		}
		for _, n := range names {
			if err := l.Unload(ctx, n); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkEvents measures Load+Unload with 4 subscribers reading.
func BenchmarkEvents(b *testing.B) {
	l, _ := newTestLoader(b, benchCatalog(1))
	for range 4 {
		s := l.Subscribe(false)
		defer s.Close()
		go func() {
			for range s.Events() {
			}
		}()
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Load(ctx, "leaf00"); err != nil {
			b.Fatal(err)
		}
		if err := l.Unload(ctx, "leaf00"); err != nil {
			b.Fatal(err)
		}
	}
}
