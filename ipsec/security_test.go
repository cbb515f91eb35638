package ipsec

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
)

// keyRecorder wraps a provider and remembers the key slices handed to
// NewSession whose bytes are one of the watched keys. Through the
// framework those slices are the Binding's own key copy, so they show
// whether the binding wiped its keys when the SA went away.
type keyRecorder struct {
	crypto.Provider
	mu    sync.Mutex
	watch [][]byte
	seen  [][]byte
}

func (r *keyRecorder) Info() crypto.ProviderInfo {
	i := r.Provider.Info()
	i.Name = "keyrec"
	return i
}

func (r *keyRecorder) NewSession(sp crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	r.mu.Lock()
	for _, k := range [][]byte{sp.CipherKey, sp.AuthKey} {
		for _, w := range r.watch {
			if len(k) > 0 && bytes.Equal(k, w) {
				r.seen = append(r.seen, k)
			}
		}
	}
	r.mu.Unlock()
	return r.Provider.NewSession(sp, done)
}

// unwiped returns how many recorded key slices still hold non-zero bytes.
func (r *keyRecorder) unwiped() (n, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.seen {
		if !bytes.Equal(k, make([]byte, len(k))) {
			n++
		}
	}
	return n, len(r.seen)
}

const (
	secGCMKey = "5ec2e75ec2e75ec2e75ec2e75ec2e75e0badf00d"
	secCBCKey = "c0c0c0c0c0c0c0c05ec2e75ec2e75ec2"
	secSHAKey = "a17ba17ba17ba17ba17ba17ba17ba17ba17ba17b"
)

var secConf = `flush;
spdflush;
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-gcm-16 0x` + secGCMKey + `;
add 192.0.2.2 192.0.2.1 esp 0x1002 -m tunnel -E aes-cbc 0x` + secCBCKey + ` -A hmac-sha1 0x` + secSHAKey + `;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.2.0/24 192.168.1.0/24 any -P in ipsec esp/tunnel/192.0.2.2-192.0.2.1/require;
`

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// TestKeysWipedWhenSAGoes: whichever way an SA leaves the SAD (delete,
// flush, re-key, engine Close) or fails to enter it (a rejected Apply that
// had already bound it), the key copy its crypto binding held is zeroed,
// and no key appears in the status or in Apply's errors. (The standard
// library's internal AES and HMAC states cannot be wiped; Keel wipes
// every copy it owns.)
func TestKeysWipedWhenSAGoes(t *testing.T) {
	tests := []struct {
		name   string
		then   string // applied after secConf; "" closes the engine instead
		failed bool   // then is rejected
	}{
		{"delete", "delete 192.0.2.1 192.0.2.2 esp 0x1001;\ndelete 192.0.2.2 192.0.2.1 esp 0x1002;", false},
		{"flush", "flush;", false},
		// The new keys differ in their first byte, so only the old SAs'
		// key copies are watched.
		{"rekey", strings.NewReplacer(secGCMKey, "00"+secGCMKey[2:], secCBCKey, "00"+secCBCKey[2:], secSHAKey, "00"+secSHAKey[2:]).Replace(secConf), false},
		{"close", "", false},
		{"rejected apply", "flush;\nadd 192.0.2.1 192.0.2.9 esp 0x3001 -E aes-gcm-16 0x" + secGCMKey + ";\ndelete 192.0.2.7 192.0.2.8 esp 0x7777;", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &keyRecorder{Provider: aesni.New(), watch: [][]byte{mustHex(secGCMKey), mustHex(secCBCKey), mustHex(secSHAKey)}}
			fw := crypto.New(crypto.Options{CalibrationBudget: 5 * time.Millisecond})
			t.Cleanup(func() { _ = fw.Close(testwait.Context(t)) })
			if err := fw.Register(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
			e := NewEngine(fw, Options{})
			t.Cleanup(func() { _ = e.Close(testwait.Context(t)) })
			applyText(t, e, secConf)
			if _, total := rec.unwiped(); total < 3 {
				t.Fatalf("recorded %d key slices, want the SAs' 3 keys", total)
			}
			pool := NewPool(0)
			sendOne(t, e, pool)
			for _, st := range e.SAs() {
				s := fmt.Sprintf("%+v %#v", st, st)
				for _, k := range []string{secGCMKey, secCBCKey, secSHAKey} {
					if strings.Contains(strings.ToLower(s), k[:12]) {
						t.Errorf("SA status shows key material: %s", s)
					}
				}
			}
			if tt.failed {
				cfg := parse(t, tt.then)
				err := e.Apply(context.Background(), cfg)
				if err == nil {
					t.Fatal("Apply accepted")
				}
				if strings.Contains(err.Error(), secGCMKey[:12]) {
					t.Errorf("Apply error shows key material: %v", err)
				}
				// The installed SAs keep their (live) keys: only the
				// rejected configuration's binding must be wiped.
				n, total := rec.unwiped()
				if n != 3 {
					t.Errorf("%d of %d recorded key slices unwiped, want the 3 installed SAs'", n, total)
				}
				return
			}
			if tt.then == "" {
				if err := e.Close(testwait.Context(t)); err != nil {
					t.Fatal(err)
				}
			} else {
				applyText(t, e, tt.then)
			}
			// Removed SAs' bindings close once in-flight work drains.
			deadline := time.Now().Add(5 * time.Second)
			for {
				n, total := rec.unwiped()
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d key copies not wiped after %s", n, total, tt.name)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestSequenceUniqueAcrossReapplyUnderLoad: outbound sequence numbers (the
// AEAD nonces) stay unique while several goroutines send and the same
// configuration is re-applied concurrently (the reload path keeps the
// installed SA and its counter).
func TestSequenceUniqueAcrossReapplyUnderLoad(t *testing.T) {
	e := newTestEngine(t, Options{})
	applyText(t, e, secConf)
	const workers, per = 4, 300
	seqs := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool := NewPool(0)
			for range per {
				p := packetOf(t, pool, udpPacket(innerA, innerB, 1, 2, []byte("x")))
				e.Outbound([]*Packet{p})
				if p.Verdict == VerdictForward && p.SPI == 0x1001 {
					seqs[w] = append(seqs[w], p.Seq)
				}
				p.Release()
			}
		}()
	}
	for range 20 {
		applyText(t, e, secConf)
	}
	testwait.Wait(t, testwait.Long, "traffic workers done", &wg)
	seen := map[uint64]bool{}
	n := 0
	for _, s := range seqs {
		for _, q := range s {
			if seen[q] {
				t.Fatalf("sequence number (nonce) %d used twice", q)
			}
			seen[q] = true
			n++
		}
	}
	if n != workers*per {
		t.Fatalf("%d packets encrypted, want %d", n, workers*per)
	}
}
