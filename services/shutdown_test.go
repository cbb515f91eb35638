package services

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
)

// TestShutdownBounded checks that Shutdown ends within the stop timeout or
// the shutdown deadline, whichever is first, plus a margin, whatever the
// daemons and their descendants do.
func TestShutdownBounded(t *testing.T) {
	const margin = 3 * time.Second
	tests := []struct {
		name        string
		body        string // after the held-output grandchild is started; says "holder ready"
		grandSleep  string
		stopTimeout time.Duration
		deadline    time.Duration // of the Shutdown context
		wantErr     string
	}{
		// Main exits on SIGTERM; a "sleep infinity" grandchild holds stdout.
		{"grandchild holds stdout", "echo holder ready\nexec sleep 1000", "infinity", 2 * time.Second, time.Minute, ""},
		// Main ignores SIGTERM: killed at stop_timeout.
		{"TERM ignored, stop timeout first", "trap '' TERM\necho holder ready\nwhile :; do sleep 1; done", "infinity", time.Second, time.Minute, "did not exit within 1s of SIGTERM; killed"},
		// Main ignores SIGTERM and stop_timeout is long: the shutdown
		// deadline cuts it short.
		{"TERM ignored, deadline first", "trap '' TERM\necho holder ready\nwhile :; do sleep 1; done", "infinity", time.Minute, time.Second, "context deadline exceeded; killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			script := heldOutputScript(t, dir, "d", tt.grandSleep, tt.body)
			root := writeRoot(t, tree{
				"etc/rc.d/d": svc("d", "", fmt.Sprintf("name=d\ncommand=%s\nstop_timeout=%g\n", script, tt.stopTimeout.Seconds())),
			})
			m := newManager(t, root, nil)
			if err := m.Boot(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, m, "d", 5*time.Second, "running", func(s Status) bool { return s.State == StateRunning })
			// Wait for the script to reach its body (trap installed).
			waitFor(t, m, "d", 5*time.Second, "holding its output", func(Status) bool { return readyLines(m, "d") == 1 })
			ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
			defer cancel()
			bound := min(tt.stopTimeout, tt.deadline) + margin
			t0 := time.Now()
			var err error
			testwait.Func(t, bound, fmt.Sprintf("Shutdown (stop_timeout %v, deadline %v)", tt.stopTimeout, tt.deadline), func() { err = m.Shutdown(ctx) })
			t.Logf("shutdown in %v: %v", time.Since(t0).Round(time.Millisecond), err)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Shutdown error %v, want %q", err, tt.wantErr)
			}
			if st := states(m)["d"]; st.State != StateStopped {
				t.Errorf("after shutdown: %+v", st)
			}
		})
	}
}

// TestShutdownCancelsOperations: a manual start or restart that hangs
// (here in start_precmd, with a 60 s start_timeout) holds the manager's
// operation lock; Shutdown cancels it instead of waiting it out.
func TestShutdownCancelsOperations(t *testing.T) {
	const margin = 3 * time.Second
	tests := []struct {
		name string
		op   func(m *Manager, ctx context.Context) error
	}{
		{"start", func(m *Manager, ctx context.Context) error { return m.Start(ctx, "slow") }},
		{"restart", func(m *Manager, ctx context.Context) error { return m.Restart(ctx, "slow") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			flag := filepath.Join(dir, "hang")
			precmd := filepath.Join(dir, "precmd.sh")
			if err := os.WriteFile(precmd, []byte("[ -e "+flag+" ] && exec sleep 1000\nexit 0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			root := writeRoot(t, tree{
				"etc/rc.d/slow": svc("slow", "", "name=slow\ncommand=/bin/sleep\ncommand_args=1000\nstart_timeout=60\nstart_precmd=\"/bin/sh "+precmd+"\"\n"),
			})
			m := newManager(t, root, nil)
			ctx := context.Background()
			if err := m.Boot(ctx); err != nil {
				t.Fatal(err)
			}
			if tt.name == "start" {
				if err := m.Stop(ctx, "slow"); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(flag, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			opErr := make(chan error, 1)
			go func() { opErr <- tt.op(m, ctx) }()
			waitFor(t, m, "slow", 5*time.Second, "starting", func(s Status) bool { return s.State == StateStarting })
			t0 := time.Now()
			testwait.Func(t, margin, "Shutdown with a "+tt.name+" in progress", func() { _ = m.Shutdown(ctx) })
			t.Logf("shutdown in %v", time.Since(t0).Round(time.Millisecond))
			if err, _ := testwait.Recv(t, testwait.Timeout, tt.name+" returned", opErr); err == nil {
				t.Errorf("%s succeeded, want it cancelled", tt.name)
			}
			if st := states(m)["slow"]; st.State == StateRunning || st.State == StateStarting {
				t.Errorf("after shutdown: %+v", st)
			}
		})
	}
}
