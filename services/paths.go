package services

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultRuntimeDir is where keeld puts its sockets and pidfiles when not
// told otherwise, and where keelctl looks for the control socket:
// /run/keel for root, else $XDG_RUNTIME_DIR/keel when that directory
// exists, else $TMPDIR/keel-<uid>.
func DefaultRuntimeDir() string {
	if os.Geteuid() == 0 {
		return "/run/keel"
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		if fi, err := os.Stat(x); err == nil && fi.IsDir() {
			return filepath.Join(x, "keel")
		}
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("keel-%d", os.Getuid()))
}

// SocketName is the control socket's file name inside the runtime dir.
const SocketName = "keeld.sock"

// DefaultSocket is DefaultRuntimeDir()/keeld.sock; KEEL_SOCKET overrides
// it for both keeld and keelctl.
func DefaultSocket() string {
	if s := os.Getenv("KEEL_SOCKET"); s != "" {
		return s
	}
	return filepath.Join(DefaultRuntimeDir(), SocketName)
}
