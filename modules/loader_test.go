package modules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRegisterPanics(t *testing.T) {
	if _, ok := global.get("modtest-dup"); !ok { // -count=N reruns
		Register(Module{Name: "modtest-dup", Version: 1})
	}
	tests := []struct {
		name string
		m    Module
		want string
	}{
		{"empty name", Module{}, "empty name"},
		{"white space", Module{Name: "a b"}, "white space"},
		{"duplicate", Module{Name: "modtest-dup"}, `duplicate module name "modtest-dup"`},
		{"self dependency", spec("modtest-self modtest-self"), "depends on itself"},
		{"self pre", spec("modtest-selfpre pre:modtest-selfpre"), "soft pre dependency on itself"},
		{"self post", spec("modtest-selfpost post:modtest-selfpost"), "soft post dependency on itself"},
		{"repeated dependency", spec("modtest-rep a a"), "listed twice"},
		{"max below min", spec("modtest-range a=3..2"), "max 2 below min 3"},
		{"negative version", Module{Name: "modtest-neg", Version: -1}, "negative version"},
		{"empty dependency", Module{Name: "modtest-emptydep", Depends: []Dependency{{}}}, "dependency with empty name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if p == nil {
					t.Fatal("no panic")
				}
				if s := fmt.Sprint(p); !strings.Contains(s, tc.want) || !strings.HasPrefix(s, "modules: Register: ") {
					t.Fatalf("panic %q, want it to contain %q", s, tc.want)
				}
			}()
			Register(tc.m)
		})
	}
	t.Run("WithCatalog duplicate", func(t *testing.T) {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "duplicate") {
				t.Fatalf("panic %v", p)
			}
		}()
		WithCatalog([]Module{{Name: "x"}, {Name: "x"}})
	})
}

var (
	registerGlobalOnce sync.Once
	globalJournal      = &journal{}
)

func TestRegisteredGlobalCatalog(t *testing.T) {
	registerGlobalOnce.Do(func() {
		for _, m := range hooked(globalJournal, nil, "modtest-zz modtest-aa", "modtest-aa") {
			Register(m)
		}
	})
	j := globalJournal
	j.take()
	var names []string
	for _, m := range Registered() {
		names = append(names, m.Name)
	}
	if !slices.IsSorted(names) {
		t.Fatalf("Registered not sorted: %v", names)
	}
	if !slices.Contains(names, "modtest-aa") || !slices.Contains(names, "modtest-zz") {
		t.Fatalf("Registered = %v", names)
	}
	// Registered returns copies.
	for _, m := range Registered() {
		if m.Name == "modtest-zz" {
			m.Depends[0].Name = "mutated"
		}
	}
	l := NewLoader(WithLogger(nil))
	if err := l.Load(context.Background(), "modtest-zz"); err != nil {
		t.Fatal(err)
	}
	if got, want := j.take(), []string{"load:modtest-aa", "load:modtest-zz"}; !slices.Equal(got, want) {
		t.Fatalf("hooks %v, want %v", got, want)
	}
}

func TestLoadOrder(t *testing.T) {
	tests := []struct {
		name    string
		catalog []string
		pre     []string // loaded before, journal discarded
		load    []string
		want    []string // load hooks in order
	}{
		{"chain", []string{"ipsec crypto", "crypto", "aesni crypto"}, nil,
			[]string{"ipsec"}, []string{"crypto", "ipsec"}},
		{"diamond", []string{"top left right", "left base", "right base", "base"}, nil,
			[]string{"top"}, []string{"base", "left", "right", "top"}},
		{"request order irrelevant", []string{"c", "b", "a"}, nil,
			[]string{"c", "a", "b"}, []string{"a", "b", "c"}},
		{"dependency before name order", []string{"a z", "z"}, nil,
			[]string{"a"}, []string{"z", "a"}},
		{"already loaded dependency skipped", []string{"ipsec crypto", "crypto"}, []string{"crypto"},
			[]string{"ipsec"}, []string{"ipsec"}},
		{"soft pre among requested", []string{"a pre:b", "b"}, nil,
			[]string{"a", "b"}, []string{"b", "a"}},
		{"soft pre never pulls in", []string{"a pre:b", "b"}, nil,
			[]string{"a"}, []string{"a"}},
		{"soft pre on already loaded", []string{"a pre:b", "b"}, []string{"b"},
			[]string{"a"}, []string{"a"}},
		{"soft post among requested", []string{"b post:a", "a"}, nil,
			[]string{"a", "b"}, []string{"b", "a"}},
		{"soft pre among dependencies", []string{"top a b", "a pre:b", "b"}, nil,
			[]string{"top"}, []string{"b", "a", "top"}},
		{"soft unknown name ignored", []string{"a pre:nosuch"}, nil,
			[]string{"a"}, []string{"a"}},
		{"soft contradicting hard dropped", []string{"a b", "b pre:a"}, nil,
			[]string{"a", "b"}, []string{"b", "a"}},
		{"duplicates", []string{"a"}, nil, []string{"a", "a"}, []string{"a"}},
		{"nothing", []string{"a"}, nil, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			l, _ := newTestLoader(t, hooked(j, nil, tc.catalog...))
			ctx := context.Background()
			if err := l.Load(ctx, tc.pre...); err != nil {
				t.Fatal(err)
			}
			j.take()
			if err := l.Load(ctx, tc.load...); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, "load:"+w)
			}
			if got := j.take(); !slices.Equal(got, want) {
				t.Fatalf("hooks %v, want %v", got, want)
			}
			for _, n := range tc.load {
				if !l.IsLoaded(n) {
					t.Errorf("%s not loaded", n)
				}
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		catalog []string
		load    []string
		is      error
		want    string
	}{
		{"min ok", []string{"ipsec crypto>=2", "crypto@2"}, []string{"ipsec"}, nil, ""},
		{"min violated", []string{"ipsec crypto>=2", "crypto@1"}, []string{"ipsec"}, ErrVersion,
			"modules: load: ipsec requires crypto >= 2, have 1"},
		{"max ok", []string{"ipsec crypto<=3", "crypto@3"}, []string{"ipsec"}, nil, ""},
		{"max violated", []string{"ipsec crypto<=3", "crypto@4"}, []string{"ipsec"}, ErrVersion,
			"ipsec requires crypto <= 3, have 4"},
		{"range ok", []string{"ipsec crypto=2..3", "crypto@2"}, []string{"ipsec"}, nil, ""},
		{"range below", []string{"ipsec crypto=2..3", "crypto@1"}, []string{"ipsec"}, ErrVersion,
			"ipsec requires crypto >= 2, have 1"},
		{"max 0 is unbounded", []string{"ipsec crypto>=1", "crypto@99"}, []string{"ipsec"}, nil, ""},
		{"version of deep dependency", []string{"a b", "b c>=5", "c@4"}, []string{"a"}, ErrVersion,
			"b requires c >= 5, have 4"},
		{"unknown requested", []string{"b", "a"}, []string{"zz"}, ErrUnknown,
			`modules: load: unknown module "zz" (known: a, b)`},
		{"unknown dependency", []string{"ipsec nosuch", "crypto"}, []string{"ipsec"}, ErrUnknown,
			`unknown module "nosuch" required by ipsec (known: crypto, ipsec)`},
		{"every problem reported", []string{"a x>=2", "x", "b"}, []string{"a", "zz"}, ErrUnknown,
			"a requires x >= 2, have 1"},
		{"cycle", []string{"a b", "b c", "c a"}, []string{"a"}, ErrCycle,
			"modules: load: dependency cycle: a -> b -> c -> a"},
		{"cycle reached through dependency", []string{"top y", "y x", "x y"}, []string{"top"}, ErrCycle,
			"dependency cycle: x -> y -> x"},
		{"two cycles", []string{"a b", "b a", "c d", "d c", "top a c"}, []string{"top"}, ErrCycle,
			"dependency cycle: a -> b -> a; c -> d -> c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			l, _ := newTestLoader(t, hooked(j, nil, tc.catalog...))
			err := l.Load(context.Background(), tc.load...)
			if tc.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("err %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q, want it to contain %q", err, tc.want)
			}
			if got := j.take(); len(got) != 0 {
				t.Fatalf("hooks ran despite planning error: %v", got)
			}
			if s := l.Stat(); len(s) != 0 {
				t.Fatalf("stat after failed plan: %v", s)
			}
		})
	}
	t.Run("typed", func(t *testing.T) {
		l, _ := newTestLoader(t, []Module{spec("a b"), spec("b a")})
		var ce *CycleError
		if err := l.Load(context.Background(), "a"); !errors.As(err, &ce) ||
			!slices.Equal(ce.Cycles[0], []string{"a", "b", "a"}) {
			t.Fatalf("err %v", err)
		}
		var ve *VersionError
		l, _ = newTestLoader(t, []Module{spec("a b>=3"), spec("b@2")})
		if err := l.Load(context.Background(), "a"); !errors.As(err, &ve) || ve.Have != 2 || ve.Dep.Min != 3 {
			t.Fatalf("err %v", err)
		}
	})
}

func TestRefcounts(t *testing.T) {
	type row struct {
		refs     int
		explicit bool
		holders  string
	}
	type step struct {
		op   string // "load x y", "unload x", "force x"
		want map[string]row
	}
	cat := []string{"crypto", "ipsec crypto", "aesni crypto", "ike ipsec"}
	tests := []struct {
		name  string
		steps []step
	}{
		{"dependency held by dependent", []step{
			{"load ipsec", map[string]row{"crypto": {1, false, "ipsec"}, "ipsec": {1, true, ""}}},
			{"load aesni", map[string]row{"crypto": {2, false, "aesni ipsec"}, "ipsec": {1, true, ""}, "aesni": {1, true, ""}}},
			{"unload ipsec", map[string]row{"crypto": {1, false, "aesni"}, "aesni": {1, true, ""}}},
			{"unload aesni", map[string]row{}},
		}},
		{"explicit load pins a dependency", []step{
			{"load ipsec", map[string]row{"crypto": {1, false, "ipsec"}, "ipsec": {1, true, ""}}},
			{"load crypto", map[string]row{"crypto": {2, true, "ipsec"}, "ipsec": {1, true, ""}}},
			{"unload ipsec", map[string]row{"crypto": {1, true, ""}}},
			{"unload crypto", map[string]row{}},
		}},
		{"implicit chain collected", []step{
			{"load ike", map[string]row{"crypto": {1, false, "ipsec"}, "ipsec": {1, false, "ike"}, "ike": {1, true, ""}}},
			{"unload ike", map[string]row{}},
		}},
		{"loaded twice holds one user reference", []step{
			{"load crypto", map[string]row{"crypto": {1, true, ""}}},
			{"load crypto", map[string]row{"crypto": {1, true, ""}}},
			{"unload crypto", map[string]row{}},
		}},
		{"forced unload takes holders", []step{
			{"load ike aesni", map[string]row{"crypto": {2, false, "aesni ipsec"}, "ipsec": {1, false, "ike"},
				"ike": {1, true, ""}, "aesni": {1, true, ""}}},
			{"force crypto", map[string]row{}},
		}},
		{"forced unload of middle keeps unrelated", []step{
			{"load ike aesni", nil},
			{"force ipsec", map[string]row{"crypto": {1, false, "aesni"}, "aesni": {1, true, ""}}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTestLoader(t, hooked(&journal{}, nil, cat...))
			ctx := context.Background()
			for _, st := range tc.steps {
				f := strings.Fields(st.op)
				var err error
				switch f[0] {
				case "load":
					err = l.Load(ctx, f[1:]...)
				case "unload":
					err = l.Unload(ctx, f[1])
				case "force":
					err = l.Unload(ctx, f[1], Force())
				}
				if err != nil {
					t.Fatalf("%s: %v", st.op, err)
				}
				if st.want == nil {
					continue
				}
				got := map[string]row{}
				for _, s := range l.Stat() {
					got[s.Name] = row{s.Refs, s.Explicit, strings.Join(s.Holders, " ")}
					if s.State != StateLoaded {
						t.Errorf("%s: %s state %s", st.op, s.Name, s.State)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(st.want) {
					t.Fatalf("after %s:\n got %v\nwant %v", st.op, got, st.want)
				}
			}
		})
	}
}

func TestStatRows(t *testing.T) {
	l, _ := newTestLoader(t, []Module{
		{Name: "crypto", Version: 3, Kind: KindEngine, Description: "crypto framework"},
		{Name: "aesni", Version: 1, Kind: KindCryptoProvider, Depends: []Dependency{{Name: "crypto", Min: 2, Preferred: 3}}},
	})
	if err := l.Load(context.Background(), "aesni"); err != nil {
		t.Fatal(err)
	}
	st := l.Stat()
	if len(st) != 2 {
		t.Fatalf("%v", st)
	}
	c, a := st[0], st[1]
	if c.ID != 1 || c.Name != "crypto" || c.Version != 3 || c.Kind != KindEngine || c.Refs != 1 ||
		c.Description != "crypto framework" || !slices.Equal(c.Holders, []string{"aesni"}) || len(c.DependsOn) != 0 {
		t.Errorf("crypto row %+v", c)
	}
	if a.ID != 2 || a.Kind != KindCryptoProvider || !slices.Equal(a.DependsOn, []string{"crypto"}) || a.Refs != 1 ||
		a.LoadedAt.IsZero() || a.LoadedAt.Before(c.LoadedAt) {
		t.Errorf("aesni row %+v", a)
	}
	// Ids keep increasing across reloads, like kld file ids.
	if err := l.Unload(context.Background(), "aesni"); err != nil {
		t.Fatal(err)
	}
	if err := l.Load(context.Background(), "aesni"); err != nil {
		t.Fatal(err)
	}
	if got := l.Stat(); got[0].ID != 3 || got[1].ID != 4 {
		t.Errorf("ids after reload %+v", got)
	}
}

func TestAlreadyLoaded(t *testing.T) {
	j := &journal{}
	l, _ := newTestLoader(t, hooked(j, nil, "crypto", "ipsec crypto"))
	ctx := context.Background()
	id, err := l.LoadOne(ctx, "ipsec")
	if err != nil || id != 2 {
		t.Fatalf("LoadOne = %d, %v", id, err)
	}
	s := l.Subscribe(false)
	defer s.Close()
	j.take()
	if err := l.Load(ctx, "ipsec"); err != nil {
		t.Fatalf("second Load: %v", err)
	}
	id, err = l.LoadOne(ctx, "ipsec")
	if !errors.Is(err, ErrExist) || id != 2 || !strings.Contains(err.Error(), "ipsec") {
		t.Fatalf("LoadOne again = %d, %v", id, err)
	}
	if err := l.LoadList(ctx, "ipsec crypto"); err != nil {
		t.Fatal(err)
	}
	if got := j.take(); len(got) != 0 {
		t.Fatalf("hooks ran: %v", got)
	}
	noMore(t, s)
	if st := l.Stat(); st[1].Refs != 1 || st[0].Refs != 2 {
		t.Fatalf("refs %+v", st)
	}
}

func TestUnloadRefusals(t *testing.T) {
	errHW := errors.New("device in use")
	tests := []struct {
		name     string
		fail     map[string]error
		load     []string
		unload   string
		force    bool
		is       error
		notIs    error
		want     string
		hooks    []string // unload hooks run
		left     []string
		wantLog  string
		wantEvts []string
	}{
		{name: "holders named", load: []string{"ipsec", "aesni"}, unload: "crypto", is: ErrBusy,
			want: "modules: unload: crypto is busy: held by aesni, ipsec", left: []string{"crypto", "aesni", "ipsec"}},
		{name: "hook busy", fail: map[string]error{"unload:aesni": fmt.Errorf("3 sessions: %w", ErrBusy)},
			load: []string{"aesni"}, unload: "aesni", is: ErrBusy, want: "aesni is busy: aesni: unload hook: 3 sessions: module busy",
			hooks: []string{"unload:aesni"}, left: []string{"crypto", "aesni"},
			wantEvts: []string{"aesni v1 unloading", "aesni v1 loaded (unload refused)"}},
		{name: "hook other error", fail: map[string]error{"unload:aesni": errHW},
			load: []string{"aesni"}, unload: "aesni", is: errHW, notIs: ErrBusy, want: "aesni: unload hook: device in use",
			hooks: []string{"unload:aesni"}, left: []string{"crypto", "aesni"}},
		{name: "not loaded", unload: "aesni", is: ErrNotLoaded, want: "modules: unload: aesni: module not loaded"},
		{name: "unknown not loaded", unload: "nosuch", is: ErrNotLoaded},
		{name: "forced over holders", load: []string{"ipsec", "aesni"}, unload: "crypto", force: true,
			hooks: []string{"unload:ipsec", "unload:aesni", "unload:crypto"}, wantLog: "forced unload",
			wantEvts: []string{"ipsec v1 unloading (forced)", "ipsec v1 unloaded (forced)",
				"aesni v1 unloading (forced)", "aesni v1 unloaded (forced)",
				"crypto v1 unloading (forced)", "crypto v1 unloaded (forced)"}},
		{name: "forced over busy hook", fail: map[string]error{"unload:aesni": fmt.Errorf("sessions: %w", ErrBusy)},
			load: []string{"aesni"}, unload: "aesni", force: true,
			hooks: []string{"unload:aesni", "unload:crypto"}, wantLog: "forced unload ignored",
			wantEvts: []string{"aesni v1 unloading (forced)", "aesni v1 unloaded (forced)",
				"crypto v1 unloading", "crypto v1 unloaded"}},
		{name: "refused dependency cleanup stays", fail: map[string]error{"unload:crypto": fmt.Errorf("x: %w", ErrBusy)},
			load: []string{"aesni"}, unload: "aesni", hooks: []string{"unload:aesni", "unload:crypto"},
			left: []string{"crypto"}, wantLog: "refused to unload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			l, lb := newTestLoader(t, hooked(j, tc.fail, "crypto", "ipsec crypto", "aesni crypto"))
			ctx := context.Background()
			if err := l.Load(ctx, tc.load...); err != nil {
				t.Fatal(err)
			}
			j.take()
			s := l.Subscribe(false)
			defer s.Close()
			var opts []UnloadOption
			if tc.force {
				opts = append(opts, Force())
			}
			err := l.Unload(ctx, tc.unload, opts...)
			switch {
			case tc.is == nil && err != nil:
				t.Fatalf("Unload: %v", err)
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("Unload err %v, want %v", err, tc.is)
			case tc.notIs != nil && errors.Is(err, tc.notIs):
				t.Fatalf("Unload err %v must not be %v", err, tc.notIs)
			case err != nil && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Unload err %q, want it to contain %q", err, tc.want)
			}
			if tc.is == ErrBusy {
				var be *BusyError
				if !errors.As(err, &be) || be.Module != tc.unload {
					t.Fatalf("not a BusyError for %s: %v", tc.unload, err)
				}
			}
			if got := j.take(); !slices.Equal(got, tc.hooks) {
				t.Fatalf("hooks %v, want %v", got, tc.hooks)
			}
			if got := loadedNames(l); !slices.Equal(got, tc.left) {
				t.Fatalf("left %v, want %v", got, tc.left)
			}
			if !strings.Contains(lb.String(), tc.wantLog) {
				t.Fatalf("log %q lacks %q", lb.String(), tc.wantLog)
			}
			if !tc.force && strings.Contains(lb.String(), "forced") {
				t.Fatalf("unforced unload logged as forced: %s", lb.String())
			}
			if tc.wantEvts != nil {
				if got := evStrings(drain(t, s, len(tc.wantEvts))); !slices.Equal(got, tc.wantEvts) {
					t.Fatalf("events %v, want %v", got, tc.wantEvts)
				}
			}
			for _, n := range tc.left {
				if !l.IsLoaded(n) {
					t.Errorf("%s not loaded", n)
				}
			}
		})
	}
}

func TestLoadListOrderIndependent(t *testing.T) {
	cat := []string{"crypto", "aesni crypto post:cryptosoft", "cryptosoft crypto", "glxsb crypto pre:cryptosoft",
		"ipsec crypto>=1", "if_bridge", "pf pre:if_bridge"}
	lists := []string{
		"aesni glxsb cryptosoft ipsec pf if_bridge",
		"if_bridge pf ipsec cryptosoft glxsb aesni",
		"  /boot/modules/pf.ko\tipsec.ko glxsb\n aesni cryptosoft if_bridge ",
		"ipsec aesni pf glxsb if_bridge cryptosoft aesni",
	}
	want := []string{"load:aesni", "load:crypto", "load:cryptosoft"}
	var first []string
	for _, list := range lists {
		t.Run(strings.Join(strings.Fields(list), "_"), func(t *testing.T) {
			j := &journal{}
			l, _ := newTestLoader(t, hooked(j, nil, cat...))
			if err := l.LoadList(context.Background(), list); err != nil {
				t.Fatal(err)
			}
			got := j.take()
			if first == nil {
				first = got
			}
			if !slices.Equal(got, first) {
				t.Fatalf("order %v differs from %v", got, first)
			}
			pos := func(s string) int { return slices.Index(got, "load:"+s) }
			for _, c := range [][2]string{{"crypto", "aesni"}, {"crypto", "glxsb"}, {"crypto", "ipsec"},
				{"aesni", "cryptosoft"}, {"cryptosoft", "glxsb"}, {"if_bridge", "pf"}} {
				if pos(c[0]) < 0 || pos(c[0]) > pos(c[1]) {
					t.Fatalf("%s not before %s in %v", c[0], c[1], got)
				}
			}
			_ = want
		})
	}
	t.Run("empty", func(t *testing.T) {
		l, _ := newTestLoader(t, nil)
		if err := l.LoadList(context.Background(), " \t\n"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		l, _ := newTestLoader(t, hooked(&journal{}, nil, cat...))
		if err := l.LoadList(context.Background(), "aesni nosuch"); !errors.Is(err, ErrUnknown) ||
			l.IsLoaded("aesni") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestRollback(t *testing.T) {
	errNoCPU := errors.New("cpu lacks AES-NI")
	tests := []struct {
		name  string
		pre   []string
		load  []string
		fail  string // module whose Load hook fails
		panic bool
		hooks []string
		left  []string
		refs  map[string]int
	}{
		{name: "last fails", load: []string{"aesni"}, fail: "aesni",
			hooks: []string{"load:crypto", "load:aesni", "unload:crypto"}},
		{name: "middle fails", load: []string{"top"}, fail: "b",
			hooks: []string{"load:crypto", "load:a", "load:b", "unload:a", "unload:crypto"}},
		{name: "pre-existing kept", pre: []string{"crypto"}, load: []string{"top"}, fail: "b",
			hooks: []string{"load:a", "load:b", "unload:a"}, left: []string{"crypto"}, refs: map[string]int{"crypto": 1}},
		{name: "implicit pre-existing pin returned", pre: []string{"a"}, load: []string{"crypto", "top"}, fail: "b",
			hooks: []string{"load:b"}, left: []string{"crypto", "a"}, refs: map[string]int{"crypto": 1, "a": 1}},
		{name: "panic is a failure", load: []string{"aesni"}, fail: "aesni", panic: true,
			hooks: []string{"load:crypto", "load:aesni", "unload:crypto"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			mods := hooked(j, map[string]error{"load:" + tc.fail: errNoCPU},
				"crypto", "aesni crypto", "a crypto", "b a", "top a b")
			if tc.panic {
				for i := range mods {
					if mods[i].Name == tc.fail {
						mods[i].Load = func(context.Context) error { j.add("load:" + tc.fail); panic("boom") }
					}
				}
			}
			l, _ := newTestLoader(t, mods)
			ctx := context.Background()
			if err := l.Load(ctx, tc.pre...); err != nil {
				t.Fatal(err)
			}
			j.take()
			s := l.Subscribe(false)
			defer s.Close()
			err := l.Load(ctx, tc.load...)
			if !errors.Is(err, ErrLoadFailed) || !strings.Contains(err.Error(), tc.fail+": load hook: ") {
				t.Fatalf("err %v", err)
			}
			if !tc.panic && !errors.Is(err, errNoCPU) {
				t.Fatalf("err %v does not wrap the hook's error", err)
			}
			var he *HookError
			if !errors.As(err, &he) || he.Module != tc.fail {
				t.Fatalf("err %v not a HookError for %s", err, tc.fail)
			}
			if got := j.take(); !slices.Equal(got, tc.hooks) {
				t.Fatalf("hooks %v, want %v", got, tc.hooks)
			}
			if got := loadedNames(l); !slices.Equal(got, tc.left) {
				t.Fatalf("left %v, want %v", got, tc.left)
			}
			for _, st := range l.Stat() {
				if st.Refs != tc.refs[st.Name] {
					t.Errorf("%s refs %d holders %v", st.Name, st.Refs, st.Holders)
				}
			}
			// Events: every Loaded of this call is matched by Unloading, Unloaded.
			var loads, unloads int
			for _, h := range tc.hooks {
				if strings.HasPrefix(h, "unload:") {
					unloads++
				} else if !strings.HasSuffix(h, ":"+tc.fail) {
					loads++
				}
			}
			if loads != unloads {
				t.Fatalf("test table: %d loads, %d unloads", loads, unloads)
			}
			evs := drain(t, s, 3*loads)
			for i, e := range evs[:loads] {
				if e.Type != Loaded || evs[len(evs)-2-2*i].Module != e.Module {
					t.Fatalf("events %v", evStrings(evs))
				}
			}
			noMore(t, s)
			// The modules can be loaded again once the fault is gone.
			if err := l.Load(ctx, "crypto"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWriteStat(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	rows := []Stat{
		{ID: 1, Refs: 2, Name: "crypto", Version: 2, Kind: KindEngine, State: StateLoaded, LoadedAt: at},
		{ID: 12, Refs: 1, Name: "aesni", Version: 1, Kind: KindCryptoProvider, State: StateLoading,
			DependsOn: []string{"crypto", "x"}},
	}
	var b strings.Builder
	if err := WriteStat(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"Id Refs Name   Version Kind            State   Loaded               Depends\n" +
		" 1    2 crypto 2       engine          loaded  2026-11-30T08:00:00Z -\n" +
		"12    1 aesni  1       crypto-provider loading -                    crypto,x\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
