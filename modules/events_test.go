package modules

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
)

func TestEventsOrder(t *testing.T) {
	tests := []struct {
		name   string
		before []string // loaded before subscribing
		replay bool
		ops    func(l *Loader) error
		want   []string
	}{
		{"load and unload", nil, false, func(l *Loader) error {
			if err := l.Load(context.Background(), "aesni"); err != nil {
				return err
			}
			return l.Unload(context.Background(), "aesni")
		}, []string{"crypto v2 loaded", "aesni v1 loaded", "aesni v1 unloading", "aesni v1 unloaded",
			"crypto v2 unloading", "crypto v2 unloaded"}},
		{"no replay", []string{"aesni"}, false, func(l *Loader) error {
			return l.Load(context.Background(), "ipsec")
		}, []string{"ipsec v1 loaded"}},
		{"replay then live", []string{"aesni"}, true, func(l *Loader) error {
			return l.Load(context.Background(), "ipsec")
		}, []string{"crypto v2 loaded (snapshot)", "aesni v1 loaded (snapshot)", "ipsec v1 loaded"}},
		{"replay empty", nil, true, func(l *Loader) error {
			return l.Load(context.Background(), "crypto")
		}, []string{"crypto v2 loaded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTestLoader(t, hooked(&journal{}, nil, "crypto@2", "aesni crypto", "ipsec crypto"))
			if err := l.Load(context.Background(), tc.before...); err != nil {
				t.Fatal(err)
			}
			s := l.Subscribe(tc.replay)
			defer s.Close()
			if err := tc.ops(l); err != nil {
				t.Fatal(err)
			}
			evs := drain(t, s, len(tc.want))
			if got := evStrings(evs); !slices.Equal(got, tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
			for i, e := range evs {
				if e.Time.IsZero() || (i > 0 && e.Time.Before(evs[i-1].Time) && !e.Snapshot) {
					t.Errorf("event %v time %v", e, e.Time)
				}
			}
			if evs[0].Kind != KindService {
				t.Errorf("kind %q", evs[0].Kind)
			}
			noMore(t, s)
		})
	}
}

func TestReplayShowsUnloadInProgress(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	mods := []Module{{Name: "slow", Version: 1, Unload: func(context.Context) error {
		close(entered)
		<-release
		return nil
	}}}
	l, _ := newTestLoader(t, mods)
	if err := l.Load(context.Background(), "slow"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- l.Unload(context.Background(), "slow") }()
	testwait.Recv(t, testwait.Timeout, "unload hook entered", entered)
	if l.IsLoaded("slow") || l.Stat()[0].State != StateUnloading {
		t.Fatalf("state during unload: %+v", l.Stat())
	}
	s := l.Subscribe(true)
	defer s.Close()
	close(release)
	if err, _ := testwait.Recv(t, testwait.Timeout, "hook call returned", done); err != nil {
		t.Fatal(err)
	}
	want := []string{"slow v1 loaded (snapshot)", "slow v1 unloading (snapshot)", "slow v1 unloaded"}
	if got := evStrings(drain(t, s, 3)); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestSlowSubscriberLosesNothing(t *testing.T) {
	l, _ := newTestLoader(t, hooked(&journal{}, nil, "a"))
	s := l.Subscribe(false)
	const rounds = 2000
	ctx := context.Background()
	for range rounds {
		if err := l.Load(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := l.Unload(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	evs := drain(t, s, 3*rounds)
	for i, e := range evs {
		if want := EventType(i%3 + 1); e.Type != want {
			t.Fatalf("event %d is %v, want %v", i, e.Type, want)
		}
	}
	s.Close()
	s.Close() // idempotent
	select {
	case _, ok := <-s.Events():
		if ok {
			t.Fatal("event after Close and drain")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Events not closed after Close")
	}
	if err := l.Load(ctx, "a"); err != nil { // publishing to nobody is fine
		t.Fatal(err)
	}
}

// TestReplayAtomic subscribes with replay while other goroutines load and
// unload: each subscriber's stream, applied to its snapshot, must follow
// the per-module state machine and end in the loader's final state.
func TestReplayAtomic(t *testing.T) {
	mods := hooked(&journal{}, nil, "crypto", "aesni crypto", "glxsb crypto", "ipsec crypto", "ike ipsec")
	l, _ := newTestLoader(t, mods)
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := mods[r.IntN(len(mods))].Name
				if r.IntN(2) == 0 {
					_ = l.Load(ctx, n)
				} else {
					_ = l.Unload(ctx, n, Force())
				}
			}
		})
	}
	var subs []*Subscription
	for range 20 {
		subs = append(subs, l.Subscribe(true))
		time.Sleep(time.Millisecond)
	}
	close(stop)
	testwait.Wait(t, testwait.Timeout, "load/unload workers stopped", &wg)
	final := map[string]bool{}
	for _, st := range l.Stat() {
		final[st.Name] = st.State == StateLoaded
	}
	// A marker load/unload flushes every stream.
	l2 := "crypto"
	_ = l.Load(ctx, l2)
	for i, s := range subs {
		state := map[string]EventType{}
		snap := true
		for {
			var e Event
			select {
			case e = <-s.Events():
			case <-time.After(10 * time.Second):
				t.Fatalf("sub %d stalled", i)
			}
			if !e.Snapshot {
				snap = false
			} else if !snap {
				t.Fatalf("sub %d: snapshot event after live ones: %v", i, e)
			}
			prev := state[e.Module]
			ok := false
			switch e.Type {
			case Loaded:
				ok = prev == 0 || prev == Unloaded || (prev == Unloading && e.Aborted)
			case Unloading:
				ok = prev == Loaded
			case Unloaded:
				ok = prev == Unloading
			}
			if !ok {
				t.Fatalf("sub %d: %v after %v", i, e, prev)
			}
			state[e.Module] = e.Type
			if reflectsFinal(state, final, l2) {
				break
			}
		}
		s.Close()
	}
}

// reflectsFinal reports whether state matches final plus the marker load.
func reflectsFinal(state map[string]EventType, final map[string]bool, marker string) bool {
	if state[marker] != Loaded {
		return false
	}
	for n, t := range state {
		if n != marker && (t == Loaded) != final[n] {
			return false
		}
	}
	for n, up := range final {
		if up && state[n] != Loaded {
			return false
		}
	}
	return true
}

// TestConcurrentLoadUnload hammers one loader from several goroutines and
// checks, under -race, that hooks of one module never overlap and
// alternate load/unload, and that the table stays consistent.
func TestConcurrentLoadUnload(t *testing.T) {
	specs := []string{"crypto", "aesni crypto post:cryptosoft", "cryptosoft crypto", "glxsb crypto pre:cryptosoft",
		"ipsec crypto", "ike ipsec", "pf", "if_bridge post:pf"}
	var mods []Module
	var mu sync.Mutex
	loaded := map[string]bool{}
	var overlaps, badOrder atomic.Int32
	inHook := map[string]*atomic.Int32{}
	for _, s := range specs {
		m := spec(s)
		name := m.Name
		inHook[name] = new(atomic.Int32)
		m.Load = func(ctx context.Context) error {
			if inHook[name].Add(1) != 1 {
				overlaps.Add(1)
			}
			defer inHook[name].Add(-1)
			time.Sleep(20 * time.Microsecond) // widen the windows for races
			mu.Lock()
			if loaded[name] {
				badOrder.Add(1)
			}
			for _, d := range spec(s).Depends {
				if !loaded[d.Name] {
					badOrder.Add(1)
				}
			}
			loaded[name] = true
			mu.Unlock()
			if ctx.Value(ctxKey{}) != "keel" {
				return errors.New("ctx not passed")
			}
			return nil
		}
		m.Unload = func(context.Context) error {
			if inHook[name].Add(1) != 1 {
				overlaps.Add(1)
			}
			defer inHook[name].Add(-1)
			mu.Lock()
			if !loaded[name] {
				badOrder.Add(1)
			}
			for _, o := range specs {
				if om := spec(o); loaded[om.Name] && slices.ContainsFunc(om.Depends, func(d Dependency) bool { return d.Name == name }) {
					badOrder.Add(1)
				}
			}
			loaded[name] = false
			mu.Unlock()
			return nil
		}
		mods = append(mods, m)
	}
	l, _ := newTestLoader(t, mods)
	ctx := context.WithValue(context.Background(), ctxKey{}, "keel")
	s := l.Subscribe(true)
	defer s.Close()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 300 {
				n := mods[r.IntN(len(mods))].Name
				var err error
				switch r.IntN(4) {
				case 0, 1:
					err = l.Load(ctx, n, mods[r.IntN(len(mods))].Name)
				case 2:
					err = l.Unload(ctx, n)
				case 3:
					err = l.Unload(ctx, n, Force())
				}
				if err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, ErrNotLoaded) {
					t.Errorf("unexpected error: %v", err)
				}
				_ = l.Stat()
			}
		})
	}
	testwait.Wait(t, testwait.Long, "load/unload workers done", &wg)
	if overlaps.Load() != 0 || badOrder.Load() != 0 {
		t.Fatalf("%d overlapping hooks, %d out-of-order hooks", overlaps.Load(), badOrder.Load())
	}
	st := l.Stat()
	byName := map[string]Stat{}
	for _, r := range st {
		byName[r.Name] = r
		if r.State != StateLoaded || !loaded[r.Name] {
			t.Errorf("%s: state %s, hook state %v", r.Name, r.State, loaded[r.Name])
		}
	}
	for _, r := range st {
		for _, d := range r.DependsOn {
			if dep, ok := byName[d]; !ok || !slices.Contains(dep.Holders, r.Name) || dep.ID > r.ID {
				t.Errorf("%s depends on %s: %+v", r.Name, d, dep)
			}
		}
		if want := len(r.Holders) + map[bool]int{true: 1}[r.Explicit]; r.Refs != want || r.Refs == 0 {
			t.Errorf("%s refs %d, want %d", r.Name, r.Refs, want)
		}
	}
	for n, up := range loaded {
		if _, ok := byName[n]; ok != up {
			t.Errorf("%s hook state %v, in table %v", n, up, ok)
		}
	}
}

type ctxKey struct{}

func TestReentrantHook(t *testing.T) {
	var l *Loader
	var inner error
	l, _ = newTestLoader(t, []Module{
		{Name: "b"},
		{Name: "a", Load: func(ctx context.Context) error {
			inner = l.Load(ctx, "b")
			return nil
		}, Unload: func(ctx context.Context) error {
			inner = l.Unload(ctx, "b")
			return nil
		}},
	})
	ctx := context.Background()
	if err := l.Load(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, ErrReentrant) {
		t.Fatalf("inner Load: %v", inner)
	}
	inner = nil
	if err := l.Unload(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, ErrReentrant) {
		t.Fatalf("inner Unload: %v", inner)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	l, _ := newTestLoader(t, []Module{
		{Name: "slow", Load: func(context.Context) error { close(entered); <-release; return nil }},
		{Name: "after", Pre: []string{"slow"}},
	})
	done := make(chan error)
	go func() { done <- l.Load(context.Background(), "slow") }()
	testwait.Recv(t, testwait.Timeout, "load hook entered", entered)
	for _, tc := range []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"load same", func(ctx context.Context) error { return l.Load(ctx, "slow") }},
		{"unload same", func(ctx context.Context) error { return l.Unload(ctx, "slow") }},
		{"soft pre waits for in-flight load", func(ctx context.Context) error { return l.Load(ctx, "after") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			if err := tc.op(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v", err)
			}
		})
	}
	// A waiter proceeds once the load finishes, and sees it done.
	waiter := make(chan error)
	go func() { waiter <- l.Load(context.Background(), "after") }()
	close(release)
	if err, _ := testwait.Recv(t, testwait.Timeout, "hook call returned", done); err != nil {
		t.Fatal(err)
	}
	if err, _ := testwait.Recv(t, testwait.Timeout, "waiting load returned", waiter); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(loadedNames(l)); got != "[slow after]" {
		t.Fatalf("loaded %s", got)
	}
	// A canceled ctx fails a load before any hook runs.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l2, _ := newTestLoader(t, hooked(&journal{}, nil, "a"))
	if err := l2.Load(ctx, "a"); !errors.Is(err, context.Canceled) || l2.IsLoaded("a") || len(l2.Stat()) != 0 {
		t.Fatalf("err %v, stat %v", err, l2.Stat())
	}
}
