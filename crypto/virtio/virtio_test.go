//go:build linux

package virtio_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/crypto/virtio/spec"
)

const waitLimit = 30 * time.Second

func start(t testing.TB, o virtio.Options) *virtio.Provider {
	t.Helper()
	p, err := virtio.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

type collector struct {
	mu    sync.Mutex
	seen  map[*crypto.Request]int
	order []*crypto.Request
	dup   int
}

func newCollector() *collector { return &collector{seen: map[*crypto.Request]int{}} }

func (c *collector) done(reqs []*crypto.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reqs {
		c.seen[r]++
		if c.seen[r] > 1 {
			c.dup++
		}
		c.order = append(c.order, r)
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order)
}

func (c *collector) wait(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for c.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests completed", c.count(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func submitAll(t testing.TB, s crypto.Session, reqs []*crypto.Request) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for len(reqs) > 0 {
		n := s.Submit(reqs)
		reqs = reqs[n:]
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatal("backpressure never released")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func hashOf(a crypto.Auth) func() hash.Hash {
	switch a {
	case crypto.AuthHMACSHA1_96:
		return sha1.New
	case crypto.AuthHMACSHA256_128:
		return sha256.New
	case crypto.AuthHMACSHA384_192:
		return sha512.New384
	}
	return sha512.New
}

// reference computes ESP output with the standard library.
func reference(alg crypto.Algorithm, ckey, akey, aad, iv, pt, tr []byte) (ct, icv []byte) {
	switch alg.Cipher {
	case crypto.CipherAESGCM, crypto.CipherChaCha20Poly1305:
		k := ckey[:len(ckey)-4]
		var a cipher.AEAD
		if alg.Cipher == crypto.CipherAESGCM {
			b, _ := aes.NewCipher(k)
			a, _ = cipher.NewGCM(b)
		} else {
			a, _ = chacha20poly1305.New(k)
		}
		nonce := append(append([]byte(nil), ckey[len(ckey)-4:]...), iv...)
		out := a.Seal(nil, nonce, pt, aad)
		return out[:len(pt)], out[len(pt):]
	}
	ct = append([]byte(nil), pt...)
	if alg.Cipher == crypto.CipherAESCBC {
		b, _ := aes.NewCipher(ckey)
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, pt)
	}
	m := hmac.New(hashOf(alg.Auth), akey)
	m.Write(aad)
	m.Write(iv)
	m.Write(ct)
	m.Write(tr)
	return ct, m.Sum(nil)[:alg.ICVLen()]
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
				ckey, akey := randBytes(alg.CipherKeyLen()), randBytes(alg.Auth.KeyLen())
				c := newCollector()
				s, err := p.NewSession(crypto.SessionParams{Alg: alg, CipherKey: ckey, AuthKey: akey}, c.done)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close(context.Background())
				pt, iv, aad, tr := randBytes(size), randBytes(alg.IVLen()), randBytes(8), []byte(nil)
				if !alg.IsAEAD() {
					tr = randBytes(4)
				}
				wantCT, wantICV := reference(alg, ckey, akey, aad, iv, pt, tr)
				r := &crypto.Request{Dir: crypto.Encrypt, Data: append([]byte(nil), pt...), ICV: make([]byte, alg.ICVLen()), AAD: aad, IV: iv, AuthTrailer: tr}
				submitAll(t, s, []*crypto.Request{r})
				c.wait(t, 1)
				if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, wantCT) || !bytes.Equal(r.ICV, wantICV) {
					t.Fatalf("encrypt: status %v err %v; data ok %v icv ok %v", r.Status, r.Err, bytes.Equal(r.Data, wantCT), bytes.Equal(r.ICV, wantICV))
				}
				bad := append([]byte(nil), wantICV...)
				bad[len(bad)-1] ^= 0x80
				tam := &crypto.Request{Dir: crypto.Decrypt, Data: append([]byte(nil), wantCT...), ICV: bad, AAD: aad, IV: iv, AuthTrailer: tr}
				d := &crypto.Request{Dir: crypto.Decrypt, Data: append([]byte(nil), wantCT...), ICV: wantICV, AAD: aad, IV: iv, AuthTrailer: tr}
				submitAll(t, s, []*crypto.Request{tam, d})
				c.wait(t, 3)
				if tam.Status != crypto.StatusAuthFailed || !bytes.Equal(tam.Data, wantCT) {
					t.Fatalf("tampered: status %v (%v), data changed %v", tam.Status, tam.Err, !bytes.Equal(tam.Data, wantCT))
				}
				if d.Status != crypto.StatusOK || !bytes.Equal(d.Data, pt) {
					t.Fatalf("decrypt: status %v err %v", d.Status, d.Err)
				}
				if c.dup != 0 || c.order[1] != tam || c.order[2] != d {
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
	c := newCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[0], CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.done)
	if err != nil {
		t.Fatal(err)
	}
	good := &crypto.Request{Data: make([]byte, 32), ICV: make([]byte, 12), IV: make([]byte, 16)}
	odd := &crypto.Request{Data: []byte("not a block"), ICV: make([]byte, 12), IV: make([]byte, 16)}
	shortIV := &crypto.Request{Data: make([]byte, 32), ICV: make([]byte, 12), IV: make([]byte, 8)}
	submitAll(t, s, []*crypto.Request{good, odd, shortIV})
	c.wait(t, 3)
	if good.Status != crypto.StatusOK || odd.Status != crypto.StatusError || !errors.Is(odd.Err, crypto.ErrInvalidRequest) ||
		string(odd.Data) != "not a block" || !errors.Is(shortIV.Err, crypto.ErrInvalidRequest) {
		t.Fatalf("statuses %v %v(%v) %v", good.Status, odd.Status, odd.Err, shortIV.Status)
	}
	if c.order[0] != good || c.order[1] != odd || c.order[2] != shortIV {
		t.Fatal("out of order")
	}
	if err := s.Close(context.Background()); err != nil {
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
	c := newCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[4], CipherKey: make([]byte, 20)}, c.done)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	before := p.Stats()
	reqs := make([]*crypto.Request, 32)
	for i := range reqs {
		reqs[i] = &crypto.Request{Data: make([]byte, 64), ICV: make([]byte, 16), IV: make([]byte, 8)}
	}
	if n := s.Submit(reqs); n != len(reqs) {
		t.Fatalf("accepted %d", n)
	}
	c.wait(t, len(reqs))
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
				kick = waitLimit // a preempted device must not look stalled
			}
			p := start(t, virtio.Options{QueueSize: 16, KickTimeout: kick,
				OnFault: func(err error) { faults.Add(1); faulted <- err }})
			const sessions, per = 4, 150
			type rec struct {
				req       *crypto.Request
				data, icv []byte
			}
			cols := make([]*collector, sessions)
			recs := make([][]rec, sessions)
			var wg, started sync.WaitGroup
			started.Add(sessions)
			for i := range sessions {
				cols[i] = newCollector()
				s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[i%len(testAlgs)], CipherKey: randBytes(testAlgs[i%len(testAlgs)].CipherKeyLen()), AuthKey: randBytes(testAlgs[i%len(testAlgs)].Auth.KeyLen())}, cols[i].done)
				if err != nil {
					t.Fatal(err)
				}
				alg := testAlgs[i%len(testAlgs)]
				for range per {
					r := &crypto.Request{Data: randBytes(256), ICV: randBytes(alg.ICVLen()), IV: randBytes(alg.IVLen()), AAD: randBytes(8)}
					recs[i] = append(recs[i], rec{r, append([]byte(nil), r.Data...), append([]byte(nil), r.ICV...)})
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j, rc := range recs[i] {
						if j == per/4 {
							started.Done()
						}
						for s.Submit([]*crypto.Request{rc.req}) == 0 {
							time.Sleep(50 * time.Microsecond)
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
					defer cancel()
					s.Close(ctx)
				}()
			}
			started.Wait()
			if err := tc.inject(p); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			var failed int
			for i := range sessions {
				c := cols[i]
				c.mu.Lock()
				if len(c.order) != per || c.dup != 0 {
					t.Fatalf("session %d: %d completions, %d duplicates", i, len(c.order), c.dup)
				}
				for j, rc := range recs[i] {
					if c.order[j] != rc.req {
						t.Fatalf("session %d: completion %d out of order", i, j)
					}
					switch rc.req.Status {
					case crypto.StatusOK:
					case crypto.StatusError:
						failed++
						if tc.wantErr != nil && !errors.Is(rc.req.Err, tc.wantErr) {
							t.Fatalf("err %v, want %v", rc.req.Err, tc.wantErr)
						}
						if !bytes.Equal(rc.req.Data, rc.data) || !bytes.Equal(rc.req.ICV, rc.icv) {
							t.Fatal("failed request's Data/ICV modified")
						}
					default:
						t.Fatalf("status %v (%v)", rc.req.Status, rc.req.Err)
					}
				}
				c.mu.Unlock()
			}
			if failed == 0 {
				t.Fatal("no request failed after the fault")
			}
			if tc.wantFault {
				select {
				case err := <-faulted:
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("fault %v, want %v", err, tc.wantErr)
					}
				case <-time.After(waitLimit):
					t.Fatal("OnFault not called")
				}
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
						s, err := p.NewSession(crypto.SessionParams{Alg: testAlgs[0], CipherKey: randBytes(16), AuthKey: randBytes(20)}, func([]*crypto.Request) {})
						if err != nil {
							errs <- err
							return
						}
						if err := s.Close(context.Background()); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
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
