//go:build !linux

package crypto

import "runtime"

// osYield yields the processor to other goroutines (see yield_linux.go
// for the Linux version, which also yields the OS thread's CPU).
func osYield() { runtime.Gosched() }
