package testwait

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = strings.TrimSpace(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// run calls f with a recorder on a new goroutine and returns what it
// failed with ("" if it returned normally).
func run(f func(t testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	select { // f ends by returning or by Goexit; both close done
	case <-done:
	case <-time.After(Timeout):
		return "did not return"
	}
	return r.msg
}

func TestWaitsFailAtTheDeadline(t *testing.T) {
	const d = 20 * time.Millisecond
	never := make(chan int)
	var wg sync.WaitGroup
	wg.Add(1)
	defer wg.Done()
	for name, f := range map[string]func(testing.TB){
		"Until": func(t testing.TB) { Until(t, d, "cond", func() bool { return false }) },
		"Recv":  func(t testing.TB) { Recv(t, d, "cond", never) },
		"Wait":  func(t testing.TB) { Wait(t, d, "cond", &wg) },
		"Func":  func(t testing.TB) { Func(t, d, "cond", func() { <-never }) },
	} {
		start := time.Now()
		msg := run(f)
		if msg != "cond: not within 20ms" {
			t.Errorf("%s: failed with %q", name, msg)
		}
		if el := time.Since(start); el < d || el > 5*time.Second {
			t.Errorf("%s: failed after %v, deadline %v", name, el, d)
		}
	}
}

func TestWaitsReturnOnTheEvent(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	var wg sync.WaitGroup
	n := 0
	msg := run(func(t testing.TB) {
		Until(t, Timeout, "cond", func() bool { n++; return n > 3 })
		if v, ok := Recv(t, Timeout, "recv", ch); v != 7 || !ok {
			t.Fatalf("Recv = %d, %v", v, ok)
		}
		Wait(t, Timeout, "wait", &wg)
		Func(t, Timeout, "func", func() {})
	})
	if msg != "" {
		t.Fatal(msg)
	}
}
