package crypto_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

// stdPrims are the stdlib primitives (what aesni uses), for fakes that
// need real crypto.
var stdPrims = cpuprov.Primitives{
	NewAES: aes.NewCipher,
	NewGCM: func(key []byte) (cipher.AEAD, error) {
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(b)
	},
	NewChaCha20Poly1305: chacha20poly1305.New,
}

// fakeProvider is an asynchronous provider for framework tests: requests
// are queued (bounded), processed by worker goroutines with real crypto
// (cpuprov underneath, on a private copy of the data so that an error
// leaves the caller's buffers untouched), and completed out of order. It
// can be told to slow down, fail, hang, or refuse to release hung requests
// on Close. It records every (key, nonce) -> data digest it processed.
type fakeProvider struct {
	name     string
	priority int
	kind     crypto.Kind
	inner    crypto.Provider
	workers  int
	queueCap int

	delay       atomic.Int64 // ns of busy work per request
	failAfter   atomic.Int64 // fail every request after this many (<0: never)
	hangAfter   atomic.Int64 // stop completing after this many (<0: never)
	keepOnClose atomic.Bool  // Close does not release hung requests
	processed   atomic.Int64
	completions atomic.Int64 // worker completions delivered to the framework
	closeBusy   atomic.Int64 // Close calls that found requests in flight
	sessions    atomic.Int64

	// hold, if set, selects requests that a worker parks instead of
	// processing, until the session's release (a device that is merely
	// slow, not hung: held requests are processed for real then).
	hold atomic.Pointer[func(*crypto.Request) bool]
	// held receives a value each time a request is parked by hold.
	held chan struct{}

	nonces    *nonceLog
	onSession func(*fakeSession)
	caps      []crypto.Capability // nil: AES-128-GCM only
}

func newFake(name string, workers int) *fakeProvider {
	f := &fakeProvider{name: name, kind: crypto.KindHardware, workers: workers, queueCap: 256, nonces: newNonceLog(), held: make(chan struct{}, 1024)}
	f.inner = cpuprov.New(crypto.ProviderInfo{Name: name + "-inner"}, stdPrims)
	f.failAfter.Store(-1)
	f.hangAfter.Store(-1)
	return f
}

func (f *fakeProvider) Info() crypto.ProviderInfo {
	return crypto.ProviderInfo{Name: f.name, Kind: f.kind, Priority: f.priority, Emulated: true, Params: map[string]string{"workers": fmt.Sprint(f.workers)}}
}

// Capabilities claims only the algorithms the tests use, which keeps the
// self-tests and calibration of deliberately slow fakes short.
func (f *fakeProvider) Capabilities() []crypto.Capability {
	if f.caps != nil {
		return f.caps
	}
	return []crypto.Capability{{Alg: algGCM128}}
}

type fakeSession struct {
	f      *fakeProvider
	done   crypto.CompletionFunc
	inner  crypto.Session
	keyID  string
	alg    crypto.Algorithm
	mu     sync.Mutex
	closed bool
	queue  chan *crypto.Request
	hung   []*crypto.Request
	parked []*crypto.Request // by hold, until release
	failed []*crypto.Request // failed by failAfter (for lateWriteBack)
	hungMu sync.Mutex
	wg     sync.WaitGroup // workers
	pend   sync.WaitGroup // accepted, not completed
	inq    atomic.Int64
	syncMu sync.Mutex // serializes use of inner
	tmp    crypto.Request
	buf    []byte
	out    []*crypto.Request
}

func (f *fakeProvider) NewSession(p crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	s := &fakeSession{f: f, done: done, alg: p.Alg, queue: make(chan *crypto.Request, f.queueCap)}
	var err error
	s.inner, err = f.inner.NewSession(p, func([]*crypto.Request) {})
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(append(append([]byte{}, p.CipherKey...), p.AuthKey...))
	s.keyID = string(h[:8])
	f.sessions.Add(1)
	if f.onSession != nil {
		f.onSession(s)
	}
	for range f.workers {
		s.wg.Add(1)
		go s.worker()
	}
	return s, nil
}

func (s *fakeSession) Submit(reqs []*crypto.Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	n := 0
	for _, r := range reqs {
		s.pend.Add(1)
		s.inq.Add(1)
		select {
		case s.queue <- r:
			n++
		default:
			s.pend.Done()
			s.inq.Add(-1)
			return n
		}
	}
	return n
}

func (s *fakeSession) worker() {
	defer s.wg.Done()
	one := make([]*crypto.Request, 1)
	for r := range s.queue {
		n := s.f.processed.Add(1)
		if h := s.f.hangAfter.Load(); h >= 0 && n > h {
			s.hungMu.Lock()
			s.hung = append(s.hung, r)
			s.hungMu.Unlock()
			continue
		}
		if h := s.f.hold.Load(); h != nil && (*h)(r) {
			s.hungMu.Lock()
			s.parked = append(s.parked, r)
			s.hungMu.Unlock()
			s.f.held <- struct{}{}
			continue
		}
		if d := time.Duration(s.f.delay.Load()); d > 0 {
			time.Sleep(d) // a device's latency: it costs no CPU
		}
		if fa := s.f.failAfter.Load(); fa >= 0 && n > fa {
			r.Status = crypto.StatusError
			r.Err = fmt.Errorf("%s: injected failure: %w", s.f.name, crypto.ErrDeviceGone)
			s.hungMu.Lock()
			s.failed = append(s.failed, r)
			s.hungMu.Unlock()
		} else {
			s.process(r)
		}
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond) // reorder
		}
		one[0] = r
		s.inq.Add(-1)
		s.done(one)
		s.f.completions.Add(1)
		s.pend.Done()
	}
}

// process runs r through the real cipher on a private copy, then writes
// back, recording the (key, nonce, data) triple on encrypt.
func (s *fakeSession) process(r *crypto.Request) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if r.Dir == crypto.Encrypt {
		s.f.nonces.record(s.keyID, r.IV, r.Data)
	}
	s.buf = append(append(s.buf[:0], r.Data...), r.ICV...)
	s.tmp = crypto.Request{Dir: r.Dir, Data: s.buf[:len(r.Data)], ICV: s.buf[len(r.Data):], AAD: r.AAD, IV: r.IV, AuthTrailer: r.AuthTrailer}
	s.out = append(s.out[:0], &s.tmp)
	s.inner.Submit(s.out)
	r.Status, r.Err = s.tmp.Status, s.tmp.Err
	if r.Status == crypto.StatusOK {
		copy(r.Data, s.tmp.Data)
		copy(r.ICV, s.tmp.ICV)
	}
}

func (s *fakeSession) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.inq.Load() > 0 {
		s.f.closeBusy.Add(1)
	}
	close(s.queue)
	s.mu.Unlock()
	s.wg.Wait()
	if !s.f.keepOnClose.Load() {
		s.hungMu.Lock()
		hung := append(s.hung, s.parked...)
		s.hung, s.parked = nil, nil
		s.hungMu.Unlock()
		for _, r := range hung {
			r.Status = crypto.StatusError
			r.Err = fmt.Errorf("%s: session closed while hung: %w", s.f.name, crypto.ErrTimeout)
			s.done([]*crypto.Request{r})
			s.pend.Done()
		}
	}
	done := make(chan struct{})
	go func() { s.pend.Wait(); close(done) }()
	s.f.sessions.Add(-1)
	s.inner.Close(ctx)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lateComplete completes the requests a keepOnClose session still holds,
// simulating a hung device's late write-back.
func (s *fakeSession) lateComplete() int { return s.writeBack(s.take(&s.hung)) }

// lateWriteBack completes again, with StatusOK, every request this session
// failed with an injected failure: a device that reported an error and
// then, late, wrote back anyway.
func (s *fakeSession) lateWriteBack() int { return s.writeBack(s.take(&s.failed)) }

// release processes and completes the requests parked by hold, in the
// order they were parked, and returns how many there were.
func (s *fakeSession) release() int {
	parked := s.take(&s.parked)
	for _, r := range parked {
		s.process(r)
		s.inq.Add(-1)
		s.done([]*crypto.Request{r})
		s.pend.Done()
	}
	return len(parked)
}

// take empties one of the session's request lists (hung, parked, failed).
func (s *fakeSession) take(list *[]*crypto.Request) []*crypto.Request {
	s.hungMu.Lock()
	defer s.hungMu.Unlock()
	rs := *list
	*list = nil
	return rs
}

// writeBack completes rs one by one with StatusOK, as a device writing
// back late would, and returns how many there were.
func (s *fakeSession) writeBack(rs []*crypto.Request) int {
	for _, r := range rs {
		r.Status, r.Err = crypto.StatusOK, nil
		s.done([]*crypto.Request{r})
	}
	return len(rs)
}

// waitHeld waits until n more requests have been parked by hold.
func (f *fakeProvider) waitHeld(t testing.TB, n int, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for i := range n {
		select {
		case <-f.held:
		case <-deadline.C:
			t.Fatalf("%s: %d of %d requests parked within %v", f.name, i, n, d)
		}
	}
}

// nonceLog records, per (key, nonce), the digest of the data encrypted.
type nonceLog struct {
	on       atomic.Bool // record only traffic, not self-tests/calibration
	mu       sync.Mutex
	m        map[string][32]byte
	conflict []string
}

func newNonceLog() *nonceLog { return &nonceLog{m: map[string][32]byte{}} }

func (l *nonceLog) record(key string, nonce, data []byte) {
	if !l.on.Load() {
		return
	}
	d := sha256.Sum256(data)
	k := key + string(nonce)
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.m[k]; ok && prev != d {
		l.conflict = append(l.conflict, fmt.Sprintf("nonce %x", nonce))
	}
	l.m[k] = d
}

func (l *nonceLog) conflicts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.conflict...)
}
