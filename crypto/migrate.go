package crypto

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Migration: moving many bindings to another provider at once (a provider
// arrives that is faster, leaves, or faults) without stopping traffic.
//
// Moving one binding means creating its session on the new provider (a
// key schedule and an allocation: the expensive part, done under the
// binding's control lock only, while its traffic still flows on the old
// session), a pointer swap under the submission lock (tens of
// nanoseconds), and closing the drained old session.
//
// The work is done by a few background workers, never by the data path:
// a Submit that created sessions would allocate, and on a goroutine that
// allocates during a garbage collection the runtime charges mark assists,
// which park it for hundreds of microseconds. What a worker must not do
// is hold a CPU for long. On a machine whose CPUs are all busy (two CPUs:
// the traffic, the worker, and the garbage collector's fractional mark
// worker, which preempts the goroutine on its P), a preempted data-path
// goroutine waits in the run queue until some P schedules again, and the
// kernel lets a freshly woken thread run a whole slice (1.5 ms with EEVDF
// on 2 CPUs) while another waits. So a worker yields every migrateSlice,
// to goroutines (runtime.Gosched: the preempted data path, queued ahead
// of the worker, runs next on its P) and to threads (sched_yield).

// Migration tuning.
const (
	// migrateChunk is the number of bindings a worker takes at a time:
	// it creates their sessions, swaps them in one after the other, then
	// closes the drained old sessions.
	migrateChunk = 64
	// migrateSlice: a worker yields its CPU when it has run this long
	// since it last yielded. Chosen from BenchmarkRebind1000 on 2 CPUs:
	// 250 µs left gaps of 0.5-1 ms whenever a GC cycle ran during a
	// migration; 20 µs costs the worker ~5 % in yields.
	migrateSlice = 20 * time.Microsecond
)

// migrator paces one migration worker (see migrateSlice).
type migrator struct{ since time.Time }

// pace yields the CPU, to other goroutines and to other threads, if the
// worker has run for migrateSlice since it last yielded.
func (p *migrator) pace() {
	if time.Since(p.since) < migrateSlice {
		return
	}
	runtime.Gosched()
	osYield()
	p.since = time.Now()
}

// maintainAll moves every binding selected by want to the provider it
// should be on (see Binding.move), with a few workers (session creation
// on a hardware provider may be a device round trip), and returns how many
// bindings moved. No binding's traffic waits for another binding's
// session creation: the data path takes no lock that a migration holds,
// except each binding's own submission lock for the duration of its
// pointer swap.
func (f *Framework) maintainAll(want func(*Binding) bool) int {
	all := f.allBindings()
	todo := all[:0]
	for _, b := range all {
		if want(b) {
			todo = append(todo, b)
		}
	}
	var (
		next, moved atomic.Int64
		wg          sync.WaitGroup
	)
	// Leave a P to the traffic.
	chunks := (len(todo) + migrateChunk - 1) / migrateChunk
	workers := min(chunks, 4, max(1, runtime.GOMAXPROCS(0)-1))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := migrator{since: time.Now()}
			for {
				lo := int(next.Add(migrateChunk)) - migrateChunk
				if lo >= len(todo) {
					return
				}
				chunk := todo[lo:min(lo+migrateChunk, len(todo))]
				moved.Add(int64(f.migrateChunk(chunk, &p)))
			}
		}()
	}
	wg.Wait()
	return int(moved.Load())
}

// migrateChunk moves the bindings of chunk (at most migrateChunk) on the
// calling goroutine and returns how many moved: it creates their new
// sessions, swaps them in one after the other, closes the drained old
// sessions and resubmits pending retries.
func (f *Framework) migrateChunk(chunk []*Binding, p *migrator) int {
	var (
		prep      [migrateChunk]*bsess
		retire    [2 * migrateChunk]*bsess // old and unused sessions
		moved, nr int
	)
	for i, b := range chunk {
		prep[i] = b.prepareMove()
		p.pace()
	}
	for i, b := range chunk {
		mv, old, unused := b.move(prep[i])
		if mv {
			moved++
		}
		for _, w := range [2]*bsess{old, unused} {
			if w != nil {
				retire[nr] = w
				nr++
			}
		}
	}
	if nr > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.CloseTimeout)
		for _, w := range retire[:nr] {
			f.retire(w, ctx)
			p.pace()
		}
		cancel()
	}
	for _, b := range chunk {
		b.flushRetry()
	}
	return moved
}
