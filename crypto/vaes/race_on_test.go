//go:build race

package vaes

// raceEnabled: under the race detector the Go around both providers'
// assembly is instrumented, so their measured throughput says nothing
// about the product.
const raceEnabled = true
