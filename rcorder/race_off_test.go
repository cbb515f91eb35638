//go:build !race

package rcorder

const raceEnabled = false
