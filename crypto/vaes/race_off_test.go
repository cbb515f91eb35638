//go:build !race

package vaes

const raceEnabled = false
