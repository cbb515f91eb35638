package keyedhash

import (
	crand "crypto/rand"
	"runtime"
	"testing"

	"github.com/keelinit/keel/internal/memscan"
)

// TestSumWipes: Sum leaves no copy of a message part behind in
// its pooled digest or on the stack, even when the part's tail is longer
// than what the outer hash overwrites (60 bytes: the last partial block
// of the inner hash keeps 28 bytes past the outer hash's 32).
func TestSumWipes(t *testing.T) {
	part := make([]byte, 60)
	if _, err := crand.Read(part); err != nil {
		t.Fatal(err)
	}
	masked := memscan.Mask(append([]byte(nil), part[40:]...), 0xa5)
	var key [32]byte
	sum := Sum(key[:], part)
	clear(part)
	runtime.GC()
	if n := memscan.Count(t, masked, 0xa5); n != 0 {
		t.Errorf("%d copies of the message's tail left in memory (sum %x)", n, sum[:4])
	}
}
