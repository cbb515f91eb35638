//go:build !race

package ipsec

const raceEnabled = false
