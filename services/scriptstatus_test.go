package services

import (
	"context"
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
