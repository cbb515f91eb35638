package providertest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
)

// Traffic drives encrypt requests through Framework bindings and checks
// that each completes exactly once, in submission order per binding,
// with StatusOK and the Reference output, and that the binding ends up
// on an expected provider (after a failover or a hot-plug rebind). Set
// the exported fields before BindN; the per-stream checks then run
// concurrently. Failures are collected, not fatal: RunAll returns them.
type Traffic struct {
	Alg       crypto.Algorithm
	CipherKey []byte
	AuthKey   []byte
	// Hold makes every stream of RunAll wait, after its first eighth,
	// until the event has returned before it submits the rest. A fault
	// injected by the event then always meets traffic: without Hold, a
	// test goroutine descheduled on a loaded machine may inject it after
	// every request completed, and no request ever sees the fault.
	Hold bool
	// Watch, if set (its OnRebind installed as the framework's
	// Options.OnRebind), makes the streams wait for the rebind to the
	// expected provider as an event instead of polling for it.
	Watch *RebindWatch

	mu    sync.Mutex
	fails []string
}

// Stream is one binding's share of a Traffic: its requests, prepared by
// BindN and submitted by RunAll.
type Stream struct {
	// Binding is the binding the requests go through; RunAll closes it.
	Binding *crypto.Binding
	recs    []*tracked
	done    chan struct{}
}

type tracked struct {
	req  *crypto.Request
	pt   []byte
	seq  int
	done bool
}

func (tr *Traffic) fail(format string, args ...any) {
	tr.mu.Lock()
	tr.fails = append(tr.fails, fmt.Sprintf(format, args...))
	tr.mu.Unlock()
}

// Failures returns the failures recorded so far.
func (tr *Traffic) Failures() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.fails...)
}

// bind makes a binding on fw and prepares per requests of 256 random
// bytes for it (not yet submitted), failing t if fw refuses the binding.
func (tr *Traffic) bind(t testing.TB, fw *crypto.Framework, per int) *Stream {
	t.Helper()
	s := &Stream{recs: make([]*tracked, per), done: make(chan struct{})}
	next := 0
	var mu sync.Mutex
	b, err := fw.Bind(crypto.SessionParams{Alg: tr.Alg, CipherKey: tr.CipherKey, AuthKey: tr.AuthKey}, func(done []*crypto.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range done {
			x := r.User.(*tracked)
			if x.done {
				tr.fail("request %d completed twice", x.seq)
			}
			x.done = true
			if x.seq != next {
				tr.fail("request %d completed out of order (expected %d)", x.seq, next)
			}
			next++
			if next == per {
				close(s.done)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Binding = b
	for i := range s.recs {
		pt := RandBytes(256)
		iv := make([]byte, tr.Alg.IVLen())
		binary.BigEndian.PutUint64(iv, uint64(i+1))
		x := &tracked{pt: pt, seq: i}
		x.req = &crypto.Request{Dir: crypto.Encrypt, Data: append([]byte(nil), pt...), ICV: make([]byte, tr.Alg.ICVLen()), IV: iv, AAD: []byte("spi+seq!"), User: x}
		s.recs[i] = x
	}
	return s
}

// run submits s's requests one by one (riding out backpressure), calls
// started (if not nil) once an eighth of them are submitted, then, if
// resume is not nil, waits until it is closed (bounded by WaitLimit)
// before it submits the rest, waits for
// every completion, checks the outputs, waits until the binding is on
// wantProvider, and closes the binding. Each wait is bounded by
// WaitLimit.
func (tr *Traffic) run(s *Stream, started func(), resume <-chan struct{}, wantProvider string) {
	b := s.Binding
	defer b.Close(context.Background())
	for i, x := range s.recs {
		if i == len(s.recs)/8 && started != nil {
			started()
			if resume != nil {
				select {
				case <-resume:
				case <-time.After(WaitLimit):
					tr.fail("event did not return")
					return
				}
			}
		}
		deadline := time.Now().Add(WaitLimit)
		for b.Submit([]*crypto.Request{x.req}) == 0 {
			if time.Now().After(deadline) {
				tr.fail("backpressure never released")
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	select {
	case <-s.done:
	case <-time.After(WaitLimit):
		tr.fail("not all requests completed")
		return
	}
	for _, x := range s.recs {
		r := x.req
		if r.Status != crypto.StatusOK {
			tr.fail("request %d: status %v (%v)", x.seq, r.Status, r.Err)
			continue
		}
		ct, icv := Reference(tr.Alg, tr.CipherKey, tr.AuthKey, r.AAD, r.IV, x.pt, nil)
		if !bytes.Equal(r.Data, ct) || !bytes.Equal(r.ICV, icv) {
			tr.fail("request %d: wrong output", x.seq)
		}
	}
	if tr.Watch != nil {
		if !tr.Watch.Wait(b, wantProvider, WaitLimit) {
			tr.fail("binding on %q, want %q", b.Provider(), wantProvider)
		}
		return
	}
	for deadline := time.Now().Add(WaitLimit); b.Provider() != wantProvider; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tr.fail("binding on %q, want %q", b.Provider(), wantProvider)
			break
		}
	}
}

// BindN makes n bindings on fw, each with per prepared requests of 256
// random bytes (not yet submitted), failing t if fw refuses a binding or
// a binding does not start on provider on.
func (tr *Traffic) BindN(t testing.TB, fw *crypto.Framework, n, per int, on string) []*Stream {
	t.Helper()
	streams := make([]*Stream, n)
	for i := range streams {
		streams[i] = tr.bind(t, fw, per)
		if got := streams[i].Binding.Provider(); got != on {
			t.Fatalf("bound to %q, want %q", got, on)
		}
	}
	return streams
}

// RunAll runs every stream on its own goroutine (see run) and, once each
// has submitted an eighth of its requests, calls event (the hot-plug or
// fault under test) on the calling goroutine; with Hold, the streams
// submit the rest of their requests only after event returned. It
// returns the failures once every Run has returned.
func (tr *Traffic) RunAll(streams []*Stream, wantProvider string, event func()) []string {
	var wg, started sync.WaitGroup
	var resume chan struct{}
	if tr.Hold {
		resume = make(chan struct{})
	}
	started.Add(len(streams))
	for _, s := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); tr.run(s, started.Done, resume, wantProvider) }()
	}
	started.Wait()
	func() {
		if resume != nil {
			defer close(resume)
		}
		event()
	}()
	wg.Wait()
	return tr.Failures()
}
