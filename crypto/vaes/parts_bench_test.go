//go:build amd64

package vaes

import (
	"runtime"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/cputime"
)

func BenchmarkParts(b *testing.B) {
	g := mustGCM(b, make([]byte, 16))
	buf := make([]byte, 8192+16)
	var ctr, y [16]byte
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"ctr8k", func() { ctrBlocks(&g.rk[0], g.rounds, &ctr, &buf[0], &buf[0], 512) }},
		{"ghash8k", func() { ghashBlocks(&g.pow, &y, &buf[0], 512) }},
		{"seal8k", func() { g.Seal(buf[:0], ctr[:12], buf[:8192], nil) }},
	} {
		var ts []time.Duration
		for range 200 {
			t0 := cputime.Thread()
			c.f()
			ts = append(ts, cputime.Thread()-t0)
		}
		ghz := clockGHz()
		b.Logf("%s: %.3f cyc/B", c.name, float64(median(ts).Nanoseconds())*ghz/8192)
	}
}
