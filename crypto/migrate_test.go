package crypto

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
)

// countProv is syncProv with a count of open sessions, to check that a
// migration leaks none.
type countProv struct {
	syncProv
	open *atomic.Int64
}

func (p countProv) NewSession(sp SessionParams, done CompletionFunc) (Session, error) {
	p.open.Add(1)
	return &countSess{syncSess: syncSess{done: done}, open: p.open}, nil
}

type countSess struct {
	syncSess
	open   *atomic.Int64
	closed atomic.Bool
}

func (s *countSess) Close(context.Context) error {
	if s.closed.CompareAndSwap(false, true) {
		s.open.Add(-1)
	}
	return nil
}

func newTestFW(t *testing.T) *Framework {
	t.Helper()
	f := New(Options{SkipSelfTests: true, CalibrationBudget: time.Millisecond, Logger: discard(), Hysteresis: 1e9})
	t.Cleanup(func() {
		if err := f.Close(testwait.Context(t)); err != nil {
			t.Errorf("framework close: %v", err)
		}
	})
	return f
}

var nullSHA1 = Algorithm{Cipher: CipherNull, Auth: AuthHMACSHA1_96}

// TestMigrationRacesClose: bindings are closed while Deregister migrates
// them (in chunks: sessions prepared first, then swapped). Every session
// created for a binding that was closed in between is closed again; the
// open bindings all end up on the remaining provider with exactly one
// session each.
func TestMigrationRacesClose(t *testing.T) {
	for _, n := range []int{1, migrateChunk - 1, 3*migrateChunk + 5} {
		f := newTestFW(t)
		var open1, open2 atomic.Int64
		if err := f.Register(context.Background(), countProv{syncProv{"p1"}, &open1}); err != nil {
			t.Fatal(err)
		}
		binds := make([]*Binding, n)
		for i := range binds {
			b, err := f.Bind(SessionParams{Alg: nullSHA1, AuthKey: make([]byte, 20)}, func([]*Request) {})
			if err != nil {
				t.Fatal(err)
			}
			binds[i] = b
		}
		if err := f.Register(context.Background(), countProv{syncProv{"p2"}, &open2}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i += 3 {
				binds[i].Close(testwait.Context(t))
			}
		}()
		if err := f.Deregister(context.Background(), "p1"); err != nil {
			t.Fatal(err)
		}
		testwait.Wait(t, testwait.Timeout, "bindings closed", &wg)
		openBinds := int64(0)
		for i, b := range binds {
			if i%3 == 0 {
				continue
			}
			openBinds++
			if p := b.Provider(); p != "p2" {
				t.Fatalf("n=%d: binding %d on %q", n, i, p)
			}
		}
		if o1, o2 := open1.Load(), open2.Load(); o1 != 0 || o2 != openBinds {
			t.Fatalf("n=%d: open sessions p1 %d, p2 %d; want 0, %d", n, o1, o2, openBinds)
		}
		for _, b := range binds {
			b.Close(testwait.Context(t))
		}
		if o2 := open2.Load(); o2 != 0 {
			t.Fatalf("n=%d: %d sessions open after closing every binding", n, o2)
		}
		for _, ps := range f.Providers() {
			if ps.Sessions != 0 {
				t.Fatalf("n=%d: %s reports %d sessions", n, ps.Name, ps.Sessions)
			}
		}
	}
}

// TestPreparedSessionUnused: a session prepared for a binding that is
// closed (or no longer needs to move) before the swap is handed back and
// closed, never installed.
func TestPreparedSessionUnused(t *testing.T) {
	for _, tc := range []string{"closed", "target gone"} {
		f := newTestFW(t)
		var open1, open2 atomic.Int64
		if err := f.Register(context.Background(), countProv{syncProv{"p1"}, &open1}); err != nil {
			t.Fatal(err)
		}
		b, err := f.Bind(SessionParams{Alg: nullSHA1, AuthKey: make([]byte, 20)}, func([]*Request) {})
		if err != nil {
			t.Fatal(err)
		}
		e1 := f.snap.Load().byName["p1"]
		e1.state.Store(stUnloading) // b must move, to the best other provider
		if err := f.Register(context.Background(), countProv{syncProv{"p2"}, &open2}); err != nil {
			t.Fatal(err)
		}
		// Register moved b already; move it back to have something to prepare.
		e1.state.Store(stOK)
		e2 := f.snap.Load().byName["p2"]
		e2.state.Store(stUnloading)
		f.mu.Lock()
		f.publishLocked()
		f.mu.Unlock()
		pre := b.prepareMove()
		if pre == nil || pre.prov != e1 {
			t.Fatalf("%s: prepared %v", tc, pre)
		}
		switch tc {
		case "closed":
			b.Close(testwait.Context(t))
		case "target gone":
			e1.state.Store(stUnloading)
			e2.state.Store(stOK)
			f.mu.Lock()
			f.publishLocked()
			f.mu.Unlock()
		}
		moved, old, unused := b.move(pre)
		if moved || old != nil || unused != pre {
			t.Fatalf("%s: move = %v, %v, %v; want false, nil, the prepared session", tc, moved, old, unused)
		}
		f.retire(unused, nil)
		if b.curp.Load() == pre {
			t.Fatalf("%s: prepared session installed", tc)
		}
		b.Close(testwait.Context(t))
		if o1, o2 := open1.Load(), open2.Load(); o1 != 0 || o2 != 0 {
			t.Fatalf("%s: open sessions %d, %d after close", tc, o1, o2)
		}
	}
}

func TestShardedCounter(t *testing.T) {
	var c shardedCounter
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				k := uint64(g*1000 + i)
				c.add(k, 1)
				if i%2 == 0 {
					c.add(k, -1)
				}
			}
		}()
	}
	testwait.Wait(t, testwait.Timeout, "counter users done", &wg)
	if got := c.load(); got != 2000 {
		t.Fatalf("load = %d, want 2000", got)
	}
}
