package hostile

import (
	"os"
	"testing"
)

// RequireRoot skips t unless it runs as root, or fails it under CI=true
// (where .ci/run runs as root); why says what root is needed for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "root ("+why+")")
	}
}

func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs %s", what)
	}
	t.Skipf("needs %s", what)
}
