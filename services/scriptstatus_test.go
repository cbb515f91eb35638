package services

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestScriptStatusDescendantKeepsOutput: a status action that leaves a
// background child holding its output open answers within a bound
// (WaitDelay), with its line, instead of holding every reader of the
// single-flight status for as long as the child lives.
func TestScriptStatusDescendantKeepsOutput(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.d/held": "#!/bin/sh\n# PROVIDE: held\nname=held\ncase $1 in status) sleep 6 & echo held open;; esac\n",
	})
	m := newManager(t, root, nil)
	if err := m.Start(context.Background(), "held"); err != nil {
		t.Fatal(err)
	}
	done := make(chan Detail, 1)
	go func() {
		d, err := m.Detail("held", 1)
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	select {
	case d := <-done:
		if d.StatusText != "held open" || d.Reason != "" {
			t.Fatalf("status %q reason %q", d.StatusText, d.Reason)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Detail still waiting after 4 s for a status action whose child holds its output")
	}
}

// TestScriptStatusRefreshes: the cached answer is reused within
// ScriptStatusTTL and replaced after it, so a changed status shows.
func TestScriptStatusRefreshes(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(state, []byte("first\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := writeRoot(t, tree{
		"etc/rc.d/svc": "#!/bin/sh\n# PROVIDE: svc\nname=svc\ncase $1 in status) cat " + state + ";; esac\n",
	})
	m := newManager(t, root, nil)
	if err := m.Start(context.Background(), "svc"); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		d, err := m.Detail("svc", 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.StatusText
	}
	t0 := time.Now()
	if got := status(); got != "first" {
		t.Fatalf("status %q", got)
	}
	if err := os.WriteFile(state, []byte("second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != "first" && time.Since(t0) < ScriptStatusTTL {
		t.Fatalf("status %q within the TTL, want the cached %q", got, "first")
	}
	deadline := t0.Add(ScriptStatusTTL + 5*time.Second)
	for status() != "second" {
		if time.Now().After(deadline) {
			t.Fatalf("status still %q %v after the change (TTL %v)", status(), time.Since(t0), ScriptStatusTTL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
