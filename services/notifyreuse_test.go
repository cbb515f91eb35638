package services

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/hostile"
	"github.com/keelinit/keel/services/notify"
)

// TestNotifyFromReusedPID: a local process sends STATUS= on the notify
// socket and exits; before keeld handles the datagram, its pid is reused
// (through ns_last_pid) by a service's main process. The message must not
// be taken as the service's: the sender's pidfd (SCM_PIDFD) shows it is
// gone. (Looking the pid up alone attributed it to the service.)
func TestNotifyFromReusedPID(t *testing.T) {
	hostile.RequireRoot(t, "to set ns_last_pid")
	root := writeRoot(t, tree{"etc/rc.d/d": svc("d", "", "name=d\ncommand=/bin/sleep\ncommand_args=1000\n")})
	m := newManager(t, root, nil)
	received, release, handled := make(chan struct{}), make(chan struct{}), make(chan struct{})
	srv, err := notify.Listen(filepath.Join(t.TempDir(), "n.sock"), func(msg notify.Message) {
		close(received)
		<-release
		m.onNotify(msg)
		close(handled)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before srv.Close, which waits for the handler
	exe, _ := os.Executable()
	spoof := exec.Command(exe, "-test.run=^$", "--", "helper", "spoof", "spoofed")
	spoof.Env = append(os.Environ(), "NOTIFY_SOCKET="+srv.Path())
	if out, err := spoof.CombinedOutput(); err != nil {
		t.Fatalf("sender: %v %s", err, out)
	}
	pid := spoof.Process.Pid
	select {
	case <-received:
	case <-time.After(10 * time.Second):
		t.Fatal("datagram not received within 10 s")
	}
	ctx := context.Background()
	hostile.ReusePID(t, pid, func() (int, func()) {
		if err := m.Start(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		det, _ := m.Detail("d", 1)
		return det.PID, func() {
			if err := m.Stop(ctx, "d"); err != nil {
				t.Fatal(err)
			}
		}
	})
	unblock()
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("datagram not handled within 10 s")
	}
	if det, _ := m.Detail("d", 1); det.StatusText == "spoofed" {
		t.Fatalf("STATUS= from exited pid %d was taken as d's (now pid %d)", pid, det.PID)
	}
}
