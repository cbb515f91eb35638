package spd

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// threadClock returns a clock of the CPU time consumed by the calling OS
// thread (CLOCK_THREAD_CPUTIME_ID), and a release func. On a shared,
// oversubscribed machine wall-clock ns/op mostly measures time spent
// descheduled; thread CPU time does not. The goroutine is locked to its
// thread until release is called.
func threadClock() (now func() time.Duration, release func()) {
	runtime.LockOSThread()
	return func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			panic(err)
		}
		return time.Duration(ts.Nano())
	}, runtime.UnlockOSThread
}
