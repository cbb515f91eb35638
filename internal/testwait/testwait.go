// Package testwait holds the waits of Keel's tests: each waits for an
// event with a deadline and fails the test, naming what it waited for,
// when the deadline passes. A lost completion or a hung goroutine is then
// a failure within seconds that says what did not happen, not a hang until
// the global test timeout.
//
// Every function must be called from the goroutine running the test (it
// calls t.Fatalf).
package testwait

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Timeout is the deadline of the waits that do not need their own: far
// above what any wait takes on a loaded CI machine, far below the
// global test timeout.
const Timeout = 10 * time.Second

// Long is the deadline of waits for a whole workload (concurrent
// workers pushing traffic, providers churning) rather than one event.
const Long = 60 * time.Second

// Until polls cond, with a short back-off, until it reports true, and
// fails t if it has not within d. what describes the condition ("binding
// moved to b"); the failure adds the deadline.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := 50 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(pause)
		if pause < 5*time.Millisecond {
			pause *= 2
		}
	}
}

// Recv receives from ch, failing t if nothing arrives within d. It
// returns the value and whether ch was open (as v, ok := <-ch).
func Recv[T any](t testing.TB, d time.Duration, what string, ch <-chan T) (T, bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-timer.C:
		t.Fatalf("%s: not within %v", what, d)
		panic("unreachable")
	}
}

// Wait waits for wg, failing t if it has not finished within d. (The
// goroutine that waits on wg is left behind on failure; the test is
// failing anyway.)
func Wait(t testing.TB, d time.Duration, what string, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	Recv(t, d, what, done)
}

// Func runs f on another goroutine and waits for it to return, failing t
// if it has not within d: for calls that block until an event (a Close
// that drains, a process Wait).
func Func(t testing.TB, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	Recv(t, d, what, done)
}

// Context returns a context that expires after Timeout (and is cancelled
// when the test ends), for calls that wait on an event until their
// context is done (a Close that drains): pass it instead of
// context.Background(), and create it when the call is made, not in a
// defer statement's arguments.
func Context(t testing.TB) context.Context { return ContextWithin(t, Timeout) }

// ContextWithin is Context with deadline d: for an outside tool (scapy,
// tshark) that takes long to start on a loaded machine.
func ContextWithin(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
