//go:build linux

package virtio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/crypto/virtio/spec"
	"github.com/keelinit/keel/internal/testwait"
)

func start(t testing.TB, o virtio.Options) *virtio.Provider {
	t.Helper()
	p, err := virtio.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	providertest.CloseAtCleanup(t, p)
	return p
}

var testAlgs = []crypto.Algorithm{
	{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96},
	{Cipher: crypto.CipherAESCBC, KeyBits: 192, Auth: crypto.AuthHMACSHA384_192},
	{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA256_128},
	{Cipher: crypto.CipherNull, Auth: crypto.AuthHMACSHA512_256},
	{Cipher: crypto.CipherAESGCM, KeyBits: 128},
	{Cipher: crypto.CipherAESGCM, KeyBits: 256},
	{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256},
}

func TestRoundTripAgainstStdlib(t *testing.T) {
	p := start(t, virtio.Options{})
	for _, alg := range testAlgs {
		for _, size := range []int{16, 64, 1424} {
			t.Run(fmt.Sprintf("%v/%d", alg, size), func(t *testing.T) {
				ckey, akey := providertest.RandBytes(alg.CipherKeyLen()), providertest.RandBytes(alg.Auth.KeyLen())
				c := providertest.NewCollector()
				s, err := p.NewSession(crypto.SessionParams{Alg: alg, CipherKey: ckey, AuthKey: akey}, c.Done)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { s.Close(testwait.Context(t)) }()
				pt, iv, aad, tr := providertest.RandBytes(size), providertest.RandBytes(alg.IVLen()), providertest.RandBytes(8), []byte(nil)
				if !alg.IsAEAD() {
					tr = providertest.RandBytes(4)
				}
				wantCT, wantICV := providertest.Reference(alg, ckey, akey, aad, iv, pt, tr)
				r := &crypto.Request{Dir: crypto.Encrypt, Data: append([]byte(nil), pt...), ICV: make([]byte, alg.ICVLen()), AAD: aad, IV: iv, AuthTrailer: tr}
				providertest.SubmitAll(t, s, []*crypto.Request{r})
				c.Wait(t, 1)
				if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, wantCT) || !bytes.Equal(r.ICV, wantICV) {
					t.Fatalf("encrypt: status %v err %v; data ok %v icv ok %v", r.Status, r.Err, bytes.Equal(r.Data, wantCT), bytes.Equal(r.ICV, wantICV))
				}
				bad := append([]byte(nil), wantICV...)
				bad[len(bad)-1] ^= 0x80
				tam := &crypto.Request{Dir: crypto.Decrypt, Data: append([]byte(nil), wantCT...), ICV: bad, AAD: aad, IV: iv, AuthTrailer: tr}
				d := &crypto.Request{Dir: crypto.Decrypt, Data: append([]byte(nil), wantCT...), ICV: wantICV, AAD: aad, IV: iv, AuthTrailer: tr}
				providertest.SubmitAll(t, s, []*crypto.Request{tam, d})
				c.Wait(t, 3)
				if tam.Status != crypto.StatusAuthFailed || !bytes.Equal(tam.Data, wantCT) {
					t.Fatalf("tampered: status %v (%v), data changed %v", tam.Status, tam.Err, !bytes.Equal(tam.Data, wantCT))
				}
				if d.Status != crypto.StatusOK || !bytes.Equal(d.Data, pt) {
					t.Fatalf("decrypt: status %v err %v", d.Status, d.Err)
				}
				if c.Dups() != 0 || c.Order()[1] != tam || c.Order()[2] != d {
					t.Fatal("duplicate or out-of-order completion")
				}
			})
		}
	}
}

func TestInfoAndErrors(t *testing.T) {
	p := start(t, virtio.Options{DataQueues: 3})
	info := p.Info()
	if !info.Emulated || info.Kind != crypto.KindHardware || info.Name != "virtio" || info.Params["data_queues"] != "3" || info.Params["ctrl_mode"] != "async" {
		t.Fatalf("info %+v", info)
	}
	tests := []struct {
		name string
		sp   crypto.SessionParams
		want error
	}{
		{"short-key", crypto.SessionParams{Alg: testAlgs[0], CipherKey: make([]byte, 15), AuthKey: make([]byte, 20)}, crypto.ErrKeySize},
		{"cbc-no-auth", crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128}, CipherKey: make([]byte, 16)}, crypto.ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := p.NewSession(tc.sp, func([]*crypto.Request) {}); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	// Invalid requests complete with ErrInvalidRequest, in order, Data untouched.
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[0], CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	good := &crypto.Request{Data: make([]byte, 32), ICV: make([]byte, 12), IV: make([]byte, 16)}
	odd := &crypto.Request{Data: []byte("not a block"), ICV: make([]byte, 12), IV: make([]byte, 16)}
	shortIV := &crypto.Request{Data: make([]byte, 32), ICV: make([]byte, 12), IV: make([]byte, 8)}
	providertest.SubmitAll(t, s, []*crypto.Request{good, odd, shortIV})
	c.Wait(t, 3)
	if good.Status != crypto.StatusOK || odd.Status != crypto.StatusError || !errors.Is(odd.Err, crypto.ErrInvalidRequest) ||
		string(odd.Data) != "not a block" || !errors.Is(shortIV.Err, crypto.ErrInvalidRequest) {
		t.Fatalf("statuses %v %v(%v) %v", good.Status, odd.Status, odd.Err, shortIV.Status)
	}
	if c.Order()[0] != good || c.Order()[1] != odd || c.Order()[2] != shortIV {
		t.Fatal("out of order")
	}
	if err := s.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if s.Submit([]*crypto.Request{good}) != 0 {
		t.Fatal("Submit after Close accepted")
	}
}

// TestBatchingOneKickPerSubmit checks that a batch is published with at
// most one kick.
func TestBatchingOneKickPerSubmit(t *testing.T) {
	p := start(t, virtio.Options{DataQueues: 1})
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[4], CipherKey: make([]byte, 20)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(testwait.Context(t)) }()
	before := p.Stats()
	reqs := make([]*crypto.Request, 32)
	for i := range reqs {
		reqs[i] = &crypto.Request{Data: make([]byte, 64), ICV: make([]byte, 16), IV: make([]byte, 8)}
	}
	if n := s.Submit(reqs); n != len(reqs) {
		t.Fatalf("accepted %d", n)
	}
	c.Wait(t, len(reqs))
	st := p.Stats()
	if b, k := st.Batches-before.Batches, st.Kicks-before.Kicks; b != 1 || k > 1 || st.Published-before.Published != 32 {
		t.Fatalf("batches %d kicks %d published %d", b, k, st.Published-before.Published)
	}
}

// TestFaultsMidTraffic: the device fails operations, stalls, is killed or
// exits while sessions submit concurrently. Every request completes
// exactly once, in order per session; failed ones keep Data and ICV.
func TestFaultsMidTraffic(t *testing.T) {
	tests := []struct {
		name      string
		inject    func(p *virtio.Provider) error
		wantErr   error
		wantFault bool
	}{
		{"fail-ops", func(p *virtio.Provider) error { return p.InjectFault(spec.FaultFail) }, nil, false},
		{"stall-sigstop", func(p *virtio.Provider) error { return p.Signal(syscall.SIGSTOP) }, crypto.ErrTimeout, true},
		{"stall-ctl", func(p *virtio.Provider) error { return p.InjectFault(spec.FaultStall) }, crypto.ErrTimeout, true},
		{"kill", func(p *virtio.Provider) error { return p.Signal(syscall.SIGKILL) }, crypto.ErrDeviceGone, true},
		{"exit", func(p *virtio.Provider) error { return p.InjectFault(spec.FaultExit) }, crypto.ErrDeviceGone, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var faults atomic.Int32
			faulted := make(chan error, 1)
			kick := time.Second
			if !tc.wantFault {
				kick = providertest.WaitLimit // a preempted device must not look stalled
			}
			p := start(t, virtio.Options{QueueSize: 16, KickTimeout: kick,
				OnFault: func(err error) { faults.Add(1); faulted <- err }})
			l := providertest.StartFaultLoad(t, p, 4, 150, func(i int) crypto.Algorithm { return testAlgs[i%len(testAlgs)] })
			if err := tc.inject(p); err != nil {
				t.Fatal(err)
			}
			l.Wait()
			l.Check(t, tc.wantErr)
			if tc.wantFault {
				providertest.WaitFault(t, faulted, tc.wantErr)
				if p.Dead() == nil {
					t.Fatal("provider not dead")
				}
				if _, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[4], CipherKey: make([]byte, 20)}, func([]*crypto.Request) {}); !errors.Is(err, tc.wantErr) {
					t.Fatalf("NewSession on a dead device: %v", err)
				}
			} else if faults.Load() != 0 {
				t.Fatal("OnFault called for failed operations")
			}
		})
	}
}

func TestConcurrentSessionsAsyncAndDepth1(t *testing.T) {
	for _, mode := range []virtio.Mode{virtio.ModeAsync, virtio.ModeDepth1Poll} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			p := start(t, virtio.Options{Mode: mode})
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 50 {
						s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[0], CipherKey: providertest.RandBytes(16), AuthKey: providertest.RandBytes(20)}, func([]*crypto.Request) {})
						if err != nil {
							errs <- err
							return
						}
						if err := s.Close(testwait.Context(t)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			testwait.Wait(t, testwait.Long, "session open/close workers done", &wg)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			ds, err := p.DeviceStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if ds.CtrlRequests != 8*50*4 {
				t.Fatalf("device saw %d control requests, want %d", ds.CtrlRequests, 8*50*4)
			}
		})
	}
}
