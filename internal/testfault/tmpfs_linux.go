package testfault

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory and
// returns it; it is unmounted at the test's cleanup.
func Tmpfs(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("keel-test", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs (needs root): %v", err)
		}
		t.Skipf("mount tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Fill writes a file in dir until the file system is full (ENOSPC); undo
// removes it.
func Fill(dir string) (undo func() error, err error) {
	p := filepath.Join(dir, "testfault-filler")
	f, err := os.Create(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return nil, err
			}
			return func() error { return os.Remove(p) }, f.Sync()
		}
	}
}

// ReadOnly remounts the file system mounted on dir (by Tmpfs) read-only;
// undo makes it writable again.
func ReadOnly(dir string) (undo func() error, err error) {
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return nil, err
	}
	return func() error { return unix.Mount("", dir, "", unix.MS_REMOUNT, "") }, nil
}

// Names returns the names of Faults, sorted.
func Names() []string { return slices.Sorted(maps.Keys(Faults)) }

// Faults are the storage faults, by name, for table-driven tests.
var Faults = map[string]func(dir string) (undo func() error, err error){
	"full":      Fill,
	"read-only": ReadOnly,
}
