package ipsec

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the calling OS thread's CPU time: on a shared machine
// it excludes the time other processes hold the core. Callers lock the
// goroutine to its thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}
