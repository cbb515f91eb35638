package glxsb

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/providertest"
	"github.com/keelinit/keel/internal/testwait"
)

func algFor(a crypto.Auth) crypto.Algorithm {
	return crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: a}
}

func newProvider(t testing.TB, o Options) *Provider {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	providertest.CloseAtCleanup(t, p)
	return p
}

func TestRFC3602Vectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/rfc3602.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct{ Case, Key, IV, Plaintext, Ciphertext string } `json:"rfc3602_aes_cbc_raw"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	p := newProvider(t, Options{SetupLatency: -1, ThroughputMBps: 1e6})
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, v := range f.Vectors {
		t.Run(v.Case, func(t *testing.T) {
			alg := algFor(crypto.AuthHMACSHA1_96)
			akey := providertest.RandBytes(20)
			c := providertest.NewCollector()
			s, err := p.NewSession(crypto.SessionParams{Alg: alg, CipherKey: unhex(v.Key), AuthKey: akey}, c.Done)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close(testwait.Context(t)) }()
			aad := []byte{1, 2, 3, 4, 0, 0, 0, 1}
			r := &crypto.Request{Dir: crypto.Encrypt, Data: unhex(v.Plaintext), ICV: make([]byte, 12), AAD: aad, IV: unhex(v.IV)}
			providertest.SubmitAll(t, s, []*crypto.Request{r})
			c.Wait(t, 1)
			if r.Status != crypto.StatusOK {
				t.Fatalf("status %v err %v", r.Status, r.Err)
			}
			if got := hex.EncodeToString(r.Data); got != v.Ciphertext {
				t.Fatalf("ciphertext %s, want %s", got, v.Ciphertext)
			}
			_, icv := providertest.Reference(alg, unhex(v.Key), akey, aad, unhex(v.IV), unhex(v.Plaintext), nil)
			if !bytes.Equal(r.ICV, icv) {
				t.Fatalf("icv %x, want %x", r.ICV, icv)
			}
			d := &crypto.Request{Dir: crypto.Decrypt, Data: r.Data, ICV: r.ICV, AAD: aad, IV: unhex(v.IV)}
			providertest.SubmitAll(t, s, []*crypto.Request{d})
			c.Wait(t, 2)
			if d.Status != crypto.StatusOK || hex.EncodeToString(d.Data) != v.Plaintext {
				t.Fatalf("decrypt: status %v data %x", d.Status, d.Data)
			}
		})
	}
}

func TestRoundTripAgainstStdlib(t *testing.T) {
	p := newProvider(t, Options{SetupLatency: -1, ThroughputMBps: 1e6})
	for _, auth := range auths {
		for _, size := range []int{0, 16, 1424, MaxOp} {
			alg := algFor(auth)
			t.Run(alg.String()+"/"+itoa(size), func(t *testing.T) {
				ckey, akey := providertest.RandBytes(16), providertest.RandBytes(auth.KeyLen())
				c := providertest.NewCollector()
				s, err := p.NewSession(crypto.SessionParams{Alg: alg, CipherKey: ckey, AuthKey: akey}, c.Done)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { s.Close(testwait.Context(t)) }()
				pt, iv, aad, tr := providertest.RandBytes(size), providertest.RandBytes(16), providertest.RandBytes(8), providertest.RandBytes(4)
				wantCT, wantICV := providertest.Reference(alg, ckey, akey, aad, iv, pt, tr)
				r := &crypto.Request{Dir: crypto.Encrypt, Data: append([]byte(nil), pt...), ICV: make([]byte, alg.ICVLen()), AAD: aad, IV: iv, AuthTrailer: tr}
				providertest.SubmitAll(t, s, []*crypto.Request{r})
				c.Wait(t, 1)
				if r.Status != crypto.StatusOK || !bytes.Equal(r.Data, wantCT) || !bytes.Equal(r.ICV, wantICV) {
					t.Fatalf("encrypt mismatch: status %v err %v", r.Status, r.Err)
				}
				// A tampered ICV fails authentication and leaves Data alone.
				bad := append([]byte(nil), wantICV...)
				bad[0] ^= 1
				ct := append([]byte(nil), wantCT...)
				tam := &crypto.Request{Dir: crypto.Decrypt, Data: ct, ICV: bad, AAD: aad, IV: iv, AuthTrailer: tr}
				d := &crypto.Request{Dir: crypto.Decrypt, Data: append([]byte(nil), wantCT...), ICV: wantICV, AAD: aad, IV: iv, AuthTrailer: tr}
				providertest.SubmitAll(t, s, []*crypto.Request{tam, d})
				c.Wait(t, 3)
				if tam.Status != crypto.StatusAuthFailed || !bytes.Equal(tam.Data, wantCT) {
					t.Fatalf("tampered: status %v, data changed %v", tam.Status, !bytes.Equal(tam.Data, wantCT))
				}
				if d.Status != crypto.StatusOK || !bytes.Equal(d.Data, pt) {
					t.Fatalf("decrypt: status %v err %v", d.Status, d.Err)
				}
				if c.Dups() != 0 {
					t.Fatalf("%d duplicate completions", c.Dups())
				}
			})
		}
	}
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func TestNewSessionErrors(t *testing.T) {
	p := newProvider(t, Options{})
	tests := []struct {
		name string
		sp   crypto.SessionParams
		want error
	}{
		{"gcm", crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: make([]byte, 20)}, crypto.ErrUnsupported},
		{"cbc-256", crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA1_96}, CipherKey: make([]byte, 32), AuthKey: make([]byte, 20)}, crypto.ErrUnsupported},
		{"cbc-no-auth", crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128}, CipherKey: make([]byte, 16)}, crypto.ErrUnsupported},
		{"short-key", crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 15), AuthKey: make([]byte, 20)}, crypto.ErrKeySize},
		{"short-auth-key", crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA256_128), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, crypto.ErrKeySize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.NewSession(tc.sp, func([]*crypto.Request) {})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	p := newProvider(t, Options{SetupLatency: -1, ThroughputMBps: 1e6})
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(testwait.Context(t)) }()
	tests := []struct {
		name       string
		data, icv  int
		iv         int
		wantStatus crypto.Status
	}{
		{"ok", 32, 12, 16, crypto.StatusOK},
		{"unaligned", 33, 12, 16, crypto.StatusError},
		{"too-long", MaxOp + 16, 12, 16, crypto.StatusError},
		{"short-iv", 32, 12, 8, crypto.StatusError},
		{"wrong-icv", 32, 16, 16, crypto.StatusError},
	}
	var reqs []*crypto.Request
	var orig [][]byte
	for _, tc := range tests {
		d := providertest.RandBytes(tc.data)
		orig = append(orig, append([]byte(nil), d...))
		reqs = append(reqs, &crypto.Request{Data: d, ICV: make([]byte, tc.icv), IV: make([]byte, tc.iv)})
	}
	providertest.SubmitAll(t, s, reqs)
	c.Wait(t, len(reqs))
	for i, tc := range tests {
		r := reqs[i]
		if r.Status != tc.wantStatus {
			t.Errorf("%s: status %v (%v), want %v", tc.name, r.Status, r.Err, tc.wantStatus)
		}
		if tc.wantStatus == crypto.StatusError {
			if !errors.Is(r.Err, crypto.ErrInvalidRequest) || !bytes.Equal(r.Data, orig[i]) {
				t.Errorf("%s: err %v, data changed %v", tc.name, r.Err, !bytes.Equal(r.Data, orig[i]))
			}
		}
		if c.Order()[i] != r {
			t.Errorf("completion %d out of order", i)
		}
	}
}

func TestInfo(t *testing.T) {
	p := newProvider(t, Options{ThroughputMBps: 30, SetupLatency: 10 * time.Microsecond, Blocking: true})
	info := p.Info()
	if !info.Emulated || info.Kind != crypto.KindHardware || info.Name != "glxsb" {
		t.Fatalf("info %+v", info)
	}
	for k, want := range map[string]string{"throughput_mbps": "30", "setup_latency_us": "10", "max_op_bytes": "16384", "slots": "1", "driver_mode": "blocking"} {
		if info.Params[k] != want {
			t.Errorf("param %s = %q, want %q", k, info.Params[k], want)
		}
	}
	if len(p.Capabilities()) != 4 {
		t.Fatalf("caps %v", p.Capabilities())
	}
}

func TestBackpressure(t *testing.T) {
	p := newProvider(t, Options{QueueLen: 4, SetupLatency: 20 * time.Millisecond})
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]*crypto.Request, 10)
	for i := range reqs {
		reqs[i] = &crypto.Request{Data: make([]byte, 64), ICV: make([]byte, 12), IV: make([]byte, 16)}
	}
	if n := s.Submit(reqs); n != 4 {
		t.Fatalf("accepted %d, want 4", n)
	}
	if n := s.Submit(reqs[4:]); n != 0 {
		t.Fatalf("accepted %d while full", n)
	}
	if p.Stats().Refused == 0 {
		t.Fatal("refusal not counted")
	}
	providertest.SubmitAll(t, s, reqs[4:])
	if err := s.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if c.Count() != 10 || c.Dups() != 0 {
		t.Fatalf("completed %d (dup %d)", c.Count(), c.Dups())
	}
	for i, r := range c.Order() {
		if r != reqs[i] || r.Status != crypto.StatusOK {
			t.Fatalf("completion %d: order or status %v", i, r.Status)
		}
	}
	if s.Submit(reqs) != 0 {
		t.Fatal("Submit after Close accepted")
	}
}

func TestBlockingMode(t *testing.T) {
	unblocked := make(chan struct{}, 100)
	p := newProvider(t, Options{Blocking: true, SetupLatency: 2 * time.Millisecond, OnUnblock: func() { unblocked <- struct{}{} }})
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(testwait.Context(t)) }()
	reqs := make([]*crypto.Request, 3)
	for i := range reqs {
		reqs[i] = &crypto.Request{Data: make([]byte, 64), ICV: make([]byte, 12), IV: make([]byte, 16)}
	}
	for i := range reqs {
		if n := s.Submit(reqs[i:]); n != 1 {
			t.Fatalf("request %d: accepted %d, want 1", i, n)
		}
		if i == 0 {
			if n := s.Submit(reqs[1:]); n != 0 {
				t.Fatalf("busy driver accepted %d", n)
			}
		}
		select {
		case <-unblocked:
		case <-time.After(providertest.WaitLimit):
			t.Fatal("no unblock")
		}
	}
	if c.Count() != 3 {
		t.Fatalf("completed %d", c.Count())
	}
	if p.Stats().Refused == 0 {
		t.Fatal("refusal not counted")
	}
}

// TestFaultsMidTraffic injects each fault while several sessions submit
// concurrently; every request must complete exactly once, in submission
// order per session, a failed one with Data and ICV untouched.
func TestFaultsMidTraffic(t *testing.T) {
	tests := []struct {
		fault     Fault
		wantErr   error
		wantFault bool
	}{
		{FaultError, errDevice, false},
		{FaultHang, crypto.ErrTimeout, true},
		{FaultVanish, crypto.ErrDeviceGone, true},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			var faults atomic.Int32
			faulted := make(chan error, 1)
			// Only the hang case relies on the watchdog; elsewhere a long
			// timeout keeps a preempted emulator from looking hung.
			opTimeout := providertest.WaitLimit
			if tc.fault == FaultHang {
				opTimeout = 100 * time.Millisecond
			}
			p := newProvider(t, Options{QueueLen: 32, SetupLatency: 50 * time.Microsecond, OpTimeout: opTimeout,
				OnFault: func(err error) { faults.Add(1); faulted <- err }})
			l := providertest.StartFaultLoad(t, p, 4, 200, func(int) crypto.Algorithm { return algFor(crypto.AuthHMACSHA256_128) })
			p.InjectFault(tc.fault)
			l.Wait()
			if tc.fault == FaultHang {
				// Let the hung operation complete late: it must be dropped.
				p.InjectFault(FaultNone)
				time.Sleep(20 * time.Millisecond)
			}
			l.Check(t, tc.wantErr)
			if tc.wantFault {
				providertest.WaitFault(t, faulted, tc.wantErr)
				if faults.Load() != 1 {
					t.Fatalf("OnFault called %d times", faults.Load())
				}
			}
		})
	}
}

func TestCloseHandsBackFromHungDevice(t *testing.T) {
	p := newProvider(t, Options{OpTimeout: time.Hour})
	c := providertest.NewCollector()
	s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done)
	if err != nil {
		t.Fatal(err)
	}
	p.InjectFault(FaultHang)
	reqs := make([]*crypto.Request, 5)
	for i := range reqs {
		reqs[i] = &crypto.Request{Data: []byte("0123456789abcdef"), ICV: make([]byte, 12), IV: make([]byte, 16)}
	}
	providertest.SubmitAll(t, s, reqs)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Count() != 5 {
		t.Fatalf("completed %d", c.Count())
	}
	for i, r := range c.Order() {
		if r != reqs[i] || r.Status != crypto.StatusError || !errors.Is(r.Err, crypto.ErrDeviceGone) || string(r.Data) != "0123456789abcdef" {
			t.Fatalf("request %d: %v %v %q", i, r.Status, r.Err, r.Data)
		}
	}
	// The device still works for other sessions once the hang clears.
	p.InjectFault(FaultNone)
	c2 := providertest.NewCollector()
	s2, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c2.Done)
	if err != nil {
		t.Fatal(err)
	}
	r := &crypto.Request{Data: make([]byte, 16), ICV: make([]byte, 12), IV: make([]byte, 16)}
	providertest.SubmitAll(t, s2, []*crypto.Request{r})
	s2.Close(testwait.Context(t))
	if r.Status != crypto.StatusOK || c.Count() != 5 {
		t.Fatalf("status %v, first session completions %d", r.Status, c.Count())
	}
}

func TestProviderCloseDrainsOrHandsBack(t *testing.T) {
	for _, hang := range []bool{false, true} {
		name := "drain"
		if hang {
			name = "hand-back"
		}
		t.Run(name, func(t *testing.T) {
			p, err := New(Options{SetupLatency: time.Millisecond, OpTimeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			c := providertest.NewCollector()
			s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done)
			if err != nil {
				t.Fatal(err)
			}
			reqs := make([]*crypto.Request, 20)
			for i := range reqs {
				reqs[i] = &crypto.Request{Data: make([]byte, 16), ICV: make([]byte, 12), IV: make([]byte, 16)}
			}
			if hang {
				p.InjectFault(FaultHang)
			}
			providertest.SubmitAll(t, s, reqs)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if !hang {
				ctx, cancel = context.WithTimeout(context.Background(), providertest.WaitLimit)
			}
			defer cancel()
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if c.Count() != len(reqs) || c.Dups() != 0 {
				t.Fatalf("completed %d dup %d", c.Count(), c.Dups())
			}
			want := crypto.StatusOK
			if hang {
				want = crypto.StatusError
			}
			for i, r := range c.Order() {
				if r != reqs[i] || r.Status != want {
					t.Fatalf("request %d: %v %v", i, r.Status, r.Err)
				}
			}
			if _, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, c.Done); err == nil {
				t.Fatal("NewSession after Close succeeded")
			}
		})
	}
}

func TestZeroAllocsSteadyState(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	p := newProvider(t, Options{SetupLatency: -1, ThroughputMBps: 1e6})
	ch := make(chan struct{}, 1)
	s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)},
		func([]*crypto.Request) { ch <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close(testwait.Context(t)) }()
	reqs := []*crypto.Request{{Data: make([]byte, 1424), ICV: make([]byte, 12), IV: make([]byte, 16)}}
	if a := providertest.AllocsPerRoundTrip(s, reqs, ch, 500); a > 0.05 {
		t.Fatalf("%.2f allocations per request", a)
	}
}
