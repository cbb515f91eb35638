package glxsb

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
)

// benchSize is the ESP payload of a 1420-byte packet rounded up to the AES
// block (CBC needs whole blocks).
const benchSize = 1424

// ocf models the framework side of FreeBSD's opencrypto as the kern/132622
// report describes it: crypto_dispatch invokes the driver directly unless
// the driver is blocked; a refusal (ERESTART) marks the driver blocked and
// queues the request on crp_q; the crypto_proc thread sleeps until
// crypto_unblock wakes it and then resubmits from the head of the queue,
// one request at a time. The queued driver runs under the same harness (it
// refuses only when its FIFO is full), so both designs are compared on the
// same device model and the same framework.
type ocf struct {
	s crypto.Session

	mu      sync.Mutex
	cond    *sync.Cond
	q       []*crypto.Request
	blocked bool
	stop    bool
	wg      sync.WaitGroup
}

func newOCF() *ocf {
	o := &ocf{}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *ocf) start(s crypto.Session) {
	o.s = s
	o.wg.Add(1)
	go o.proc()
}

// dispatch is crypto_dispatch.
func (o *ocf) dispatch(r *crypto.Request) {
	o.mu.Lock()
	if !o.blocked && len(o.q) == 0 {
		o.mu.Unlock()
		if o.s.Submit([]*crypto.Request{r}) == 1 {
			return
		}
		o.mu.Lock()
		o.blocked = true
	}
	o.q = append(o.q, r)
	o.cond.Signal()
	o.mu.Unlock()
}

// unblock is crypto_unblock.
func (o *ocf) unblock() {
	o.mu.Lock()
	o.blocked = false
	o.cond.Signal()
	o.mu.Unlock()
}

// proc is the crypto_proc thread.
func (o *ocf) proc() {
	defer o.wg.Done()
	batch := make([]*crypto.Request, 1)
	o.mu.Lock()
	for {
		for !o.stop && (o.blocked || len(o.q) == 0) {
			o.cond.Wait()
		}
		if o.stop {
			o.mu.Unlock()
			return
		}
		batch[0] = o.q[0]
		o.mu.Unlock()
		n := o.s.Submit(batch)
		o.mu.Lock()
		if n == 1 {
			o.q = o.q[1:]
		} else {
			o.blocked = true
			if !blockingHarness(o) {
				// A queued driver refused because its FIFO was full: it
				// sends no unblock, so retry after a short pause.
				o.mu.Unlock()
				time.Sleep(10 * time.Microsecond)
				o.mu.Lock()
				o.blocked = false
			}
		}
	}
}

var blockingSet sync.Map

func blockingHarness(o *ocf) bool { _, ok := blockingSet.Load(o); return ok }

func (o *ocf) close() {
	o.mu.Lock()
	o.stop = true
	o.cond.Broadcast()
	o.mu.Unlock()
	o.wg.Wait()
}

// runLoad drives total requests of benchSize bytes through p from
// submitters closed-loop callers (one request outstanding each) and
// returns the elapsed time.
func runLoad(tb testing.TB, p *Provider, o *ocf, submitters, total int) time.Duration {
	type sub struct {
		r    *crypto.Request
		done chan struct{}
	}
	subs := make([]*sub, submitters)
	sessDone := func(reqs []*crypto.Request) {
		for _, r := range reqs {
			r.User.(*sub).done <- struct{}{}
		}
	}
	s, err := p.NewSession(crypto.SessionParams{Alg: algFor(crypto.AuthHMACSHA1_96), CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}, sessDone)
	if err != nil {
		tb.Fatal(err)
	}
	o.start(s)
	for i := range subs {
		subs[i] = &sub{done: make(chan struct{}, 1)}
		subs[i].r = &crypto.Request{Data: make([]byte, benchSize), ICV: make([]byte, 12), IV: make([]byte, 16), User: subs[i]}
	}
	per := (total + submitters - 1) / submitters
	var wg sync.WaitGroup
	start := time.Now()
	for _, sb := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				sb.r.Status = crypto.StatusPending
				o.dispatch(sb.r)
				<-sb.done
				if sb.r.Status != crypto.StatusOK {
					panic(fmt.Sprintf("status %v: %v", sb.r.Status, sb.r.Err))
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	o.close()
	s.Close(context.Background())
	return el
}

func measure(tb testing.TB, blocking bool, submitters, total int) (mbps, ofLimit float64, st Stats) {
	o := newOCF()
	if blocking {
		blockingSet.Store(o, true)
		defer blockingSet.Delete(o)
	}
	p, err := New(Options{Blocking: blocking, OnUnblock: o.unblock})
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Close(context.Background())
	n := submitters * ((total + submitters - 1) / submitters)
	el := runLoad(tb, p, o, submitters, total)
	bytes := float64(n * benchSize)
	mbps = bytes / el.Seconds() / 1e6
	limit := float64(benchSize) / p.dev.cost(benchSize).Seconds() / 1e6
	return mbps, mbps / limit, p.Stats()
}

// BenchmarkThroughput reports delivered throughput ÷ the modelled device
// limit (setup + size/throughput per operation) with 1, 4 and 16 closed-loop
// submitters, for the queued driver and for the blocking (kern/132622)
// driver.
func BenchmarkThroughput(b *testing.B) {
	for _, mode := range []string{"queued", "blocking"} {
		for _, subs := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("%s/submitters=%d", mode, subs), func(b *testing.B) {
				mbps, of, st := measure(b, mode == "blocking", subs, max(b.N, subs))
				b.ReportMetric(mbps, "MB/s")
				b.ReportMetric(of, "of-limit")
				if st.Device.Ops > 0 {
					b.ReportMetric(float64(st.Device.Lateness.Nanoseconds())/float64(st.Device.Ops), "emul-late-ns/op")
				}
				b.ReportMetric(float64(st.Refused)/float64(max(b.N, 1)), "refusals/op")
			})
		}
	}
}

// BenchmarkQueuedVsBlocking measures both designs back to back in the same
// run (4 submitters) and reports queued ÷ blocking.
//
// The two designs alternate in rounds, so that a burst of load from other
// processes on the shared machine hits both alike; each mode's figure is
// its total bytes over its total time.
func BenchmarkQueuedVsBlocking(b *testing.B) {
	const rounds = 10
	n := max(b.N/rounds, 100)
	var tq, tb float64 // seconds per MB, summed
	for range rounds {
		q, _, _ := measure(b, false, 4, n)
		bl, _, _ := measure(b, true, 4, n)
		tq += 1 / q
		tb += 1 / bl
	}
	q, bl := rounds/tq, rounds/tb
	b.ReportMetric(q, "queued-MB/s")
	b.ReportMetric(bl, "blocking-MB/s")
	b.ReportMetric(q/bl, "queued/blocking")
}
