//go:build race

package crypto_test

// raceEnabled: the race detector allocates on its own, so allocation
// counts are checked only without it.
const raceEnabled = true
