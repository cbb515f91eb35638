package services

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

// SeedVars are the values keeld seeds rc.conf with (see Seed).
type SeedVars struct {
	Self        string // keeld's executable
	RuntimeDir  string
	Root        string // the root's host directory, "" for the embedded appliance
	StateDir    string // "" for the builtins' default
	NonceRecord string // the nonce ledger's record, "" for the default
}

// Seed returns the variables keeld seeds rc.conf with (see
// etc/defaults/rc.conf): keel_self, keel_runtime_dir, keel_root,
// keel_state_dir, keel_nonce_record and keel_uid.
func Seed(v SeedVars) map[string]string {
	return map[string]string{
		"keel_self": v.Self, "keel_runtime_dir": v.RuntimeDir, "keel_root": v.Root,
		"keel_state_dir": v.StateDir, "keel_nonce_record": v.NonceRecord, "keel_uid": strconv.Itoa(os.Getuid()),
	}
}
