//go:build !linux

package spd

import "time"

// threadClock falls back to the monotonic wall clock.
func threadClock() (now func() time.Duration, release func()) {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }, func() {}
}
