package testfault

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// HeldOutput returns a one-line shell command that starts "setsid sleep
// d" in the background: a descendant in a session of its own, out of the
// shell's process group, that keeps the shell's stdout and stderr (and
// every other inherited descriptor) open after the shell is gone. It
// appends that descendant's pid to pidFile; each one is SIGKILLed when the
// test ends. pidFile exists once a descendant has started.
func HeldOutput(t testing.TB, d string) (sh, pidFile string) {
	t.Helper()
	pidFile = filepath.Join(t.TempDir(), "held-output.pids")
	t.Cleanup(func() {
		b, _ := os.ReadFile(pidFile)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return fmt.Sprintf("setsid sleep %s & echo $! >> %s", d, pidFile), pidFile
}
