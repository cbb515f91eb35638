//go:build race

package builtin

// raceEnabled: sync.Pool drops items on purpose under -race, so
// allocation counts are meaningless.
const raceEnabled = true
