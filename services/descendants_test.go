package services

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testfault"
	"github.com/keelinit/keel/internal/testwait"
)

// Descendants that outlive a service's main process and keep its output
// pipe open (issue 12, D4) must delay neither the detection of its exit
// nor a stop or a shutdown.

// heldOutputScript writes a shell script to dir: it leaves a setsid
// grandchild (sleep grandSleep) holding its stdout and then runs body,
// which says "holder ready" once it is set up (readyLines counts them).
func heldOutputScript(t *testing.T, dir, name, grandSleep, body string) string {
	t.Helper()
	held, _ := testfault.HeldOutput(t, grandSleep)
	path := filepath.Join(dir, name+".sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+held+"\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitFor polls the manager's status until cond holds, failing the test at
// the deadline (and logging the last status).
func waitFor(t *testing.T, m *Manager, name string, deadline time.Duration, what string, cond func(Status) bool) Status {
	t.Helper()
	var last Status
	defer func() {
		if t.Failed() {
			t.Logf("%s: last status %+v", name, last)
		}
	}()
	testwait.Until(t, deadline, name+" "+what, func() bool {
		last = states(m)[name]
		return cond(last)
	})
	return last
}

// TestKillDetectedDespiteHeldOutput is the reproduction of D4: a daemon
// runs "setsid sleep 45 &" then "exec sleep 1000"; kill -9 of the main
// process must be seen at once and restart=always must restart it.
func TestKillDetectedDespiteHeldOutput(t *testing.T) {
	dir := t.TempDir()
	script := heldOutputScript(t, dir, "h", "45", "echo holder ready\nexec sleep 1000")
	root := writeRoot(t, tree{
		"etc/rc.d/h": svc("h", "", "name=h\ncommand="+script+"\nrestart=always\nrestart_backoff=10ms\nstop_timeout=1\n"),
	})
	m := newManager(t, root, nil)
	if err := m.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := waitFor(t, m, "h", 5*time.Second, "running", func(s Status) bool { return s.State == StateRunning && s.PID > 0 })
	waitFor(t, m, "h", 5*time.Second, "holding its output", func(Status) bool { return readyLines(m, "h") == 1 })
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := waitFor(t, m, "h", 5*time.Second, "restarted after kill -9", func(s Status) bool {
		return s.State == StateRunning && s.Restarts == 1 && s.PID > 0 && s.PID != first.PID
	})
	// The new run's output reaches the log.
	waitFor(t, m, "h", 5*time.Second, "logging again", func(Status) bool { return readyLines(m, "h") == 2 })
	det, _ := m.Detail("h", 20)
	if !strings.Contains(strings.Join(det.Log, "\n"), "main process killed by signal SIGKILL") {
		t.Errorf("log does not name the kill: %q", det.Log)
	}
	t.Logf("restarted as pid %d", st.PID)
}

// readyLines counts the "holder ready" lines in a unit's log.
func readyLines(m *Manager, name string) int {
	det, _ := m.Detail(name, 50)
	return strings.Count(strings.Join(det.Log, "\n"), "holder ready")
}

// TestScriptStartWithBackgroundDaemon runs a legacy rc.d script whose start
// leaves a background daemon holding its output, as "foo &" in rc scripts
// does: the start is done when the script exits, not when the daemon does.
func TestScriptStartWithBackgroundDaemon(t *testing.T) {
	held, _ := testfault.HeldOutput(t, "infinity")
	root := writeRoot(t, tree{
		"etc/rc.d/legacy": "#!/bin/sh\n# PROVIDE: legacy\nname=legacy\n" +
			"case $1 in start) " + held + "; echo started;; status) " + held + "; echo legacy is fine;; esac\n",
	})
	m := newManager(t, root, nil)
	var err error
	testwait.Func(t, 5*time.Second, "boot past the script's background daemon", func() { err = m.Boot(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if st := states(m)["legacy"]; st.State != StateExited {
		t.Fatalf("legacy: %+v", st)
	}
	// The status query (keelctl status legacy) is not held either.
	var det Detail
	testwait.Func(t, 5*time.Second, "Detail past the status run's background daemon", func() { det, _ = m.Detail("legacy", 5) })
	if det.StatusText != "legacy is fine" {
		t.Errorf("status text %q", det.StatusText)
	}
}
