//go:build gaptrace

package crypto_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

func TestGapAB(t *testing.T) {
	const n = 1000
	rounds := 60
	variants := []time.Duration{time.Hour, 250 * time.Microsecond}
	fw := newFW(t, crypto.Options{Hysteresis: 1e9})
	newB := func() crypto.Provider {
		return cpuprov.New(crypto.ProviderInfo{Name: "aesni-b", Kind: crypto.KindAccelerated, Priority: aesni.Priority}, stdPrims)
	}
	mustRegister(t, fw, aesni.New())
	var (
		mu     sync.Mutex
		window bool
		maxGap time.Duration
		last   time.Time
	)
	onDone := func(rs []*crypto.Request) {
		now := time.Now()
		mu.Lock()
		if window && now.Sub(last) > maxGap {
			maxGap = now.Sub(last)
		}
		last = now
		mu.Unlock()
	}
	binds := make([]*crypto.Binding, n)
	for i := range binds {
		bd, err := fw.Bind(testKeys(algGCM128, byte(i)), onDone)
		if err != nil {
			t.Fatal(err)
		}
		binds[i] = bd
	}
	mustRegister(t, fw, newB())
	reqs := make([]*crypto.Request, n)
	for i := range reqs {
		buf := make([]byte, 64+16)
		reqs[i] = &crypto.Request{Dir: crypto.Encrypt, Data: buf[:64:80], ICV: buf[64:], AAD: make([]byte, 8), IV: make([]byte, 8)}
	}
	var stopped atomic.Bool
	var osWait atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fd, _ := os.Open("/proc/thread-self/schedstat")
		buf := make([]byte, 128)
		rd := func() (wait int64) {
			var run int64
			n, _ := fd.ReadAt(buf, 0)
			fmt.Sscan(string(buf[:n]), &run, &wait)
			return
		}
		lw := rd()
		one := make([]*crypto.Request, 1)
		var seq uint64
		for i := 0; !stopped.Load(); i = (i + 1) % n {
			if i == 0 {
				seq++
			}
			binary.BigEndian.PutUint64(reqs[i].IV, seq)
			one[0] = reqs[i]
			binds[i].Submit(one)
			if i%8 == 0 {
				w := rd()
				osWait.Add(w - lw)
				lw = w
			}
		}
	}()
	measure := func(f func()) (d, g, ow time.Duration) {
		w0 := osWait.Load()
		t0 := time.Now()
		mu.Lock()
		window, maxGap, last = true, 0, t0
		mu.Unlock()
		f()
		end := time.Now()
		mu.Lock()
		window = false
		g = max(maxGap, end.Sub(last))
		mu.Unlock()
		return end.Sub(t0), g, time.Duration(osWait.Load() - w0)
	}
	type res struct{ mig, gap, floor, ow, owFloor []time.Duration }
	results := make([]res, len(variants))
	cur := aesni.Name
	for r := range rounds * len(variants) {
		v := r % len(variants)
		crypto.SetMigrateSlice(variants[v])
		time.Sleep(5 * time.Millisecond)
		m, g, ow := measure(func() {
			if err := fw.Deregister(context.Background(), cur); err != nil {
				t.Error(err)
			}
		})
		_, fl, owf := measure(func() { time.Sleep(m) })
		rs := &results[v]
		rs.mig, rs.gap, rs.floor, rs.ow, rs.owFloor = append(rs.mig, m), append(rs.gap, g), append(rs.floor, fl), append(rs.ow, ow), append(rs.owFloor, owf)
		if cur == aesni.Name {
			mustRegister(t, fw, aesni.New())
			cur = "aesni-b"
		} else {
			mustRegister(t, fw, newB())
			cur = aesni.Name
		}
	}
	stopped.Store(true)
	<-done
	q := func(d []time.Duration) string {
		d = slices.Clone(d)
		slices.Sort(d)
		return fmt.Sprintf("p50 %7.3f p90 %7.3f max %7.3f", d[len(d)/2].Seconds()*1e3, d[len(d)*9/10].Seconds()*1e3, d[len(d)-1].Seconds()*1e3)
	}
	for v, rs := range results {
		fmt.Printf("slice=%-8v migrate[%s]\n          gap    [%s]\n          floor  [%s]\n          oswait [%s]\n          owfloor[%s]\n", variants[v], q(rs.mig), q(rs.gap), q(rs.floor), q(rs.ow), q(rs.owFloor))
	}
	for _, bd := range binds {
		bd.Close(context.Background())
	}
}
