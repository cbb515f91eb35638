package builtin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// StateDir returns keeld's state directory, where the ESP nonce ledger
// lives: stateDir (keel_state_dir, from --state-dir or KEEL_STATE_DIR),
// which must be absolute, if set; else var/db/keel under root when keeld
// runs on a root directory other than /; else /var/db/keel as root; else
// $XDG_STATE_HOME (default ~/.local/state)/keel. keeld locks this
// directory at start, so two instances never share it.
func StateDir(stateDir, root string) (string, error) {
	if d := strings.TrimSpace(stateDir); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("keel_state_dir: %q is not an absolute path", d)
		}
		return filepath.Clean(d), nil
	}
	if root != "" && filepath.Clean(root) != "/" {
		return filepath.Join(root, "var", "db", "keel"), nil
	}
	if os.Geteuid() == 0 {
		return "/var/db/keel", nil
	}
	dir := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no state directory, set --state-dir: %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "keel"), nil
}
