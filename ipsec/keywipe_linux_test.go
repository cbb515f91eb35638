package ipsec

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/keelinit/keel/internal/memscan"
	"github.com/keelinit/keel/ipsec/setkey"
)

// keyMask masks the test's copy of the key (see memscan.Mask).
const keyMask = 0xa5

// TestKeyMaterialWiped: after an AEAD SA is deleted and its engine closed,
// and a GC, no copy of its key and salt (a distinctive random 20 bytes) is
// left anywhere in the process's writable memory: not in the SA, the SA
// fingerprint, the nonce ledger's key id, the crypto session, the setkey
// configuration or a freed object. (The AES key schedule that crypto/aes
// expands from the 16-byte key is the stdlib's and cannot be wiped: see
// docs/nonce-ledger.md; the scan looks for key and salt together, which
// only Keel's own copies hold.)
//
// The garbage collector is held off while the key is live: a GC that
// shrinks a goroutine's stack copies its live frames to a new stack and
// frees the old one without clearing it, so a key held in a frame at
// that moment survives in freed stack memory. That copy is the runtime's
// (docs/key-material.md), it depends on GC timing (CI saw it once in
// dozens of runs), and Keel cannot reach it; with GC off during the
// keyed work the scan sees Keel's own copies only, deterministically.
func TestKeyMaterialWiped(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	key := make([]byte, 20)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	conf := make([]byte, 0, 4096) // big enough never to grow (no stale copies)
	conf = append(conf, "add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-gcm-16 0x"...)
	conf = hex.AppendEncode(conf, key)
	conf = append(conf, ";\nspdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;\n"...)
	masked := memscan.Mask(key, keyMask) // clears key
	ledger, err := OpenNonceLedger(t.TempDir()+"/esp-nonces", LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(testFramework(t), Options{NonceLedger: ledger})
	cfg, err := setkey.Parse("wipe.conf", bytes.NewReader(conf))
	clear(conf)
	if err != nil {
		t.Fatal(err)
	}
	if n := memscan.Count(t, masked, keyMask); n == 0 {
		t.Fatal("the scan does not find the key in the parsed configuration: it cannot see anything")
	}
	if err := e.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Zero()
	pool := NewPool(0)
	if p := sendOne(t, e, pool); p.Verdict != VerdictForward {
		t.Fatalf("send: %v %v", p.Verdict, p.Drop)
	}
	if err := e.Apply(context.Background(), parse(t, "delete 192.0.2.1 192.0.2.2 esp 0x1001;")); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	debug.SetGCPercent(100)
	runtime.GC()
	runtime.GC()
	if n := memscan.Count(t, masked, keyMask); n != 0 {
		t.Errorf("%d copies of the deleted SA's key and salt left in memory", n)
	}
}
