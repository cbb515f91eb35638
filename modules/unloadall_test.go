package modules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// quiesced adds journaling Quiesce hooks to mods: the hook records
// "quiesce:x[leaving]" and returns refuse[x].
func quiesced(j *journal, refuse map[string]error, mods []Module) []Module {
	for i := range mods {
		name := mods[i].Name
		mods[i].Quiesce = func(ctx context.Context, leaving []string) error {
			u, _ := UnloadFromContext(ctx)
			j.add(fmt.Sprintf("quiesce:%s%v forced=%v", name, leaving, u.Forced))
			return refuse[name]
		}
		unload := mods[i].Unload
		mods[i].Unload = func(ctx context.Context) error {
			if u, ok := UnloadFromContext(ctx); ok {
				j.add(fmt.Sprintf("ctx:%s%v forced=%v", name, u.Leaving, u.Forced))
			}
			return unload(ctx)
		}
	}
	return mods
}

// TestUnloadAll: several modules unloaded as a whole, table-driven:
// Quiesce sees the whole set and its refusal changes nothing (no hook,
// no event); a dependent and its dependency may leave together unforced,
// a holder outside the set refuses; an Unload hook that still refuses
// makes the modules already unloaded load again (all or nothing); Force
// skips Quiesce and overrides refusals; hooks learn the set and whether
// it is forced.
func TestUnloadAll(t *testing.T) {
	busy := fmt.Errorf("in use by 2 SAs: %w", ErrBusy)
	for _, tc := range []struct {
		name    string
		specs   []string
		load    []string
		unload  []string
		force   bool
		quiesce map[string]error // Quiesce refusals
		fail    map[string]error // Unload hook refusals
		wantErr string           // "" for success
		calls   []string         // hook calls of the unload
		loaded  []string         // modules loaded after it, in Stat order
	}{
		{name: "quiesce sees the set", specs: []string{"a", "b"}, load: []string{"a", "b"}, unload: []string{"b", "a"},
			calls:  []string{"quiesce:b[a b] forced=false", "quiesce:a[a b] forced=false", "ctx:b[a b] forced=false", "unload:b", "ctx:a[a b] forced=false", "unload:a"},
			loaded: nil},
		{name: "quiesce refusal changes nothing", specs: []string{"a", "b"}, load: []string{"a", "b"}, unload: []string{"a", "b"},
			quiesce: map[string]error{"a": busy}, wantErr: "a is busy: in use by 2 SAs",
			calls:  []string{"quiesce:b[a b] forced=false", "quiesce:a[a b] forced=false"},
			loaded: []string{"a", "b"}},
		{name: "dependent and dependency together", specs: []string{"base", "top base"}, load: []string{"top"}, unload: []string{"base", "top"},
			calls:  []string{"quiesce:top[base top] forced=false", "quiesce:base[base top] forced=false", "ctx:top[base top] forced=false", "unload:top", "ctx:base[base top] forced=false", "unload:base"},
			loaded: nil},
		{name: "holder outside the set", specs: []string{"base", "top base", "other"}, load: []string{"top", "other"}, unload: []string{"base", "other"},
			wantErr: "base is busy: held by top", loaded: []string{"base", "top", "other"}},
		{name: "unload hook refusal reloads the others", specs: []string{"a", "b", "c"}, load: []string{"a", "b", "c"}, unload: []string{"a", "b", "c"},
			fail: map[string]error{"unload:a": busy}, wantErr: "a is busy: a: unload hook: in use by 2 SAs",
			calls: []string{"quiesce:c[a b c] forced=false", "quiesce:b[a b c] forced=false", "quiesce:a[a b c] forced=false",
				"ctx:c[a b c] forced=false", "unload:c", "ctx:b[a b c] forced=false", "unload:b", "ctx:a[a b c] forced=false", "unload:a",
				"load:b", "load:c"},
			loaded: []string{"a", "b", "c"}},
		{name: "force skips quiesce and refusals", specs: []string{"a", "b"}, load: []string{"a", "b"}, unload: []string{"a", "b"}, force: true,
			quiesce: map[string]error{"a": busy}, fail: map[string]error{"unload:a": busy},
			calls:  []string{"ctx:b[a b] forced=true", "unload:b", "ctx:a[a b] forced=true", "unload:a"},
			loaded: nil},
		{name: "one not loaded unloads nothing", specs: []string{"a", "b"}, load: []string{"a"}, unload: []string{"a", "b"},
			wantErr: "b: module not loaded", loaded: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			l, _ := newTestLoader(t, quiesced(j, tc.quiesce, hooked(j, tc.fail, tc.specs...)))
			ctx := context.Background()
			for _, n := range tc.load {
				if err := l.Load(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			j.take()
			before := l.Stat()
			var opts []UnloadOption
			if tc.force {
				opts = append(opts, Force())
			}
			err := l.UnloadAll(ctx, tc.unload, opts...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unload: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("unload: %v, want %q", err, tc.wantErr)
			case tc.wantErr != "" && strings.Contains(tc.wantErr, "busy") && !errors.Is(err, ErrBusy):
				t.Fatalf("unload: %v is not ErrBusy", err)
			}
			if got := j.take(); !slices.Equal(got, tc.calls) {
				t.Errorf("hook calls\n got %q\nwant %q", got, tc.calls)
			}
			if got := loadedNames(l); !slices.Equal(got, tc.loaded) {
				t.Errorf("loaded %v, want %v", got, tc.loaded)
			}
			if err != nil {
				// All or nothing: the table is as before (ids, refs,
				// holders), every module loaded.
				after := l.Stat()
				for i := range after {
					after[i].LoadedAt = before[i].LoadedAt
				}
				if fmt.Sprint(after) != fmt.Sprint(before) {
					t.Errorf("table after a refused unload\n got %+v\nwant %+v", after, before)
				}
			}
		})
	}
}

// TestUnloadAllEvents: a refused unload whose Quiesce says busy sends no
// event; one refused by an Unload hook after another module left sends
// that module's Unloaded then Loaded, and the refusing one's Loaded
// (unload refused).
func TestUnloadAllEvents(t *testing.T) {
	busy := fmt.Errorf("in use: %w", ErrBusy)
	j := &journal{}
	l, _ := newTestLoader(t, quiesced(j, map[string]error{"q": busy}, hooked(j, map[string]error{"unload:a": busy}, "a", "b", "q")))
	ctx := context.Background()
	if err := l.Load(ctx, "a", "b", "q"); err != nil {
		t.Fatal(err)
	}
	s := l.Subscribe(false)
	defer s.Close()
	if err := l.UnloadAll(ctx, []string{"q", "a"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("quiesce refusal: %v", err)
	}
	noMore(t, s)
	if err := l.UnloadAll(ctx, []string{"a", "b"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("unload hook refusal: %v", err)
	}
	want := []string{"b v1 unloading", "b v1 unloaded", "a v1 unloading", "a v1 loaded (unload refused)", "b v1 loaded"}
	if got := evStrings(drain(t, s, len(want))); !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
	noMore(t, s)
}
