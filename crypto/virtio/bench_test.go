//go:build linux

package virtio_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/virtio"
)

func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ctrlRun does total session create+close pairs (AES-128-CBC+HMAC-SHA1:
// two device sessions, one per direction, as Linux's skcipher setkey
// creates) from workers goroutines, and returns ops/s and the CPU used by
// both processes as a percentage of one CPU.
func ctrlRun(tb testing.TB, mode virtio.Mode, workers, total int) (opsPerSec, cpuPct, cpuUsPerOp float64) {
	p, err := virtio.Start(context.Background(), virtio.Options{Mode: mode})
	if err != nil {
		tb.Fatal(err)
	}
	defer p.Close(context.Background())
	sp := crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}, CipherKey: make([]byte, 16), AuthKey: make([]byte, 20)}
	d0, err := p.DeviceStats(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	c0 := selfCPU()
	per := (total + workers - 1) / workers
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				s, err := p.NewSession(sp, func([]*crypto.Request) {})
				if err != nil {
					panic(err)
				}
				if err := s.Close(context.Background()); err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	c1 := selfCPU()
	d1, err := p.DeviceStats(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	cpu := c1 - c0 + time.Duration(d1.UserNs+d1.SysNs-d0.UserNs-d0.SysNs)
	ops := float64(per * workers)
	return ops / el.Seconds(), 100 * cpu.Seconds() / el.Seconds(), float64(cpu.Microseconds()) / ops
}

// BenchmarkSessionCreateClose reports session create+close ops/s and the
// CPU of both processes (driver and device), async vs depth1-poll.
func BenchmarkSessionCreateClose(b *testing.B) {
	for _, mode := range []virtio.Mode{virtio.ModeAsync, virtio.ModeDepth1Poll} {
		name := map[virtio.Mode]string{virtio.ModeAsync: "async", virtio.ModeDepth1Poll: "depth1-poll"}[mode]
		for _, w := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, w), func(b *testing.B) {
				ops, cpu, perOp := ctrlRun(b, mode, w, max(b.N, w))
				b.ReportMetric(ops, "ops/s")
				b.ReportMetric(cpu, "cpu-%")
				b.ReportMetric(perOp, "cpu-us/op")
			})
		}
	}
}

// BenchmarkCtrlAsyncOverDepth1 measures both modes back to back with 8
// workers and reports async ÷ depth1-poll.
func BenchmarkCtrlAsyncOverDepth1(b *testing.B) {
	n := max(b.N, 2000)
	a, ac, au := ctrlRun(b, virtio.ModeAsync, 8, n)
	d, dc, du := ctrlRun(b, virtio.ModeDepth1Poll, 8, n)
	b.ReportMetric(a, "async-ops/s")
	b.ReportMetric(d, "depth1-ops/s")
	b.ReportMetric(ac, "async-cpu-%")
	b.ReportMetric(dc, "depth1-cpu-%")
	b.ReportMetric(au, "async-cpu-us/op")
	b.ReportMetric(du, "depth1-cpu-us/op")
	b.ReportMetric(a/d, "async/depth1")
}

// BenchmarkDataPath drives AES-128-GCM requests through the rings:
// submitters each keep two batches of 32 in flight. It reports MB/s,
// requests per kick and the device process's CPU.
func BenchmarkDataPath(b *testing.B) {
	for _, size := range []int{64, 1420} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			p, err := virtio.Start(context.Background(), virtio.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.Background())
			const submitters, batch, window = 2, 32, 2
			type sub struct {
				s    crypto.Session
				reqs [window][]*crypto.Request
				done chan int
			}
			subs := make([]*sub, submitters)
			for i := range subs {
				sb := &sub{done: make(chan int, window)}
				s, err := p.NewSession(crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: make([]byte, 20)}, func(rs []*crypto.Request) {
					for _, r := range rs {
						if r.Status != crypto.StatusOK {
							panic(r.Err)
						}
						if r.User != nil {
							sb.done <- r.User.(int)
						}
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				sb.s = s
				for w := range window {
					sb.reqs[w] = make([]*crypto.Request, batch)
					for k := range batch {
						sb.reqs[w][k] = &crypto.Request{Data: make([]byte, size), ICV: make([]byte, 16), IV: make([]byte, 8), AAD: make([]byte, 8)}
					}
					sb.reqs[w][batch-1].User = w // the batch's last request signals it
				}
				subs[i] = sb
			}
			batches := max(b.N/batch, window) / submitters
			st0 := p.Stats()
			d0, _ := p.DeviceStats(context.Background())
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, sb := range subs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					submit := func(w int) {
						rs := sb.reqs[w]
						for len(rs) > 0 {
							n := sb.s.Submit(rs)
							rs = rs[n:]
							if n == 0 {
								time.Sleep(20 * time.Microsecond)
							}
						}
					}
					sent := 0
					for w := range window {
						submit(w)
						sent++
					}
					for got := 0; got < batches; got++ {
						w := <-sb.done
						if sent < batches {
							submit(w)
							sent++
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			st1 := p.Stats()
			d1, _ := p.DeviceStats(context.Background())
			reqs := float64(batches * submitters * batch)
			b.ReportMetric(reqs*float64(size)/el.Seconds()/1e6, "MB/s")
			b.ReportMetric(reqs/el.Seconds(), "req/s")
			if k := st1.Kicks - st0.Kicks; k > 0 {
				b.ReportMetric(float64(st1.Published-st0.Published)/float64(k), "req/kick")
			}
			if irq := d1.Interrupts - d0.Interrupts; irq > 0 {
				b.ReportMetric(float64(d1.Requests-d0.Requests)/float64(irq), "req/irq")
			}
			b.ReportMetric(100*time.Duration(d1.UserNs+d1.SysNs-d0.UserNs-d0.SysNs).Seconds()/el.Seconds(), "dev-cpu-%")
			for _, sb := range subs {
				sb.s.Close(context.Background())
			}
		})
	}
}
