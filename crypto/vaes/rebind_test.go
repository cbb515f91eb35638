//go:build amd64

package vaes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	_ "github.com/keelinit/keel/crypto/aesni" // the aesni module, registered at init
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/modules"
)

// TestKldloadRebind is `kldload vaes` under load: AES-GCM-128 traffic
// runs on bindings served by aesni (loaded as a module), the vaes module
// is loaded mid-traffic, and the framework's measurement must move every
// binding to vaes while each request completes exactly once, in order,
// with the stdlib's output (providertest.Traffic). Then traffic on new
// bindings, which start on vaes, runs while `kldunload vaes` moves them
// back to aesni, again with every request checked.
func TestKldloadRebind(t *testing.T) {
	requireCPU(t)
	if raceEnabled {
		t.Skip("the rebind is decided by measured throughput, which the race detector's instrumentation distorts")
	}
	// A calibration budget ten times the default: on a shared machine the
	// best of more rounds is needed for a stable selection.
	fw := crypto.New(crypto.Options{CalibrationBudget: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer fw.Close(context.Background())
	ctx := crypto.NewContext(context.Background(), fw)
	l := modules.NewLoader()
	if err := l.Load(ctx, "aesni"); err != nil {
		t.Fatalf("kldload aesni: %v", err)
	}
	key := providertest.RandBytes(algGCM128.CipherKeyLen())
	// The framework compares vaes's calibration with aesni's, measured
	// earlier: on a loaded machine vaes can lose one such comparison
	// (wall time). Then the bindings rightly stay on aesni; the load is
	// undone and retried, at most three times.
	var tr *providertest.Traffic
	for attempt := 1; ; attempt++ {
		tr = &providertest.Traffic{Alg: algGCM128, CipherKey: key}
		streams := tr.BindN(t, fw, 8, 3000, "aesni")
		fails := tr.RunAll(streams, Name, func() {
			if err := l.Load(ctx, Name); err != nil {
				t.Errorf("kldload vaes: %v", err)
			}
		})
		// A binding moves only when vaes measured at least the
		// hysteresis margin (10%) faster than aesni, so Best can be vaes
		// while the bindings rightly stay: either way a measurement
		// that did not show the margin is retried, not failed.
		best := fw.Best(algGCM128)
		stayed := false
		for _, f := range fails {
			if strings.Contains(f, `want "vaes"`) && attempt < 3 {
				stayed = true
				continue
			}
			t.Error(f)
		}
		if !stayed || t.Failed() {
			break
		}
		t.Logf("attempt %d: calibration did not measure vaes 10%% faster than aesni (best %s; %s); kldunload and retry", attempt, best, gcmThroughput(fw))
		if err := l.Unload(ctx, Name); err != nil {
			t.Fatalf("kldunload vaes: %v", err)
		}
	}
	tr = &providertest.Traffic{Alg: algGCM128, CipherKey: key}
	streams := tr.BindN(t, fw, 8, 3000, Name)
	fails := tr.RunAll(streams, "aesni", func() {
		if err := l.Unload(ctx, Name); err != nil {
			t.Errorf("kldunload vaes: %v", err)
		}
	})
	for _, f := range fails {
		t.Error(f)
	}
	if got := fw.Best(algGCM128); got != "aesni" {
		t.Fatalf("best provider %q after kldunload vaes, want aesni", got)
	}
}

// gcmThroughput lists each provider's calibrated AES-GCM-128 figures.
func gcmThroughput(fw *crypto.Framework) string {
	var b strings.Builder
	for _, p := range fw.Providers() {
		for _, tp := range p.Throughput {
			if tp.Alg == algGCM128 {
				fmt.Fprintf(&b, "%s %+v; ", p.Name, tp)
			}
		}
	}
	return b.String()
}
