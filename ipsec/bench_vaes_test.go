package ipsec

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/vaes"
)

// BenchmarkRatioVaes is BenchmarkRatio's aes-128-gcm/encap with both
// engines on a framework where vaes is admitted (and so bound): ESP
// encapsulation through the engine on vaes ÷ the raw stdlib AES-128-GCM
// Seal, interleaved (interleaveCPU). Above 1 the engine outruns the
// primitive it used to run on. It skips on a CPU without vaes's
// instructions (hardware, also under CI=true).
func BenchmarkRatioVaes(b *testing.B) {
	p, err := vaes.New()
	if err != nil {
		b.Skipf("vaes: %v (hardware)", err)
	}
	fw := crypto.New(crypto.Options{CalibrationBudget: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.Cleanup(func() { fw.Close(context.Background()) })
	if err := fw.Register(context.Background(), p); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bp := newBenchPairOn(b, fw, 0)
	for _, st := range bp.ea.SAs() {
		if st.Provider != vaes.Name {
			b.Fatalf("SA bound to %q, want vaes", st.Provider)
		}
	}
	fillSeal, seal, _, _, size := rawOps(b, "aes-128-gcm")
	ps, raw := benchBuffers(b, bp, size)
	rawBatch := rawBatchOf(raw, fillSeal, seal)
	espBatch := func() {
		for _, p := range ps {
			p.SetData(bp.plain)
		}
		bp.ea.Outbound(ps)
	}
	ratioLoop(b, rawBatch, espBatch)
	if ps[0].Verdict != VerdictForward {
		b.Fatal(ps[0].Drop)
	}
}
