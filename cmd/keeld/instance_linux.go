package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/services/builtin"
)

// The files whose flock(2) marks a directory as in use by one keeld.
// They differ so that one directory can serve as both.
const (
	runtimeLockName = "keeld.lock"
	stateLockName   = "state.lock"
)

// dirLock is an exclusive flock on a directory's lock file, held for
// the life of the process. The kernel drops it when the process exits,
// however it exits (kill -9 included), so a stale lock never blocks a
// later keeld and nothing has to be cleaned up.
type dirLock struct {
	f *os.File
}

// lockDir takes the exclusive, non-blocking instance lock of dir (which
// must exist), the file name in it, and records the holder's PID in it. what names the
// directory in errors ("runtime dir", "state dir"). If another process
// holds the lock, lockDir fails with an error naming that process, and
// it has created, removed and changed nothing: the lock file is opened
// without O_TRUNC and written only once the lock is held. The lock file
// itself is never removed, not even by its holder: removing a lock file
// while another process waits on it is the classic way to get two
// holders.
func lockDir(dir, name, what string) (*dirLock, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	writable := err == nil
	if err != nil {
		// Read-only media: an existing lock file still locks (flock
		// needs no write access); the PID is just not recorded.
		var rerr error
		if f, rerr = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0); rerr != nil {
			return nil, fmt.Errorf("%s %s: %w", what, dir, err)
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &busyError{what: what, dir: dir, lock: path, holder: holder}
		}
		return nil, fmt.Errorf("%s %s: lock %s: %w", what, dir, path, err)
	}
	if writable {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
	}
	return &dirLock{f: f}, nil
}

// busyError is lockDir's error when another process holds the lock.
type busyError struct {
	what, dir, lock, holder string
}

func (e *busyError) Error() string {
	return fmt.Sprintf("%s %s: in use by another keeld%s (lock %s); refusing to start", e.what, e.dir, e.holder, e.lock)
}

// readHolder returns " (pid N)" from a lock file's contents, or "" when
// they are not a PID.
func readHolder(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	s := strings.TrimSpace(string(buf[:n]))
	if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
		return fmt.Sprintf(" (pid %d)", pid)
	}
	return ""
}

// Close releases the lock (a nil lock is allowed). The file stays.
func (l *dirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// lockStateDir locks keeld's state directory (builtin.StateDir of
// stateDir and rootDir), creating it 0700 if needed, so that two keelds
// never share a nonce ledger. A state directory that cannot be created
// or opened (read-only media, no permission) is only warned about: the
// ledger then refuses AEAD SAs itself, so no nonce can be reused, and
// the rest of the appliance still boots. Another keeld holding it is an
// error.
func lockStateDir(stateDir, rootDir string, log *slog.Logger) (*dirLock, error) {
	dir, err := builtin.StateDir(stateDir, rootDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn(fmt.Sprintf("state dir %s: %v; not locked", dir, err))
		return nil, nil
	}
	l, err := lockDir(dir, stateLockName, "state dir")
	var busy *busyError
	switch {
	case errors.As(err, &busy):
		return nil, err
	case err != nil:
		log.Warn(err.Error() + "; not locked")
		return nil, nil
	}
	return l, nil
}
