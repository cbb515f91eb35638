package ipsec

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/keelinit/keel/ipsec/setkey"
)

// keyMask is XORed into the test's copy of the key, so that the scan's
// needle is not itself a copy of the key.
const keyMask = 0xa5

// scanMemory counts the places in the process's writable memory (heap,
// stacks, anonymous mappings, data segments) that hold the bytes of
// masked XOR keyMask. It reads /proc/self/mem into a buffer mapped outside
// the Go heap (skipped by the scan) and builds the needle byte by byte in
// registers, never in memory.
func scanMemory(t *testing.T, masked []byte) (hits int) {
	t.Helper()
	const chunk = 1 << 20
	buf, err := syscall.Mmap(-1, 0, chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	self := uintptr(0)
	if len(buf) > 0 {
		self = uintptr(unsafeAddr(buf))
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	first := masked[0] ^ keyMask
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasPrefix(f[1], "rw") || (len(f) > 5 && strings.HasPrefix(f[5], "[v")) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || uintptr(start) == self {
			continue
		}
		for off := start; off < end; {
			n := min(uint64(chunk), end-off)
			got, err := mem.ReadAt(buf[:n], int64(off))
			if got == 0 && err != nil {
				break // unreadable (guard pages)
			}
			b := buf[:got]
			for i := 0; ; {
				j := bytes.IndexByte(b[i:], first)
				if j < 0 {
					break
				}
				i += j
				if i+len(masked) > len(b) {
					break
				}
				match := true
				for k := 1; k < len(masked); k++ {
					if b[i+k] != masked[k]^keyMask {
						match = false
						break
					}
				}
				if match {
					hits++
				}
				i++
			}
			if uint64(got) < n {
				break
			}
			// Overlap the chunks by the needle's length.
			off += n - uint64(len(masked)) + 1
			if n < uint64(chunk) {
				break
			}
		}
	}
	clear(buf)
	return hits
}

// TestKeyMaterialWiped: after an AEAD SA is deleted and its engine closed,
// and a GC, no copy of its key and salt (a distinctive random 20 bytes) is
// left anywhere in the process's writable memory: not in the SA, the SA
// fingerprint, the nonce ledger's key id, the crypto session, the setkey
// configuration or a freed object. (The AES key schedule that crypto/aes
// expands from the 16-byte key is the stdlib's and cannot be wiped: see
// docs/nonce-ledger.md; the scan looks for key and salt together, which
// only Keel's own copies hold.)
func TestKeyMaterialWiped(t *testing.T) {
	key := make([]byte, 20)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	masked := make([]byte, len(key))
	for i := range key {
		masked[i] = key[i] ^ keyMask
	}
	conf := make([]byte, 0, 4096) // big enough never to grow (no stale copies)
	conf = append(conf, "add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-gcm-16 0x"...)
	conf = hex.AppendEncode(conf, key)
	conf = append(conf, ";\nspdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;\n"...)
	clear(key)
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
	if n := scanMemory(t, masked); n == 0 {
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
	runtime.GC()
	runtime.GC()
	if n := scanMemory(t, masked); n != 0 {
		t.Errorf("%d copies of the deleted SA's key and salt left in memory", n)
	}
}

// TestKeyedSumWipes: keyedSum leaves no copy of a message part behind in
// its pooled digest or on the stack, even when the part's tail is longer
// than what the outer hash overwrites (60 bytes: the last partial block
// of the inner hash keeps 28 bytes past the outer hash's 32).
func TestKeyedSumWipes(t *testing.T) {
	part := make([]byte, 60)
	if _, err := crand.Read(part); err != nil {
		t.Fatal(err)
	}
	masked := make([]byte, 20)
	for i := range masked {
		masked[i] = part[40+i] ^ keyMask
	}
	var key [32]byte
	sum := keyedSum(key[:], part)
	clear(part)
	runtime.GC()
	if n := scanMemory(t, masked); n != 0 {
		t.Errorf("%d copies of the message's tail left in memory (sum %x)", n, sum[:4])
	}
}
