//go:build amd64

package vaes

import (
	"encoding/hex"
	"testing"
)

// requireCPU skips t on a CPU without the instructions. This skip stands
// under CI=true too: it is a fact about the hardware, not a missing tool,
// and the package's own probe then registers nothing.
func requireCPU(t testing.TB) {
	t.Helper()
	if !Supported() {
		t.Skip("vaes: this CPU lacks AVX2, AES-NI, PCLMULQDQ, VAES or VPCLMULQDQ (hardware; the provider does not register here)")
	}
}

// mustGCM returns newGCM(key) as the concrete type.
func mustGCM(t testing.TB, key []byte) *gcm {
	t.Helper()
	a, err := newGCM(key)
	if err != nil {
		t.Fatal(err)
	}
	return a.(*gcm)
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}
