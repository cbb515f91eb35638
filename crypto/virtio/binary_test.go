//go:build linux

package virtio_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/internal/testwait"
)

// TestDeviceBinary builds cmd/keel-virtio-device and runs the provider
// with it, found through $KEEL_VIRTIO_DEVICE (the way an installation
// without the re-exec fallback finds it).
func TestDeviceBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	bin := filepath.Join(t.TempDir(), virtio.DeviceBinary)
	out, err := exec.Command(gotool, "build", "-o", bin, "github.com/keelinit/keel/cmd/keel-virtio-device").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv(virtio.DeviceEnv, bin)
	p, err := virtio.Start(context.Background(), virtio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Close(testwait.Context(t)) }()
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[6], CipherKey: providertest.RandBytes(36)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	r := &crypto.Request{Data: []byte("hello"), ICV: make([]byte, 16), IV: make([]byte, 8)}
	providertest.SubmitAll(t, s, []*crypto.Request{r})
	c.Wait(t, 1)
	if r.Status != crypto.StatusOK || string(r.Data) == "hello" {
		t.Fatalf("status %v err %v", r.Status, r.Err)
	}
	s.Close(testwait.Context(t))
}
