package device

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/crypto/virtio/spec"
)

// serveSetup runs Serve on one end of a socket pair, sends msg with a
// memfd of memSize bytes and the queues' eventfds on the other, and
// returns Serve's result.
func serveSetup(t *testing.T, cfg spec.Config, msg []byte, memSize int64) error {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	drv := os.NewFile(uintptr(pair[0]), "driver")
	defer drv.Close()
	done := make(chan error, 1)
	go func() { done <- Serve(os.NewFile(uintptr(pair[1]), "device")) }()

	memfd, err := unix.MemfdCreate("test-region", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	fds := []int{memfd}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if err := unix.Ftruncate(memfd, memSize); err != nil {
		t.Fatal(err)
	}
	for range 2 * (cfg.DataQueues + 1) {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	if err := unix.Sendmsg(int(drv.Fd()), msg, unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}

// TestServeRefusesBadRegion: the device checks the setup message and the
// region file before mapping it, instead of faulting later.
func TestServeRefusesBadRegion(t *testing.T) {
	cfg := spec.Config{DataQueues: 1, QueueSize: 4, CtrlQueueSize: 2, MaxData: 64}
	reg, err := cfg.Layout()
	if err != nil {
		t.Fatal(err)
	}
	huge := spec.Config{DataQueues: 1, QueueSize: 32768, CtrlQueueSize: 2, MaxData: 1 << 20}
	tests := []struct {
		name    string
		cfg     spec.Config
		memSize int64
		wantErr string
	}{
		{"region file shorter than the layout", cfg, int64(reg.Size) - 4096, "region file of"},
		{"empty region file", cfg, 0, "region file of 0 bytes"},
		{"region above the cap", huge, int64(reg.Size), "cap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := serveSetup(t, tt.cfg, spec.EncodeSetup(tt.cfg), tt.memSize)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Serve = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}
