//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package ipsec

import (
	"os"
	"syscall"
)

// flockExclusive takes an exclusive flock(2) on f, waiting for it.
func flockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return err
		}
	}
}

func flockUnlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
