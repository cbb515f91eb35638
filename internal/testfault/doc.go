// Package testfault injects real storage faults for tests: a tmpfs of a
// given size that a test fills (ENOSPC) or remounts read-only (EROFS).
// It needs root; without it a test is skipped, or fails under CI=true
// (CI runs as root, so a missing capability is a broken CI, not a skip).
package testfault
