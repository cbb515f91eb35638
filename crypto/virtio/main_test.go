//go:build linux

package virtio_test

import (
	"os"
	"testing"

	"github.com/keelinit/keel/crypto/virtio"
)

// TestMain lets the test binary double as the device process: Start
// re-executes it with KEEL_VIRTIO_DEVICE_CHILD=1.
func TestMain(m *testing.M) {
	virtio.RunDeviceIfRequested()
	os.Exit(m.Run())
}
