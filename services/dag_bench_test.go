package services

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// synthetic returns n nodes with up to 3 random earlier dependencies each
// and start costs between lo and hi.
func synthetic(n int, lo, hi time.Duration, seed uint64) (deps [][]int, cost []time.Duration) {
	r := rand.New(rand.NewPCG(seed, 1))
	deps = make([][]int, n)
	cost = make([]time.Duration, n)
	for i := range n {
		cost[i] = lo + time.Duration(r.Int64N(int64(hi-lo)+1))
		if i == 0 {
			continue
		}
		seen := map[int]bool{}
		for range r.IntN(4) {
			d := r.IntN(i)
			if !seen[d] {
				seen[d] = true
				deps[i] = append(deps[i], d)
			}
		}
	}
	return deps, cost
}

// criticalPath is the longest cost-weighted path through the DAG.
func criticalPath(deps [][]int, cost []time.Duration) time.Duration {
	fin := make([]time.Duration, len(deps))
	var best time.Duration
	for i := range deps { // deps only point backwards
		var start time.Duration
		for _, d := range deps[i] {
			start = max(start, fin[d])
		}
		fin[i] = start + cost[i]
		best = max(best, fin[i])
	}
	return best
}

func TestRunDAGOrderAndBlocking(t *testing.T) {
	deps, _ := synthetic(300, 0, 0, 7)
	fail := 17
	var mu = make(chan struct{}, 1)
	order := map[int]int{}
	n := 0
	outs := RunDAG(context.Background(), deps, allHard, func(ctx context.Context, i int) error {
		mu <- struct{}{}
		order[i] = n
		n++
		<-mu
		if i == fail {
			return fmt.Errorf("boom")
		}
		return nil
	}, nil)
	for i, o := range outs {
		if o.Ran() {
			for _, d := range deps[i] {
				if order[d] >= order[i] {
					t.Fatalf("%d ran before its dependency %d", i, d)
				}
			}
		}
	}
	// Every transitive dependent of fail is blocked with root cause fail.
	blocked := map[int]bool{fail: true}
	for i := range deps {
		for _, d := range deps[i] {
			if blocked[d] && i != fail {
				blocked[i] = true
			}
		}
	}
	for i := range deps {
		switch {
		case i == fail:
			if outs[i].Err == nil || outs[i].BlockedBy != -1 {
				t.Errorf("fail node: %+v", outs[i])
			}
		case blocked[i]:
			if outs[i].Ran() || outs[i].BlockedBy < 0 {
				t.Errorf("%d should be blocked: %+v", i, outs[i])
			}
		default:
			if !outs[i].Ran() || outs[i].Err != nil {
				t.Errorf("%d should have run: %+v", i, outs[i])
			}
		}
	}
	if got := BreakCycles([][]int{{1}, {0}, {}}); len(got) != 2 {
		t.Errorf("BreakCycles = %v", got)
	}
}

// BenchmarkBoot500 schedules a 500-service random DAG whose services
// sleep (10-50 ms, the scale of real service starts, and 1-5 ms, where
// timer overshoot dominates) and reports wall time ÷ critical-path length
// (target <= 1.05). The critical path is computed from the nominal sleep
// times, so timer overshoot counts against the scheduler.
func BenchmarkBoot500(b *testing.B) {
	for _, tc := range []struct {
		name   string
		lo, hi time.Duration
	}{{"sleep10-50ms", 10 * time.Millisecond, 50 * time.Millisecond}, {"sleep1-5ms", time.Millisecond, 5 * time.Millisecond}} {
		b.Run(tc.name, func(b *testing.B) {
			deps, cost := synthetic(500, tc.lo, tc.hi, 42)
			cp := criticalPath(deps, cost)
			var ratios []float64
			for b.Loop() {
				t0 := time.Now()
				RunDAG(context.Background(), deps, allHard, func(ctx context.Context, i int) error {
					time.Sleep(cost[i])
					return nil
				}, nil)
				ratios = append(ratios, float64(time.Since(t0))/float64(cp))
			}
			b.ReportMetric(median(ratios), "wall/critical")
			b.ReportMetric(float64(cp.Microseconds())/1000, "critical-ms")
		})
	}
}

// BenchmarkSchedOverhead500 runs the same DAG with no work: the time per
// service is the scheduler's own overhead.
func BenchmarkSchedOverhead500(b *testing.B) {
	deps, _ := synthetic(500, 0, 0, 42)
	for b.Loop() {
		RunDAG(context.Background(), deps, allHard, func(ctx context.Context, i int) error { return nil }, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/500, "ns/service")
}

type sleepBuiltin struct{ d time.Duration }

func (s sleepBuiltin) Settings(BuiltinEnv) map[string]string { return nil }
func (s sleepBuiltin) Start(ctx context.Context, env BuiltinEnv) error {
	if s.d > 0 {
		time.Sleep(s.d)
	}
	return nil
}
func (s sleepBuiltin) Stop(context.Context) error { return nil }
func (s sleepBuiltin) Status() string             { return "" }

// syntheticRoot writes the DAG as 500 rc.d files with rcorder headers and
// type=builtin services.
func syntheticRoot(deps [][]int, cost []time.Duration) (fstest.MapFS, map[string]Builtin) {
	fsys := fstest.MapFS{}
	bs := map[string]Builtin{}
	for i := range deps {
		name := fmt.Sprintf("s%03d", i)
		var req []string
		for _, d := range deps[i] {
			req = append(req, fmt.Sprintf("s%03d", d))
		}
		body := "# PROVIDE: " + name + "\n"
		if len(req) > 0 {
			body += "# REQUIRE: " + strings.Join(req, " ") + "\n"
		}
		body += "\nname=" + name + "\ntype=builtin\n"
		fsys["etc/rc.d/"+name] = &fstest.MapFile{Data: []byte(body)}
		bs[name] = sleepBuiltin{cost[i]}
	}
	return fsys, bs
}

// BenchmarkManagerBoot500 boots the synthetic tree through the whole
// Manager (rc.d parsing, rcorder, units, state) and reports wall ÷
// critical path and the per-service overhead of a zero-cost boot.
func BenchmarkManagerBoot500(b *testing.B) {
	for _, tc := range []struct {
		name   string
		lo, hi time.Duration
	}{{"sleep10-50ms", 10 * time.Millisecond, 50 * time.Millisecond}, {"sleep1-5ms", time.Millisecond, 5 * time.Millisecond}, {"noop", 0, 0}} {
		b.Run(tc.name, func(b *testing.B) {
			deps, cost := synthetic(500, tc.lo, tc.hi, 42)
			cp := criticalPath(deps, cost)
			fsys, bs := syntheticRoot(deps, cost)
			var ratios, per []float64
			for b.Loop() {
				m, err := New(Options{Root: fsys, Builtins: bs, NoNotify: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if err := m.Boot(context.Background()); err != nil {
					b.Fatal(err)
				}
				el := time.Since(t0)
				if cp > 0 {
					ratios = append(ratios, float64(el)/float64(cp))
				} else {
					per = append(per, float64(el.Nanoseconds())/500)
				}
			}
			if cp > 0 {
				b.ReportMetric(median(ratios), "wall/critical")
			} else {
				b.ReportMetric(median(per), "ns/service")
			}
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// allHard makes every edge a hard one (the blocking semantics).
func allHard(i, d int) bool { return true }
