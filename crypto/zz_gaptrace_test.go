//go:build gaptrace

package crypto_test

// Scratch diagnosis of the Rebind1000 end-to-end gap (build tag gaptrace;
// not part of the normal build).

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/trace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

func TestGapTrace(t *testing.T) {
	const n, rounds = 1000, 15
	if d, err := time.ParseDuration(os.Getenv("SLICE")); err == nil {
		crypto.SetMigrateSlice(d)
	}
	fw := newFW(t, crypto.Options{Hysteresis: 1e9})
	newB := func() crypto.Provider {
		return cpuprov.New(crypto.ProviderInfo{Name: "aesni-b", Kind: crypto.KindAccelerated, Priority: aesni.Priority}, stdPrims)
	}
	mustRegister(t, fw, aesni.New())
	binds := make([]*crypto.Binding, n)
	for i := range binds {
		bd, err := fw.Bind(testKeys(algGCM128, byte(i)), func(rs []*crypto.Request) {})
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
	f, _ := os.Create(os.Getenv("TRACE_OUT"))
	defer f.Close()
	trace.Start(f)
	defer trace.Stop()
	var stopped, inWin atomic.Bool
	done := make(chan struct{})
	ctx := context.Background()
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fd, err := os.Open("/proc/thread-self/schedstat")
		if err != nil {
			panic(err)
		}
		buf := make([]byte, 128)
		rd := func() (run, wait int64) {
			n, _ := fd.ReadAt(buf, 0)
			fmt.Sscan(string(buf[:n]), &run, &wait)
			return
		}
		_, lastWait := rd()
		one := make([]*crypto.Request, 1)
		var seq uint64
		last := time.Now()
		for i := 0; !stopped.Load(); i = (i + 1) % n {
			if i == 0 {
				seq++
			}
			binary.BigEndian.PutUint64(reqs[i].IV, seq)
			one[0] = reqs[i]
			t0 := time.Now()
			if binds[i].Submit(one) != 1 {
				continue
			}
			now := time.Now()
			_, w := rd()
			if g := now.Sub(last); g > 300*time.Microsecond && inWin.Load() {
				msg := fmt.Sprintf("gap=%v submit=%v bind=%d os-runqueue-wait=%v", g, now.Sub(t0), i, time.Duration(w-lastWait))
				trace.Log(ctx, "gap", msg)
				fmt.Println(msg)
			}
			last, lastWait = now, w
		}
	}()
	cur := aesni.Name
	for r := range rounds {
		time.Sleep(5 * time.Millisecond)
		trace.Log(ctx, "round", fmt.Sprint("start ", r))
		inWin.Store(true)
		t0 := time.Now()
		if err := fw.Deregister(ctx, cur); err != nil {
			t.Error(err)
		}
		inWin.Store(false)
		trace.Log(ctx, "round", fmt.Sprint("end ", r, " ", time.Since(t0)))
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
	for _, bd := range binds {
		bd.Close(ctx)
	}
}
