//go:build !race

package crypto_test

const raceEnabled = false
