//go:build linux

package virtio_test

import (
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/internal/testwait"
)

// TestZeroAllocsSteadyState: a request through the rings (Submit, device,
// interrupt, completion) allocates nothing in the driver process.
func TestZeroAllocsSteadyState(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	p := start(t, virtio.Options{})
	ch := make(chan struct{}, 1)
	s, err := p.NewSession(crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: make([]byte, 20)},
		func([]*crypto.Request) { ch <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(testwait.Context(t)) }()
	reqs := []*crypto.Request{{Data: make([]byte, 1420), ICV: make([]byte, 16), IV: make([]byte, 8), AAD: make([]byte, 8)}}
	if a := providertest.AllocsPerRoundTrip(s, reqs, ch, 300); a > 0.05 {
		t.Fatalf("%.2f allocations per request", a)
	}
}
