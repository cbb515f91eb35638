package glxsb_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/glxsb"
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/modules"
)

var alg = crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}

func quietFW(o crypto.Options) *crypto.Framework {
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return crypto.New(o)
}

func TestFrameworkAdmitsAndShowsModel(t *testing.T) {
	fw := quietFW(crypto.Options{})
	defer func() { fw.Close(testwait.Context(t)) }()
	p, err := glxsb.New(glxsb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Close(testwait.Context(t)) }()
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatalf("register: %v", err)
	}
	var found bool
	for _, ps := range fw.Providers() {
		if ps.Name != "glxsb" {
			continue
		}
		found = true
		if !ps.Emulated || ps.Kind != crypto.KindHardware || ps.State != crypto.StateOK || !ps.SelfTest.Passed {
			t.Fatalf("status %+v", ps)
		}
		if ps.Params["throughput_mbps"] != "45" || ps.Params["setup_latency_us"] != "20" {
			t.Fatalf("params %v", ps.Params)
		}
		if len(ps.Throughput) == 0 || ps.Throughput[0].BytesPerSec <= 0 {
			t.Fatalf("no calibration: %+v", ps.Throughput)
		}
		// The modelled device is far below 45 MB/s at 64 bytes and never
		// above it (plus the calibration's own noise).
		for _, tp := range ps.Throughput {
			if tp.BytesPerSec > 60e6 {
				t.Fatalf("calibrated %v B/s at %d: faster than the model", tp.BytesPerSec, tp.Size)
			}
		}
	}
	if !found {
		t.Fatal("glxsb not in Providers()")
	}
}

func TestModuleLoadUnload(t *testing.T) {
	fw := quietFW(crypto.Options{})
	defer func() { fw.Close(testwait.Context(t)) }()
	ctx := crypto.NewContext(context.Background(), fw)
	l := modules.NewLoader()
	if err := l.Load(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("load: %v", err)
	}
	if fw.Best(alg) != glxsb.ModuleName {
		t.Fatalf("best provider %q", fw.Best(alg))
	}
	if n := glxsbGoroutines(); n == 0 {
		t.Fatal("no driver or device goroutine while loaded")
	}
	if err := l.Unload(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("unload: %v", err)
	}
	for _, ps := range fw.Providers() {
		if ps.Name == glxsb.ModuleName {
			t.Fatalf("still listed after unload: %v", ps.State)
		}
	}
	// Unloading closed the provider: its driver goroutines and the
	// emulated device have stopped.
	if n := waitGlxsbGoroutinesGone(); n != 0 {
		t.Fatalf("%d glxsb goroutines still running after unload", n)
	}
	// It can be loaded again (hot-plug).
	if err := l.Load(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if err := l.Unload(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if n := waitGlxsbGoroutinesGone(); n != 0 {
		t.Fatalf("%d glxsb goroutines still running after the second unload", n)
	}
}

// waitGlxsbGoroutinesGone waits up to 5 s (a goroutine that has signalled
// its exit may not have returned yet) for glxsbGoroutines to reach zero
// and returns the last count.
func waitGlxsbGoroutinesGone() int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := glxsbGoroutines()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// glxsbGoroutines counts the goroutines running code of package glxsb
// (the driver's completer and watchdog, the emulated device).
func glxsbGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("keel/crypto/glxsb.")) {
			count++
		}
	}
	return count
}

// TestFrameworkFailover runs traffic on bindings served by glxsb, injects
// a device fault mid-traffic, and checks that every request completes
// exactly once, in order per binding, correctly, on aesni.
func TestFrameworkFailover(t *testing.T) {
	if !aesni.Supported() {
		t.Skip("aesni not supported on this CPU")
	}
	for _, f := range []glxsb.Fault{glxsb.FaultError, glxsb.FaultHang, glxsb.FaultVanish} {
		t.Run(f.String(), func(t *testing.T) {
			// A huge hysteresis keeps the bindings on glxsb when aesni
			// arrives, until glxsb faults.
			watch := providertest.NewRebindWatch()
			fw := quietFW(crypto.Options{Hysteresis: 1e6, RequestTimeout: 2 * time.Second, CloseTimeout: 2 * time.Second, OnRebind: watch.OnRebind})
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				fw.Close(ctx)
			}()
			p, err := glxsb.New(glxsb.Options{OpTimeout: 2 * time.Second, OnFault: func(err error) { fw.ReportFault("glxsb", err) }})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { p.Close(testwait.Context(t)) }()
			if err := fw.Register(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			// Hold: the fault must meet traffic however late it is injected.
			tr := &providertest.Traffic{Alg: alg, CipherKey: providertest.RandBytes(16), AuthKey: providertest.RandBytes(20), Hold: true, Watch: watch}
			streams := tr.BindN(t, fw, 4, 300, "glxsb")
			// aesni arrives after the bindings were made; the hysteresis
			// keeps them on glxsb. Then traffic starts.
			if err := fw.Register(context.Background(), aesni.New()); err != nil {
				t.Fatal(err)
			}
			fails := tr.RunAll(streams, "aesni", func() { p.InjectFault(f) })
			if p.Stats().Failed == 0 {
				t.Error("the fault hit no request: traffic ended before it")
			}
			if len(fails) > 0 {
				for _, ps := range fw.Providers() {
					t.Logf("%s: state %v faults %d last %q sessions %d", ps.Name, ps.State, ps.Faults, ps.LastFault, ps.Sessions)
				}
				t.Logf("glxsb stats %+v", p.Stats())
				t.Fatalf("%d failures, first: %s", len(fails), fails[0])
			}
		})
	}
}
