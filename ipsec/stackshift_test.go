package ipsec

import (
	"testing"
	"unsafe"
)

// The ratio benchmarks run both sides of each timed interval at a stack
// depth that changes from interval to interval (stackShift), and so
// report an average over stack positions rather than one position's
// figure.
//
// Why: the stdlib's AES-GCM assembly (gcm_amd64.s) keeps 16-byte
// temporaries on its stack frame, and its speed depends on where that
// frame falls relative to cache lines and pages (bench/results/esp.md,
// third, fourth and fifth passes, and session 3): the same engine code
// measured 0.85 to 0.93 for encap as frame sizes elsewhere on the call
// chain changed, and in session 3 one unrelated frame-size change moved
// BenchmarkRatio's encap figure from 0.903 to 0.877 with the same work
// done. A figure at one stack position therefore measures the build's
// layout as much as the engine. Averaged over every 8-byte position in a
// 4 KiB page (the period of both cache-line and page effects), for both
// sides alike, the figure no longer depends on the layout.

// stackPositions is the number of stack positions the ratio benchmarks
// cycle through: every 8-byte offset within a 4 KiB page.
const stackPositions = 4096 / 8

// stackStride steps through the positions in an order that spreads
// consecutive intervals (odd, so coprime with stackPositions: every
// position is visited once per stackPositions intervals).
const stackStride = 97

// stackShift calls f with the stack k levels of shiftFrame deeper, k in
// [0, stackPositions). shiftFrame's frame is an odd multiple of 8 bytes
// (56 on amd64 with Go 1.26), so k·frame mod 4096 takes every multiple of
// 8 once as k runs over [0, 512): TestStackShiftCoversPage checks it.
//
//go:noinline
func stackShift(k int, f func()) {
	if k > 0 {
		shiftFrame(k-1, f)
		return
	}
	f()
}

//go:noinline
func shiftFrame(k int, f func()) {
	var pad [3]uint64 // sizes the frame; see TestStackShiftCoversPage
	if k > 0 {
		shiftFrame(k-1, f)
	} else {
		f()
	}
	stackSink += pad[k%3]
}

var stackSink uint64

// TestStackShiftCoversPage: the stack positions stackShift produces, as
// seen by a local of f, take every 8-byte offset within a 4 KiB page once.
func TestStackShiftCoversPage(t *testing.T) {
	if raceEnabled {
		t.Skip("frame sizes differ under -race; the ratio benchmarks are not run with it")
	}
	// Grow the stack first: a stack copied to a larger one may have its
	// top at another offset within a page.
	stackShift(stackPositions-1, func() {})
	seen := map[uintptr]int{}
	for k := range stackPositions {
		var at uintptr
		stackShift(k, func() {
			var x uint64
			at = uintptr(unsafe.Pointer(&x)) % 4096
			stackSink += x
		})
		if at%8 != 0 {
			t.Fatalf("position %d: local at %d mod 4096, not 8-byte aligned", k, at)
		}
		if j, dup := seen[at]; dup {
			t.Fatalf("positions %d and %d both put the local at %d mod 4096", j, k, at)
		}
		seen[at] = k
	}
}
