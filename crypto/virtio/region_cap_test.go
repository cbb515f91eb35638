//go:build linux

package virtio_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/crypto/virtio/spec"
	"github.com/keelinit/keel/internal/testwait"
)

// TestStartRefusesOversizedRegion: options whose shared region exceeds
// spec.MaxRegionSize fail before any memfd or device process is created.
func TestStartRefusesOversizedRegion(t *testing.T) {
	p, err := virtio.Start(context.Background(), virtio.Options{DataQueues: 16, QueueSize: 32768, MaxData: 1 << 20})
	if err == nil {
		p.Close(testwait.Context(t))
		t.Fatal("Start accepted a 512 GiB region")
	}
	if !errors.Is(err, spec.ErrRegionTooLarge) {
		t.Fatalf("Start: %v, want spec.ErrRegionTooLarge", err)
	}
}
