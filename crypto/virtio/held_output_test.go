//go:build linux

package virtio_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/virtio"

	"github.com/keelinit/keel/internal/testfault"
	"github.com/keelinit/keel/internal/testwait"
)

// TestDeathSeenWhileOutputHeld kills the device while a descendant of it
// holds both its output (a Go writer) and its socket: only the process
// wait can tell, and it must, within a deadline; Close must not wait for
// the descendant either (issue 12, D4, in the virtio provider).
func TestDeathSeenWhileOutputHeld(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	held, _ := testfault.HeldOutput(t, "60")
	wrapper := filepath.Join(t.TempDir(), "device.sh")
	src := fmt.Sprintf("#!/bin/sh\n%s\n%s=1 exec %s\n", held, virtio.ChildEnv, exe)
	if err := os.WriteFile(wrapper, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	faulted := make(chan error, 1)
	p, err := virtio.Start(t.Context(), virtio.Options{DevicePath: wrapper, DeviceOutput: io.Discard, // a Go writer: os/exec copies it from a pipe
		OnFault: func(err error) {
			select {
			case faulted <- err:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err, _ := testwait.Recv(t, 5*time.Second, "device death seen", faulted); !errors.Is(err, crypto.ErrDeviceGone) {
		t.Fatalf("fault %v, want ErrDeviceGone", err)
	}
	testwait.Func(t, 5*time.Second, "Close", func() { _ = p.Close(t.Context()) })
}
