//go:build !linux

// Package cputime reads the calling OS thread's CPU clock, for benchmarks
// that time two sides interleaved on a shared machine.
package cputime

import "time"

// Thread returns wall time: this platform has no per-thread CPU clock
// here.
func Thread() time.Duration { return time.Duration(time.Now().UnixNano()) }
