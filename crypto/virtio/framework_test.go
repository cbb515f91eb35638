//go:build linux

package virtio_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/glxsb"
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/crypto/virtio/spec"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/modules"
)

func quietFW(t testing.TB, o crypto.Options) *crypto.Framework {
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	fw := crypto.New(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), providertest.WaitLimit)
		defer cancel()
		fw.Close(ctx)
	})
	return fw
}

func TestFrameworkAdmitsAndShowsModel(t *testing.T) {
	fw := quietFW(t, crypto.Options{})
	p := start(t, virtio.Options{})
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatalf("register: %v", err)
	}
	for _, ps := range fw.Providers() {
		if ps.Name != "virtio" {
			continue
		}
		if !ps.Emulated || ps.State != crypto.StateOK || !ps.SelfTest.Passed || ps.Params["ctrl_mode"] != "async" || ps.Params["device_pid"] == "" {
			t.Fatalf("status %+v", ps)
		}
		if len(ps.Throughput) != len(p.Capabilities())*len(crypto.CalibrationSizes) {
			t.Fatalf("calibration: %d points", len(ps.Throughput))
		}
		return
	}
	t.Fatal("virtio not in Providers()")
}

func TestModuleLoadUnload(t *testing.T) {
	fw := quietFW(t, crypto.Options{})
	ctx := crypto.NewContext(context.Background(), fw)
	l := modules.NewLoader()
	if err := l.Load(ctx, virtio.ModuleName); err != nil {
		t.Fatalf("load: %v", err)
	}
	alg := crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	if fw.Best(alg) != virtio.ModuleName {
		t.Fatalf("best %q", fw.Best(alg))
	}
	pid := virtio.ModuleProvider().Pid()
	if err := l.Unload(ctx, virtio.ModuleName); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if fw.Best(alg) != "" {
		t.Fatalf("still selectable after unload: %q", fw.Best(alg))
	}
	// The device process is gone.
	deadline := time.Now().Add(providertest.WaitLimit)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("device process still running after unload")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHotPlugRebind: bindings on a slow provider (glxsb modelled at
// 5 MB/s) move to virtio when its device is started and registered at
// run time, under traffic, without loss.
func TestHotPlugRebind(t *testing.T) {
	fw := quietFW(t, crypto.Options{})
	g, err := glxsb.New(glxsb.Options{ThroughputMBps: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(testwait.Context(t)) })
	if err := fw.Register(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	tr := &providertest.Traffic{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}, CipherKey: providertest.RandBytes(16), AuthKey: providertest.RandBytes(20)}
	streams := tr.BindN(t, fw, 3, 300, "glxsb")
	fails := tr.RunAll(streams, "virtio", func() {
		p := start(t, virtio.Options{})
		if err := fw.Register(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	})
	if len(fails) > 0 {
		t.Fatalf("%d failures, first: %s", len(fails), fails[0])
	}
}

// stall stops the device process and returns once it is stopped (the
// event, from waitid(2), not a guess at how long signal delivery takes):
// every request submitted afterwards meets a stalled device.
func stall(p *virtio.Provider) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stopped := make(chan error, 1)
	go func() {
		var info unix.Siginfo
		// WNOWAIT leaves the state for exec.Cmd.Wait, which reaps only exits.
		stopped <- unix.Waitid(unix.P_PID, p.Pid(), &info, unix.WSTOPPED|unix.WNOWAIT, nil)
	}()
	select {
	case err := <-stopped:
		return err
	case <-time.After(providertest.WaitLimit):
		return errors.New("device process not stopped by SIGSTOP")
	}
}

// TestFailoverOnDeviceDeath: the device is killed, stalled, or fails its
// operations under traffic; the driver fails the requests (Data
// untouched), the framework retries them on aesni, and nothing is lost,
// duplicated or reordered. The streams hold after their first eighth
// until the fault is in place, so the fault always meets traffic; the
// "late" cases inject it only after a delay (a test goroutine descheduled
// on a loaded machine), which without the hold let every stream finish on
// the healthy device and stay there ("binding on virtio, want aesni").
func TestFailoverOnDeviceDeath(t *testing.T) {
	if !aesni.Supported() {
		t.Skip("aesni not supported on this CPU")
	}
	late := func(inject func(p *virtio.Provider) error) func(p *virtio.Provider) error {
		return func(p *virtio.Provider) error {
			time.Sleep(300 * time.Millisecond) // simulated scheduling delay, not a wait
			return inject(p)
		}
	}
	kill := func(p *virtio.Provider) error { return p.Signal(syscall.SIGKILL) }
	for _, tc := range []struct {
		name   string
		inject func(p *virtio.Provider) error
		dies   bool
	}{
		{"kill", kill, true},
		{"stall", stall, true},
		{"fail-ops", func(p *virtio.Provider) error { return p.InjectFault(spec.FaultFail) }, false},
		{"kill-late", late(kill), true},
		{"stall-late", late(stall), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watch := providertest.NewRebindWatch()
			fw := quietFW(t, crypto.Options{Hysteresis: 1e6, RequestTimeout: 5 * time.Second, OnRebind: watch.OnRebind})
			var p *virtio.Provider
			ready := make(chan struct{})
			removed := make(chan struct{})
			p = start(t, virtio.Options{KickTimeout: time.Second, OnFault: func(err error) {
				<-ready
				fw.ReportFault("virtio", err)
				ctx, cancel := context.WithTimeout(context.Background(), providertest.WaitLimit)
				defer cancel()
				fw.Deregister(ctx, "virtio")
				close(removed)
			}})
			close(ready)
			if err := fw.Register(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			tr := &providertest.Traffic{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: providertest.RandBytes(20), Hold: true, Watch: watch}
			streams := tr.BindN(t, fw, 4, 300, "virtio")
			if err := fw.Register(context.Background(), aesni.New()); err != nil {
				t.Fatal(err)
			}
			fails := tr.RunAll(streams, "aesni", func() {
				if err := tc.inject(p); err != nil {
					t.Fatal(err)
				}
			})
			if len(fails) > 0 {
				t.Fatalf("%d failures, first: %s", len(fails), fails[0])
			}
			if !tc.dies {
				return
			}
			// The fault handler deregisters the dead provider.
			testwait.Recv(t, providertest.WaitLimit, "the fault handler deregisters the dead provider", removed)
			for _, ps := range fw.Providers() {
				if ps.Name == "virtio" {
					t.Fatalf("dead virtio provider still listed: %v", ps.State)
				}
			}
		})
	}
}
