// Package cputime reads the calling OS thread's CPU clock, for benchmarks
// that time two sides interleaved on a shared machine: unlike wall time,
// the thread's CPU time excludes the time other processes hold the core.
package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread returns the calling OS thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), or wall time if the clock is unavailable.
// Callers lock the goroutine to its thread (runtime.LockOSThread).
func Thread() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}
