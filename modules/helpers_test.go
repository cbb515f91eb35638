package modules

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// journal records hook calls ("load:x", "unload:x") in order.
type journal struct {
	mu    sync.Mutex
	calls []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	j.calls = append(j.calls, s)
	j.mu.Unlock()
}

func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.calls
	j.calls = nil
	return c
}

// spec is a compact module description for tests:
// "name@version deps... pre:x post:y", deps as "crypto" or "crypto>=2"
// "crypto<=3" "crypto=2..3".
func spec(s string) Module {
	f := strings.Fields(s)
	m := Module{Name: f[0], Version: 1, Kind: KindService}
	if n, v, ok := strings.Cut(f[0], "@"); ok {
		m.Name = n
		fmt.Sscan(v, &m.Version)
	}
	for _, t := range f[1:] {
		switch {
		case strings.HasPrefix(t, "pre:"):
			m.Pre = append(m.Pre, t[4:])
		case strings.HasPrefix(t, "post:"):
			m.Post = append(m.Post, t[5:])
		case strings.Contains(t, ">="):
			n, v, _ := strings.Cut(t, ">=")
			d := Dependency{Name: n}
			fmt.Sscan(v, &d.Min)
			m.Depends = append(m.Depends, d)
		case strings.Contains(t, "<="):
			n, v, _ := strings.Cut(t, "<=")
			d := Dependency{Name: n}
			fmt.Sscan(v, &d.Max)
			m.Depends = append(m.Depends, d)
		case strings.Contains(t, "="):
			n, v, _ := strings.Cut(t, "=")
			d := Dependency{Name: n}
			fmt.Sscanf(v, "%d..%d", &d.Min, &d.Max)
			m.Depends = append(m.Depends, d)
		default:
			m.Depends = append(m.Depends, Dependency{Name: t})
		}
	}
	return m
}

// hooked attaches journaling hooks to every module of specs; fail maps a
// "load:x"/"unload:x" call to the error it returns.
func hooked(j *journal, fail map[string]error, specs ...string) []Module {
	out := make([]Module, len(specs))
	for i, s := range specs {
		m := spec(s)
		name := m.Name
		m.Load = func(context.Context) error {
			j.add("load:" + name)
			return fail["load:"+name]
		}
		m.Unload = func(context.Context) error {
			j.add("unload:" + name)
			return fail["unload:"+name]
		}
		out[i] = m
	}
	return out
}

// logBuffer is a concurrency-safe sink for a test logger.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTestLoader(t testing.TB, mods []Module) (*Loader, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	return NewLoader(WithCatalog(mods), WithLogger(slog.New(slog.NewTextHandler(lb, nil)))), lb
}

// loadedNames returns the names in Stat order.
func loadedNames(l *Loader) []string {
	var out []string
	for _, s := range l.Stat() {
		out = append(out, s.Name)
	}
	return out
}

// drain reads n events or fails after a timeout.
func drain(t *testing.T, s *Subscription, n int) []Event {
	t.Helper()
	out := make([]Event, 0, n)
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-s.Events():
			if !ok {
				t.Fatalf("events closed after %d of %d", len(out), n)
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("timed out after %d of %d events: %v", len(out), n, out)
		}
	}
	return out
}

// noMore checks that no further event arrives promptly.
func noMore(t *testing.T, s *Subscription) {
	t.Helper()
	select {
	case e := <-s.Events():
		t.Fatalf("unexpected event %v", e)
	case <-time.After(20 * time.Millisecond):
	}
}

func evStrings(es []Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.String()
	}
	return out
}
