package rcorder

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

// cpuTime returns the CPU time this process has used. On the shared,
// overloaded CI machine wall-clock ns/op mostly measures waiting for a
// core, so the benchmarks also report "cpu-ns/op".
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs body b.N times and reports CPU time per iteration too.
func loop(b *testing.B, body func()) {
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	n := 0
	for b.Loop() {
		body()
		n++
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(n), "cpu-ns/op")
}

// genTree generates n rc.d scripts with about reqs requirements each, all
// on earlier scripts (so the tree is acyclic, as a real one should be),
// some shared provisions, BEFORE lines and keywords, and a shell body.
func genTree(n, reqs int) map[string][]byte {
	rng := rand.New(rand.NewPCG(42, uint64(n)))
	files := make(map[string][]byte, n)
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		b.Reset()
		fmt.Fprintf(&b, "#!/bin/sh\n#\n# generated script %d\n#\n\n# PROVIDE: s%d", i, i)
		if i%50 == 0 {
			fmt.Fprintf(&b, " group%d", i/500)
		}
		b.WriteByte('\n')
		if i > 0 {
			b.WriteString("# REQUIRE:")
			for k := 0; k < reqs; k++ {
				fmt.Fprintf(&b, " s%d", rng.IntN(i))
			}
			b.WriteByte('\n')
		}
		if i%97 == 0 && i+1 < n {
			fmt.Fprintf(&b, "# BEFORE: s%d\n", i+1+rng.IntN(n-i-1))
		}
		if i%13 == 0 {
			b.WriteString("# KEYWORD: nojail shutdown\n")
		}
		fmt.Fprintf(&b, "\n. /etc/rc.subr\n\nname=\"s%d\"\nrcvar=\"s%d_enable\"\ncommand=\"/usr/sbin/s%d\"\n\nload_rc_config $name\nrun_rc_command \"$1\"\n", i, i, i)
		files[fmt.Sprintf("rc.d/s%05d", i)] = bytes.Clone(b.Bytes())
	}
	return files
}

func genFS(n, reqs int) (fstest.MapFS, []string) {
	fsys := fstest.MapFS{}
	var names []string
	for name, data := range genTree(n, reqs) {
		fsys[name] = &fstest.MapFile{Data: data}
		names = append(names, name)
	}
	slicesSort(names)
	return fsys, names
}

func slicesSort(s []string) { slices.Sort(s) }

func TestGeneratedTreeIsValid(t *testing.T) {
	fsys, names := genFS(2000, 3)
	scripts, errs := Parse(fsys, names...)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	r := Order(scripts, Filter{})
	checkValid(t, r)
	if r.ExitCode() != 0 {
		t.Fatalf("problems: %q", problemTexts(r)[:1])
	}
}

// BenchmarkParseOrder10k: 10,000 generated files with 3 requirements each,
// parsed from an in-memory fs.FS and ordered, per iteration.
func BenchmarkParseOrder10k(b *testing.B) {
	fsys, names := genFS(10000, 3)
	loop(b, func() {
		scripts, errs := Parse(fsys, names...)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		if r := Order(scripts, Filter{}); r.ExitCode() != 0 {
			b.Fatal("unexpected problems")
		}
	})
}

// BenchmarkParse10k and BenchmarkOrder10k split the figure above.
func BenchmarkParse10k(b *testing.B) {
	fsys, names := genFS(10000, 3)
	loop(b, func() { Parse(fsys, names...) })
}

func BenchmarkOrder10k(b *testing.B) {
	fsys, names := genFS(10000, 3)
	scripts, _ := Parse(fsys, names...)
	loop(b, func() { Order(scripts, Filter{}) })
}

// BenchmarkParseFilesOrder10k reads the same tree from real files
// (t.TempDir, usually tmpfs or the page cache): syscalls included.
func BenchmarkParseFilesOrder10k(b *testing.B) {
	dir := b.TempDir()
	var paths []string
	for name, data := range genTree(10000, 3) {
		p := filepath.Join(dir, filepath.Base(name))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		paths = append(paths, p)
	}
	slicesSort(paths)
	loop(b, func() {
		scripts, _ := ParseFiles(paths...)
		Order(scripts, Filter{})
	})
}

// cyclicTree is n scripts with three requirements each on random scripts
// (earlier or later), which makes one giant cycle: the worst case for
// cycle reporting.
func cyclicTree(n int) []Script {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	scripts := make([]Script, n)
	for i := range scripts {
		s := &scripts[i]
		s.Path = fmt.Sprintf("rc.d/s%05d", i)
		s.Provides, s.ProvideLines = []string{fmt.Sprintf("s%d", i)}, []int{2}
		for k := 0; k < 3; k++ {
			s.Requires = append(s.Requires, fmt.Sprintf("s%d", rng.IntN(n)))
			s.RequireLines = append(s.RequireLines, 3+k)
		}
	}
	return scripts
}

func TestGiantCycle(t *testing.T) {
	r := Order(cyclicTree(2000), Filter{})
	checkValid(t, r)
	if r.ExitCode() != 1 {
		t.Fatal("want exit 1")
	}
	n := 0
	for _, p := range r.Problems {
		if p.Kind == Cycle {
			n++
		}
	}
	if n == 0 || n > maxCoverCycles+50 {
		t.Fatalf("%d cycles reported", n)
	}
}

// BenchmarkOrderCyclic10k orders 10,000 scripts forming one giant cycle.
func BenchmarkOrderCyclic10k(b *testing.B) {
	scripts := cyclicTree(10000)
	loop(b, func() { Order(scripts, Filter{}) })
}
