package providertest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/internal/testwait"
)

// FaultLoad is concurrent traffic on raw sessions of one provider, for
// fault-injection tests: every session submits its requests from its own
// goroutine, then closes. After the fault, Check verifies exactly-once,
// in-order completion and that failed requests kept their buffers.
type FaultLoad struct {
	t    testing.TB
	cols []*Collector
	recs [][]faultRec
	wg   sync.WaitGroup
}

type faultRec struct {
	req       *crypto.Request
	data, icv []byte
}

// StartFaultLoad opens sessions sessions on p (session i for alg(i), with
// random keys) and starts submitting per requests to each (256 random
// bytes, random IV and ICV, 8 bytes of AAD), one at a time, riding out
// backpressure; a session is closed (bounded by WaitLimit) once all its
// requests are accepted. It returns once every session has submitted a
// quarter of its requests: the moment to inject a fault.
func StartFaultLoad(t testing.TB, p crypto.Provider, sessions, per int, alg func(i int) crypto.Algorithm) *FaultLoad {
	t.Helper()
	l := &FaultLoad{t: t, cols: make([]*Collector, sessions), recs: make([][]faultRec, sessions)}
	var started sync.WaitGroup
	started.Add(sessions)
	for i := range sessions {
		a := alg(i)
		l.cols[i] = NewCollector()
		s, err := p.NewSession(crypto.SessionParams{Alg: a, CipherKey: RandBytes(a.CipherKeyLen()), AuthKey: RandBytes(a.Auth.KeyLen())}, l.cols[i].Done)
		if err != nil {
			t.Fatal(err)
		}
		for range per {
			r := &crypto.Request{Data: RandBytes(256), ICV: RandBytes(a.ICVLen()), IV: RandBytes(a.IVLen()), AAD: RandBytes(8)}
			l.recs[i] = append(l.recs[i], faultRec{r, bytes.Clone(r.Data), bytes.Clone(r.ICV)})
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			start := sync.OnceFunc(started.Done)
			defer start()
			deadline := time.Now().Add(WaitLimit)
		submit:
			for j, rc := range l.recs[i] {
				if j == per/4 {
					start()
				}
				for s.Submit([]*crypto.Request{rc.req}) == 0 {
					if time.Now().After(deadline) {
						t.Errorf("session %d: backpressure did not clear within %v", i, WaitLimit)
						break submit
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), WaitLimit)
			defer cancel()
			s.Close(ctx)
		}()
	}
	testwait.Wait(t, WaitLimit, "every fault-load session submitted a quarter", &started)
	return l
}

// Wait waits until every session has submitted all its requests and
// been closed, failing the test after WaitLimit.
func (l *FaultLoad) Wait() {
	l.t.Helper()
	testwait.Wait(l.t, 2*WaitLimit, "fault-load sessions submitted and closed", &l.wg)
}

// Check, after Wait, fails t unless every request completed exactly once
// and in submission order per session, with StatusOK or StatusError, and
// at least one failed (the fault hit the traffic); a failed request must
// wrap wantErr (unless nil) and have its Data and ICV untouched. It
// returns how many requests failed.
func (l *FaultLoad) Check(t testing.TB, wantErr error) (failed int) {
	t.Helper()
	for i, c := range l.cols {
		order := c.Order()
		if len(order) != len(l.recs[i]) || c.Dups() != 0 {
			t.Fatalf("session %d: %d completions, %d duplicates", i, len(order), c.Dups())
		}
		for j, rc := range l.recs[i] {
			if order[j] != rc.req {
				t.Fatalf("session %d: completion %d out of order", i, j)
			}
			switch rc.req.Status {
			case crypto.StatusOK:
			case crypto.StatusError:
				failed++
				if wantErr != nil && !errors.Is(rc.req.Err, wantErr) {
					t.Fatalf("err %v, want %v", rc.req.Err, wantErr)
				}
				if !bytes.Equal(rc.req.Data, rc.data) || !bytes.Equal(rc.req.ICV, rc.icv) {
					t.Fatal("failed request's Data/ICV modified")
				}
			default:
				t.Fatalf("status %v (%v)", rc.req.Status, rc.req.Err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no request failed after the fault")
	}
	return failed
}

// WaitFault waits for the provider's OnFault report on faulted, failing t
// if none arrives within WaitLimit or it does not wrap wantErr.
func WaitFault(t testing.TB, faulted <-chan error, wantErr error) {
	t.Helper()
	select {
	case err := <-faulted:
		if !errors.Is(err, wantErr) {
			t.Fatalf("fault %v, want %v", err, wantErr)
		}
	case <-time.After(WaitLimit):
		t.Fatal("OnFault not called")
	}
}
