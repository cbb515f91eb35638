//go:build race

package dataplane

// raceEnabled: sync.Pool drops items at random under the race detector, so
// allocation counts are meaningless.
const raceEnabled = true
