// Command hostjitter measures how often, and for how long, the host takes
// the CPU away from a thread that never blocks: the noise floor under
// every latency figure measured on this machine (the cyclictest idea,
// without a real-time policy).
//
// Each of -threads goroutines is locked to its own OS thread and reads the
// monotonic clock in a loop for -d; a gap between two consecutive reads is
// time during which the thread did not run (preempted by the kernel, by
// another task, or by the hypervisor). It prints, per thread, the number
// of gaps over 100 µs, 500 µs and 1 ms, the rate of gaps over 1 ms per
// second and the longest gap. With -threads equal to the number of CPUs,
// every CPU is busy: the condition of a data path running while a
// background worker uses the other CPUs.
//
//	go run ./bench/hostjitter -threads 1 -d 20s
//	go run ./bench/hostjitter -threads 2 -d 20s
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

type result struct {
	over100, over500, over1000 int
	max                        time.Duration
}

func spin(d time.Duration) result {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r result
	last := time.Now()
	end := last.Add(d)
	for last.Before(end) {
		now := time.Now()
		g := now.Sub(last)
		switch {
		case g > time.Millisecond:
			r.over1000++
			fallthrough
		case g > 500*time.Microsecond:
			r.over500++
			fallthrough
		case g > 100*time.Microsecond:
			r.over100++
		}
		r.max = max(r.max, g)
		last = now
	}
	return r
}

func main() {
	threads := flag.Int("threads", 1, "spinning threads (GOMAXPROCS is raised to match)")
	d := flag.Duration("d", 10*time.Second, "measurement time")
	flag.Parse()
	if *threads < 1 || *d <= 0 {
		fmt.Fprintln(os.Stderr, "hostjitter: -threads must be ≥ 1 and -d > 0")
		os.Exit(2)
	}
	if runtime.GOMAXPROCS(0) < *threads {
		runtime.GOMAXPROCS(*threads)
	}
	res := make([]result, *threads)
	var wg sync.WaitGroup
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = spin(*d)
		}()
	}
	wg.Wait()
	fmt.Printf("%d thread(s), %v, %d CPUs\n", *threads, *d, runtime.NumCPU())
	for i, r := range res {
		fmt.Printf("thread %d: gaps >100µs %d, >500µs %d, >1ms %d (%.2f/s), max %v\n",
			i, r.over100, r.over500, r.over1000, float64(r.over1000)/d.Seconds(), r.max.Round(time.Microsecond))
	}
}
