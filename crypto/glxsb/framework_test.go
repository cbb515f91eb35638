package glxsb_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/glxsb"
	"github.com/keelinit/keel/modules"
)

var alg = crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}

func quietFW(o crypto.Options) *crypto.Framework {
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return crypto.New(o)
}

func TestFrameworkAdmitsAndShowsModel(t *testing.T) {
	fw := quietFW(crypto.Options{})
	defer fw.Close(context.Background())
	p, err := glxsb.New(glxsb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatalf("register: %v", err)
	}
	var found bool
	for _, ps := range fw.Providers() {
		if ps.Name != "glxsb" {
			continue
		}
		found = true
		if !ps.Emulated || ps.Kind != crypto.KindHardware || ps.State != crypto.StateOK || !ps.SelfTest.Passed {
			t.Fatalf("status %+v", ps)
		}
		if ps.Params["throughput_mbps"] != "45" || ps.Params["setup_latency_us"] != "20" {
			t.Fatalf("params %v", ps.Params)
		}
		if len(ps.Throughput) == 0 || ps.Throughput[0].BytesPerSec <= 0 {
			t.Fatalf("no calibration: %+v", ps.Throughput)
		}
		// The modelled device is far below 45 MB/s at 64 bytes and never
		// above it (plus the calibration's own noise).
		for _, tp := range ps.Throughput {
			if tp.BytesPerSec > 60e6 {
				t.Fatalf("calibrated %v B/s at %d: faster than the model", tp.BytesPerSec, tp.Size)
			}
		}
	}
	if !found {
		t.Fatal("glxsb not in Providers()")
	}
}

func TestModuleLoadUnload(t *testing.T) {
	fw := quietFW(crypto.Options{})
	defer fw.Close(context.Background())
	ctx := crypto.NewContext(context.Background(), fw)
	l := modules.NewLoader()
	if err := l.Load(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("load: %v", err)
	}
	if fw.Best(alg) != glxsb.ModuleName {
		t.Fatalf("best provider %q", fw.Best(alg))
	}
	if err := l.Unload(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("unload: %v", err)
	}
	for _, ps := range fw.Providers() {
		if ps.Name == glxsb.ModuleName {
			t.Fatalf("still listed after unload: %v", ps.State)
		}
	}
	// It can be loaded again (hot-plug).
	if err := l.Load(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if err := l.Unload(ctx, glxsb.ModuleName); err != nil {
		t.Fatalf("unload: %v", err)
	}
}

type tracked struct {
	req  *crypto.Request
	pt   []byte
	seq  uint64
	done bool
}

// TestFrameworkFailover runs traffic on bindings served by glxsb, injects
// a device fault mid-traffic, and checks that every request completes
// exactly once, in order per binding, correctly, on aesni.
func TestFrameworkFailover(t *testing.T) {
	if !aesni.Supported() {
		t.Skip("aesni not supported on this CPU")
	}
	for _, f := range []glxsb.Fault{glxsb.FaultError, glxsb.FaultHang, glxsb.FaultVanish} {
		t.Run(f.String(), func(t *testing.T) {
			// A huge hysteresis keeps the bindings on glxsb when aesni
			// arrives, until glxsb faults.
			fw := quietFW(crypto.Options{Hysteresis: 1e6, RequestTimeout: 2 * time.Second, CloseTimeout: 2 * time.Second})
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				fw.Close(ctx)
			}()
			p, err := glxsb.New(glxsb.Options{OpTimeout: 2 * time.Second, OnFault: func(err error) { fw.ReportFault("glxsb", err) }})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			if err := fw.Register(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			const nb, per = 4, 300
			key, akey := make([]byte, 16), make([]byte, 20)
			rand.Read(key)
			rand.Read(akey)
			blk, _ := aes.NewCipher(key)

			var mu sync.Mutex
			var failures []string
			fail := func(s string) {
				mu.Lock()
				failures = append(failures, s)
				mu.Unlock()
			}
			gate := make(chan struct{})
			var wg sync.WaitGroup
			var started sync.WaitGroup
			started.Add(nb)
			for range nb {
				recs := make([]*tracked, per)
				var next int
				var cmu sync.Mutex
				doneCh := make(chan struct{})
				b, err := fw.Bind(crypto.SessionParams{Alg: alg, CipherKey: key, AuthKey: akey}, func(done []*crypto.Request) {
					cmu.Lock()
					defer cmu.Unlock()
					for _, r := range done {
						tr := r.User.(*tracked)
						if tr.done {
							fail("completed twice")
						}
						tr.done = true
						if int(tr.seq) != next {
							fail("out of order")
						}
						next++
						if next == per {
							close(doneCh)
						}
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if b.Provider() != "glxsb" {
					t.Fatalf("bound to %q", b.Provider())
				}
				for i := range recs {
					pt := make([]byte, 256)
					rand.Read(pt)
					iv := make([]byte, 16)
					binary.BigEndian.PutUint64(iv, uint64(i))
					tr := &tracked{pt: pt, seq: uint64(i)}
					tr.req = &crypto.Request{Dir: crypto.Encrypt, Data: append([]byte(nil), pt...), ICV: make([]byte, 12), IV: iv, AAD: []byte("spi+seq!"), User: tr}
					recs[i] = tr
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gate
					for i, tr := range recs {
						if i == per/8 {
							started.Done()
						}
						deadline := time.Now().Add(30 * time.Second)
						for b.Submit([]*crypto.Request{tr.req}) == 0 {
							if time.Now().After(deadline) {
								fail("backpressure never released")
								return
							}
							time.Sleep(50 * time.Microsecond)
						}
					}
					select {
					case <-doneCh:
					case <-time.After(30 * time.Second):
						fail("not all requests completed")
						return
					}
					for _, tr := range recs {
						r := tr.req
						if r.Status != crypto.StatusOK {
							fail("status " + r.Status.String())
							continue
						}
						want := make([]byte, len(tr.pt))
						cipher.NewCBCEncrypter(blk, r.IV).CryptBlocks(want, tr.pt)
						m := hmac.New(sha1.New, akey)
						m.Write(r.AAD)
						m.Write(r.IV)
						m.Write(want)
						if !bytes.Equal(r.Data, want) || !bytes.Equal(r.ICV, m.Sum(nil)[:12]) {
							fail("wrong output")
						}
					}
					// The move itself runs in the background.
					for deadline := time.Now().Add(10 * time.Second); b.Provider() != "aesni"; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							fail("binding not moved to aesni: " + b.Provider())
							break
						}
					}
					b.Close(context.Background())
				}()
			}
			// aesni arrives after the bindings were made; the hysteresis
			// keeps them on glxsb. Then traffic starts.
			if err := fw.Register(context.Background(), aesni.New()); err != nil {
				t.Fatal(err)
			}
			close(gate)
			started.Wait()
			p.InjectFault(f)
			wg.Wait()
			if p.Stats().Failed == 0 {
				t.Error("the fault hit no request: traffic ended before it")
			}
			if len(failures) > 0 {
				for _, ps := range fw.Providers() {
					t.Logf("%s: state %v faults %d last %q sessions %d", ps.Name, ps.State, ps.Faults, ps.LastFault, ps.Sessions)
				}
				t.Logf("glxsb stats %+v", p.Stats())
				t.Fatalf("%d failures, first: %s", len(failures), failures[0])
			}
		})
	}
}
