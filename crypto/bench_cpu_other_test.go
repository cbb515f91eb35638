//go:build !linux

package crypto_test

import "time"

// processCPU is not measured on this platform (see the Linux version).
func processCPU() time.Duration { return 0 }
