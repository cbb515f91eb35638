package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/services"
)

// TestSecondInstanceTouchesNothing starts a second keeld against a
// running one, first on the same runtime directory and then on its own
// runtime directory but the same state directory. Both must be refused
// before they create or remove anything: the running keeld's
// notify.sock survives, so its notify=yes syslogd can still restart.
func TestSecondInstanceTouchesNothing(t *testing.T) {
	d := startKeeld(t, "")
	notifySock := filepath.Join(d.rt, "notify.sock")
	before, err := os.Stat(notifySock)
	if err != nil {
		t.Fatalf("running keeld has no notify socket: %v", err)
	}
	otherRT := t.TempDir()
	cases := []struct {
		name, rt, socket, want string
	}{
		{"same runtime dir", d.rt, filepath.Join(d.rt, "other.sock"), "runtime dir " + d.rt + ": in use by another keeld (pid " + strconv.Itoa(d.cmd.Process.Pid) + ")"},
		{"same state dir", otherRT, filepath.Join(otherRT, "keeld.sock"), "state dir " + d.rt + ": in use by another keeld (pid " + strconv.Itoa(d.cmd.Process.Pid) + ")"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(binDir, "keeld"), "--runtime-dir", c.rt, "--socket", c.socket)
			cmd.Dir = c.rt
			cmd.Env = append(os.Environ(), "KEEL_LOG_FORMAT=text", "KEEL_STATE_DIR="+d.rt, "NOTIFY_SOCKET=")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("second keeld exited 0; want a refusal\n%s", out.String())
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("second keeld still running after 20s: not refused\n%s", out.String())
			}
			if !strings.Contains(out.String(), c.want) {
				t.Errorf("refusal does not say %q:\n%s", c.want, out.String())
			}
			if _, err := os.Stat(c.socket); err == nil {
				t.Errorf("refused keeld left %s behind", c.socket)
			}
		})
	}
	after, err := os.Stat(notifySock)
	if err != nil {
		t.Fatalf("running keeld's notify.sock removed by the refused instance: %v", err)
	}
	if !os.SameFile(before, after) {
		t.Fatalf("running keeld's notify.sock was replaced by the refused instance")
	}
	if _, errs, code := d.keelctl(nil, "restart", "syslogd"); code != 0 {
		t.Fatalf("keelctl restart syslogd: exit %d: %s", code, errs)
	}
	if st := d.status()["syslogd"]; st.State != services.StateRunning {
		t.Fatalf("syslogd after restart: %s (%s)", st.State, st.Reason)
	}
}
