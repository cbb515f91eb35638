//go:build linux

package virtio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/glxsb"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/crypto/virtio/spec"
	"github.com/keelinit/keel/modules"
)

func quietFW(t testing.TB, o crypto.Options) *crypto.Framework {
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	fw := crypto.New(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
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
	deadline := time.Now().Add(waitLimit)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("device process still running after unload")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type tracked struct {
	req  *crypto.Request
	pt   []byte
	seq  int
	done bool
}

// traffic drives per requests through each of the bindings, checking
// exactly-once and in-order completion and the output against the stdlib.
type traffic struct {
	t     *testing.T
	alg   crypto.Algorithm
	ckey  []byte
	akey  []byte
	mu    sync.Mutex
	fails []string
}

func (tr *traffic) fail(s string) {
	tr.mu.Lock()
	tr.fails = append(tr.fails, s)
	tr.mu.Unlock()
}

func (tr *traffic) bind(fw *crypto.Framework, per int) (*crypto.Binding, []*tracked, chan struct{}) {
	recs := make([]*tracked, per)
	next := 0
	var cmu sync.Mutex
	doneCh := make(chan struct{})
	b, err := fw.Bind(crypto.SessionParams{Alg: tr.alg, CipherKey: tr.ckey, AuthKey: tr.akey}, func(done []*crypto.Request) {
		cmu.Lock()
		defer cmu.Unlock()
		for _, r := range done {
			x := r.User.(*tracked)
			if x.done {
				tr.fail("completed twice")
			}
			x.done = true
			if x.seq != next {
				tr.fail("out of order")
			}
			next++
			if next == per {
				close(doneCh)
			}
		}
	})
	if err != nil {
		tr.t.Fatal(err)
	}
	for i := range recs {
		pt := randBytes(256)
		iv := make([]byte, tr.alg.IVLen())
		binary.BigEndian.PutUint64(iv, uint64(i+1))
		x := &tracked{pt: pt, seq: i}
		x.req = &crypto.Request{Dir: crypto.Encrypt, Data: append([]byte(nil), pt...), ICV: make([]byte, tr.alg.ICVLen()), IV: iv, AAD: []byte("spi+seq!"), User: x}
		recs[i] = x
	}
	return b, recs, doneCh
}

func (tr *traffic) run(b *crypto.Binding, recs []*tracked, doneCh chan struct{}, started func(), wantProvider string) {
	for i, x := range recs {
		if i == len(recs)/8 && started != nil {
			started()
		}
		deadline := time.Now().Add(waitLimit)
		for b.Submit([]*crypto.Request{x.req}) == 0 {
			if time.Now().After(deadline) {
				tr.fail("backpressure never released")
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	select {
	case <-doneCh:
	case <-time.After(waitLimit):
		tr.fail("not all requests completed")
		return
	}
	for _, x := range recs {
		r := x.req
		if r.Status != crypto.StatusOK {
			tr.fail("status " + r.Status.String())
			continue
		}
		ct, icv := reference(tr.alg, tr.ckey, tr.akey, r.AAD, r.IV, x.pt, nil)
		if !bytes.Equal(r.Data, ct) || !bytes.Equal(r.ICV, icv) {
			tr.fail("wrong output")
		}
	}
	for deadline := time.Now().Add(waitLimit); b.Provider() != wantProvider; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tr.fail("binding on " + b.Provider() + ", want " + wantProvider)
			break
		}
	}
	b.Close(context.Background())
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
	t.Cleanup(func() { g.Close(context.Background()) })
	if err := fw.Register(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	tr := &traffic{t: t, alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}, ckey: randBytes(16), akey: randBytes(20)}
	const nb, per = 3, 300
	var wg, started sync.WaitGroup
	started.Add(nb)
	for range nb {
		b, recs, doneCh := tr.bind(fw, per)
		if b.Provider() != "glxsb" {
			t.Fatalf("bound to %q", b.Provider())
		}
		wg.Add(1)
		go func() { defer wg.Done(); tr.run(b, recs, doneCh, started.Done, "virtio") }()
	}
	started.Wait()
	p := start(t, virtio.Options{})
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(tr.fails) > 0 {
		t.Fatalf("%d failures, first: %s", len(tr.fails), tr.fails[0])
	}
}

// TestFailoverOnDeviceDeath: the device is killed, stalled, or fails its
// operations under traffic; the driver fails the requests (Data
// untouched), the framework retries them on aesni, and nothing is lost,
// duplicated or reordered.
func TestFailoverOnDeviceDeath(t *testing.T) {
	if !aesni.Supported() {
		t.Skip("aesni not supported on this CPU")
	}
	for _, tc := range []struct {
		name   string
		inject func(p *virtio.Provider) error
		dies   bool
	}{
		{"kill", func(p *virtio.Provider) error { return p.Signal(syscall.SIGKILL) }, true},
		{"stall", func(p *virtio.Provider) error { return p.Signal(syscall.SIGSTOP) }, true},
		{"fail-ops", func(p *virtio.Provider) error { return p.InjectFault(spec.FaultFail) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := quietFW(t, crypto.Options{Hysteresis: 1e6, RequestTimeout: 5 * time.Second})
			var p *virtio.Provider
			ready := make(chan struct{})
			p = start(t, virtio.Options{KickTimeout: time.Second, OnFault: func(err error) {
				<-ready
				fw.ReportFault("virtio", err)
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				fw.Deregister(ctx, "virtio")
			}})
			close(ready)
			if err := fw.Register(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			tr := &traffic{t: t, alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, ckey: randBytes(20)}
			const nb, per = 4, 300
			type bound struct {
				b      *crypto.Binding
				recs   []*tracked
				doneCh chan struct{}
			}
			var bs []bound
			for range nb {
				b, recs, doneCh := tr.bind(fw, per)
				if b.Provider() != "virtio" {
					t.Fatalf("bound to %q", b.Provider())
				}
				bs = append(bs, bound{b, recs, doneCh})
			}
			if err := fw.Register(context.Background(), aesni.New()); err != nil {
				t.Fatal(err)
			}
			var wg, started sync.WaitGroup
			started.Add(nb)
			for _, x := range bs {
				wg.Add(1)
				go func() { defer wg.Done(); tr.run(x.b, x.recs, x.doneCh, started.Done, "aesni") }()
			}
			started.Wait()
			if err := tc.inject(p); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if len(tr.fails) > 0 {
				t.Fatalf("%d failures, first: %s", len(tr.fails), tr.fails[0])
			}
			if !tc.dies {
				return
			}
			// The fault handler deregisters the dead provider.
			for deadline := time.Now().Add(waitLimit); ; time.Sleep(time.Millisecond) {
				listed := ""
				for _, ps := range fw.Providers() {
					if ps.Name == "virtio" {
						listed = string(ps.State)
					}
				}
				if listed == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("dead virtio provider still listed: %v", listed)
				}
			}
		})
	}
}
