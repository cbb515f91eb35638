package ipsec

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
)

// gcmKeyHex is the AES-GCM key (with salt) of baseConf's SA 0x1001.
const gcmKeyHex = "000102030405060708090a0b0c0d0e0f10111213"

// TestNonceNeverRestarts: an AEAD key that comes back never restarts its
// sequence numbers (nonces): after delete + add, after a re-key away and
// back, when one Apply replaces an SA by another with the same key, and
// in a new engine sharing the ledger (a restarted ipsec service).
func TestNonceNeverRestarts(t *testing.T) {
	pool := NewPool(0)
	l := NewNonceLedger()
	e := newTestEngine(t, Options{NonceLedger: l})
	applyText(t, e, baseConf)
	for range 3 {
		sendOne(t, e, pool)
	}
	gcmLine := strings.Split(baseConf, "\n")[2]
	other := strings.Replace(baseConf, "0x"+gcmKeyHex+";", "0xff0102030405060708090a0b0c0d0e0f10111213;", 1)
	wider := strings.Replace(baseConf, "-m tunnel -E aes-gcm-16", "-m tunnel -r 128 -E aes-gcm-16", 1)
	steps := []struct {
		name, conf string
		min, max   uint64 // min 0: no packet sent
	}{
		{"delete", "delete 192.0.2.1 192.0.2.2 esp 0x1001;", 0, 0},
		{"re-added", gcmLine, 4, 4},
		{"rekey away", other, 1, 1},
		{"rekey back", baseConf, 5, 5},
		// The old SA may still send while the new one starts: it keeps
		// nonceCapMargin numbers, the new one starts above them.
		{"same key, other window, one apply", wider, 6 + nonceCapMargin, 6 + nonceCapMargin},
	}
	for _, st := range steps {
		applyText(t, e, st.conf)
		if st.min == 0 {
			continue
		}
		p := sendOne(t, e, pool)
		if p.Verdict != VerdictForward || p.Seq < st.min || p.Seq > st.max {
			t.Errorf("%s: %v %v seq %d, want %d..%d", st.name, p.Verdict, p.Drop, p.Seq, st.min, st.max)
		}
	}
	seq := e.SAs()[0].Seq
	if err := e.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	e2 := newTestEngine(t, Options{NonceLedger: l})
	applyText(t, e2, wider)
	if p := sendOne(t, e2, pool); p.Verdict != VerdictForward || p.Seq != seq+1 {
		t.Errorf("new engine sharing the ledger: %v seq %d, want %d", p.Verdict, p.Seq, seq+1)
	}
	// A private ledger (the default) knows nothing of e's SAs.
	e3 := newTestEngine(t, Options{})
	applyText(t, e3, wider)
	if p := sendOne(t, e3, pool); p.Seq != 1 {
		t.Errorf("engine with its own ledger: seq %d, want 1", p.Seq)
	}
}

// sharedKeyConf has two outbound AEAD SAs under one key (to two peers).
const sharedKeyConf = `
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-gcm-16 0x` + gcmKeyHex + `;
add 192.0.2.1 192.0.2.3 esp 0x1003 -m tunnel -E aes-gcm-16 0x` + gcmKeyHex + `;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.1.0/24 192.168.3.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.3/require;
`

// reserveAll has g goroutines reserve batches of 8 numbers of each SA
// n times (retrying while a range is exhausted) and returns the accepted
// ranges as [first, last] pairs.
func reserveAll(t *testing.T, ss []*sa, g, n int) [][2]uint64 {
	t.Helper()
	var mu sync.Mutex
	var got [][2]uint64
	var wg sync.WaitGroup
	for _, s := range ss {
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine [][2]uint64
				deadline := time.Now().Add(20 * time.Second)
				for i := 0; i < n; {
					first, ok := s.reserve(8)
					if ok > 0 {
						mine = append(mine, [2]uint64{first, first + uint64(ok) - 1})
					}
					if ok == 8 {
						i++
						continue
					}
					if time.Now().After(deadline) {
						t.Errorf("spi 0x%x: range never refreshed (seq %d, limit %d)", s.cfg.SPI, s.seq.Load(), s.nlimit.Load())
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
				mu.Lock()
				got = append(got, mine...)
				mu.Unlock()
			}()
		}
	}
	testwait.Wait(t, testwait.Long, "ledger users done", &wg)
	return got
}

// checkDisjoint fails if two accepted ranges overlap (a nonce reused).
func checkDisjoint(t *testing.T, rs [][2]uint64) {
	t.Helper()
	slices.SortFunc(rs, func(a, b [2]uint64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	for i := 1; i < len(rs); i++ {
		if rs[i][0] <= rs[i-1][1] {
			t.Fatalf("nonce reused: ranges %v and %v overlap", rs[i-1], rs[i])
		}
	}
}

// TestNonceSharedKey: installed SAs sharing one key (in one engine, and in
// two engines sharing the ledger, as pktgen's peer does) never hand out
// the same number, while goroutines reserve concurrently with refreshes
// and caps, for in-memory and file-backed ledgers.
func TestNonceSharedKey(t *testing.T) {
	for _, file := range []bool{false, true} {
		name := map[bool]string{false: "memory", true: "file"}[file]
		t.Run(name, func(t *testing.T) {
			l := NewNonceLedger()
			n := 800 // batches per goroutine
			if file {
				var err error
				if l, err = OpenNonceLedger(filepath.Join(t.TempDir(), "esp-nonces"), LedgerOptions{}); err != nil {
					t.Fatal(err)
				}
				n = nonceBlockMin / 8 // crosses several refreshes
			}
			e1 := newTestEngine(t, Options{NonceLedger: l})
			applyText(t, e1, sharedKeyConf)
			e2 := newTestEngine(t, Options{NonceLedger: l})
			applyText(t, e2, strings.Replace(sharedKeyConf, "0x1003", "0x2003", 1))
			ss := append(slices.Clone(e1.sad.Load().all), e2.sad.Load().all...)
			// Take the key's top range from e2's first SA mid-run: a cap.
			got := reserveAll(t, ss, 2, n)
			checkDisjoint(t, got)
			total := uint64(0)
			for _, r := range got {
				total += r[1] - r[0] + 1
			}
			if want := uint64(len(ss) * 2 * n * 8); total != want {
				t.Errorf("accepted %d numbers, want %d", total, want)
			}
			if file {
				disk, err := l.file.read(l.key, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range ss {
					if v := disk.m[s.nonceID]; v < s.nlimit.Load() {
						t.Errorf("spi 0x%x: limit %d beyond the durable mark %d", s.cfg.SPI, s.nlimit.Load(), v)
					}
				}
			}
		})
	}
}

// TestNonceLedgerRestart: a file-backed ledger survives the process. After
// a crash (no Close) a new process starts each key above the block
// reserved on disk; after a clean Close it continues right after the last
// number sent; a ledger re-opened never reuses a number either way.
func TestNonceLedgerRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "esp-nonces")
	pool := NewPool(0)
	open := func() *NonceLedger {
		t.Helper()
		l, err := OpenNonceLedger(path, LedgerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	send := func(l *NonceLedger, n int) (*Engine, uint64) {
		t.Helper()
		e := newTestEngine(t, Options{NonceLedger: l})
		applyText(t, e, baseConf)
		var last uint64
		for range n {
			p := sendOne(t, e, pool)
			if p.Verdict != VerdictForward {
				t.Fatalf("send: %v", p.Drop)
			}
			last = p.Seq
		}
		return e, last
	}
	l1 := open()
	_, last := send(l1, 5)
	if last != 5 {
		t.Fatalf("first run: seq %d, want 5", last)
	}
	// Crash: l1 and its engine are abandoned as they are.
	l2 := open()
	e2, last := send(l2, 1)
	if last != nonceBlockMin+1 {
		t.Errorf("after a crash: seq %d, want %d (above the reserved block)", last, nonceBlockMin+1)
	}
	// Clean stop: the engine gives back the rest of its block and Close
	// records it.
	if err := e2.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e2.Apply(context.Background(), parse(t, baseConf)); !errors.Is(err, ErrClosed) {
		t.Errorf("apply after close: %v", err)
	}
	l3 := open()
	_, got := send(l3, 1)
	if got != last+1 {
		t.Errorf("after a clean restart: seq %d, want %d", got, last+1)
	}
	// A closed ledger refuses new AEAD SAs.
	if err := l3.Close(); err != nil {
		t.Fatal(err)
	}
	e4 := newTestEngine(t, Options{NonceLedger: l3})
	if err := e4.Apply(context.Background(), parse(t, baseConf)); !errors.Is(err, ErrLedgerClosed) {
		t.Errorf("apply on a closed ledger: %v, want ErrLedgerClosed", err)
	}
	// The file: 0600, no key bytes (raw or hex, key or salt).
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	key, _ := hex.DecodeString(gcmKeyHex)
	for _, needle := range [][]byte{key, key[:16], key[16:], []byte(gcmKeyHex), []byte(gcmKeyHex[:32]), []byte(gcmKeyHex[32:])} {
		if bytes.Contains(data, needle) {
			t.Errorf("ledger file holds key material %x", needle)
		}
	}
}

// TestNonceLedgerCorrupt: a damaged ledger file is refused with an error
// naming the file, the line and what is wrong (never an empty ledger).
func TestNonceLedgerCorrupt(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	l, err := OpenNonceLedger(good, LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Options{NonceLedger: l})
	applyText(t, e, baseConf)
	valid, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(valid), "\n")
	if len(lines) != 4 { // header, one entry, end, ""
		t.Fatalf("ledger file:\n%s", valid)
	}
	tests := []struct{ name, data, want string }{
		{"empty", "", "line 1: nonce ledger corrupt: empty file"},
		{"truncated entry", lines[0] + lines[1][:20], "line 2: nonce ledger corrupt: no newline"},
		{"no end line", lines[0] + lines[1], "line 2: nonce ledger corrupt: no end line"},
		{"bad header", "keel-esp-nonces v9" + lines[0][18:] + lines[1] + lines[2], "line 1: nonce ledger corrupt: want header"},
		{"bad number", lines[0] + strings.Replace(lines[1], " ", " x", 1) + lines[2], "line 2: nonce ledger corrupt: reserved number"},
		{"bad checksum", lines[0] + strings.Replace(lines[1], " ", " 9", 1) + lines[2], "line 3: nonce ledger corrupt: checksum"},
		{"lost entry", lines[0] + lines[2], "line 2: nonce ledger corrupt: end line counts"},
		{"after end", lines[0] + lines[1] + lines[2] + lines[1], "line 4: nonce ledger corrupt: data after the end line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenNonceLedger(p, LedgerOptions{})
			if !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), p+": "+tc.want) {
				t.Errorf("got %v, want ErrLedgerCorrupt with %q", err, p+": "+tc.want)
			}
		})
	}
	// A file replaced under an open ledger stops its writes.
	other := filepath.Join(dir, "other")
	if _, err := OpenNonceLedger(other, LedgerOptions{}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(other)
	if err := os.WriteFile(good, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), "ledger key changed") {
		t.Errorf("sync after the file was replaced: %v", err)
	}
	if l.Err() == nil {
		t.Error("Err() is nil after a failed write")
	}
}

// TestNonceLedgerHotPathAllocs: the range check and the refresh wake-up
// allocate nothing.
func TestNonceLedgerHotPathAllocs(t *testing.T) {
	l, err := OpenNonceLedger(filepath.Join(t.TempDir(), "esp-nonces"), LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Options{NonceLedger: l})
	applyText(t, e, baseConf)
	s := e.sad.Load().bySPI[0x1001][0]
	s.nrefresh.Store(0) // every reserve wakes the refresher
	if n := testing.AllocsPerRun(1000, func() { s.reserve(4) }); n != 0 {
		t.Errorf("reserve: %v allocs", n)
	}
}

// seekSeq moves s's outbound counter to v, as if v numbers had been sent,
// for tests that start near a boundary. It lifts s's nonce range
// (tests only: sound as long as no other SA sends under s's key).
func seekSeq(s *sa, v uint64) {
	s.seq.Store(v)
	s.nfloor.Store(min(s.nfloor.Load(), v+1))
	s.nlimit.Store(nonceUnbounded)
	s.nrefresh.Store(nonceUnbounded)
}

// TestNonceLedgerExhausted: while the ledger file cannot be written, an SA
// that consumed its durable block drops its packets (DropSeqOverflow)
// instead of going on; once the file is writable again the refresher
// extends the block and the SA continues above it.
func TestNonceLedgerExhausted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "esp-nonces")
	l, err := OpenNonceLedger(path, LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Options{NonceLedger: l})
	applyText(t, e, baseConf)
	s := e.sad.Load().bySPI[0x1001][0]
	good, _ := os.ReadFile(path)
	// Break the file: the refresher's writes fail from now on.
	if _, err := OpenNonceLedger(filepath.Join(dir, "other"), LedgerOptions{}); err != nil {
		t.Fatal(err)
	}
	other, _ := os.ReadFile(filepath.Join(dir, "other"))
	if err := os.WriteFile(path, other, 0o600); err != nil {
		t.Fatal(err)
	}
	useBlock(t, s, 0)
	pool := NewPool(0)
	if p := sendOne(t, e, pool); p.Verdict != VerdictDrop || p.Drop != DropSeqOverflow {
		t.Fatalf("past the block: %v %v seq %d", p.Verdict, p.Drop, p.Seq)
	}
	if e.SAs()[0].Drops["seq-overflow"] == 0 {
		t.Error("drop not counted on the SA")
	}
	if !poll(t, func() bool { return l.Err() != nil }) {
		t.Fatal("no write error reported")
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	var p *Packet
	if !poll(t, func() bool { p = sendOne(t, e, pool); return p.Verdict == VerdictForward }) {
		t.Fatalf("not refreshed after the file was repaired: %v %v (err %v)", p.Verdict, p.Drop, l.Err())
	}
	if p.Seq <= nonceBlockMin {
		t.Errorf("seq %d after the refresh, want > %d", p.Seq, nonceBlockMin)
	}
	disk, err := l.file.read(l.key, 0)
	if err != nil || disk.m[s.nonceID] < s.nlimit.Load() {
		t.Errorf("durable mark %d below the limit %d (%v)", disk.m[s.nonceID], s.nlimit.Load(), err)
	}
}

// useBlock reserves the rest of s's first block (used numbers of it were
// sent already), which wakes the refresher at 3/4; it fails if the block
// ends early.
func useBlock(t *testing.T, s *sa, used uint64) {
	t.Helper()
	for used < nonceBlockMin {
		_, ok := s.reserve(64)
		used += uint64(ok)
		if ok == 0 {
			t.Fatalf("block ended after %d numbers, want %d", used, nonceBlockMin)
		}
	}
}

// poll calls cond every millisecond for up to 5 s and reports whether it
// returned true.
func poll(t *testing.T, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// FuzzParseLedger: any ledger file parses or fails with ErrLedgerCorrupt,
// never panics, and what parses is written back to a file that parses to
// the same ledger.
func FuzzParseLedger(f *testing.F) {
	f.Add([]byte("keel-esp-nonces v1 " + strings.Repeat("ab", 32) + "\nend 0 00000000\n"))
	f.Add([]byte("keel-esp-nonces v2 " + strings.Repeat("ab", 32) + " 9\nend 0 00000000\n"))
	f.Add([]byte("keel-esp-nonces v2 " + strings.Repeat("ab", 32) + "\nend 0 00000000\n"))    // no epoch
	f.Add([]byte("keel-esp-nonces v2 " + strings.Repeat("ab", 32) + " -1\nend 0 00000000\n")) // bad epoch
	f.Add([]byte(""))
	f.Add([]byte("end 1 x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := parseLedger("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrLedgerCorrupt) {
				t.Fatalf("error without ErrLedgerCorrupt: %v", err)
			}
			return
		}
		p := filepath.Join(t.TempDir(), "l")
		if err := (&ledgerFile{path: p}).write(d); err != nil {
			t.Fatal(err)
		}
		out, _ := os.ReadFile(p)
		d2, err := parseLedger("fuzz", out)
		if err != nil || d2.key != d.key || d2.epoch != d.epoch || !maps.Equal(d.m, d2.m) {
			t.Fatalf("round trip of %q: %q: %v", data, out, err)
		}
	})
}

// TestNonceSpaceUsedUp: re-adding a key (without ESN) whose 32-bit
// sequence space was used up is refused with an error naming the SA.
func TestNonceSpaceUsedUp(t *testing.T) {
	e := newTestEngine(t, Options{})
	applyText(t, e, baseConf)
	seekSeq(e.sad.Load().bySPI[0x1001][0], 1<<32-1)
	applyText(t, e, "delete 192.0.2.1 192.0.2.2 esp 0x1001;")
	err := e.Apply(context.Background(), parse(t, strings.Split(baseConf, "\n")[2]))
	if !errors.Is(err, ErrInvalidSA) || !strings.HasPrefix(err.Error(), "test.conf:1:1: ipsec: invalid SA: SA spi 0x1001:") || !strings.Contains(err.Error(), "up to 4294967295: re-key") {
		t.Errorf("got %v", err)
	}
	if len(e.SAs()) != 1 {
		t.Errorf("%d SAs after the failed apply, want 1", len(e.SAs()))
	}
}

// TestNonceSpaceUsedUpESN: with ESN, a key whose last 64-bit sequence
// number (2^64-1) was used is refused for a new SA, whatever its SPI:
// the ledger never grants [2^64-1, 2^64-1] again (the space's last nonce
// is not granted twice), in memory and from a file.
func TestNonceSpaceUsedUpESN(t *testing.T) {
	const esnLine = "add 192.0.2.1 192.0.2.2 esp %s -m tunnel -f esn -E aes-gcm-16 0x" + gcmKeyHex + ";"
	conf := func(spi string) string {
		return strings.Replace(baseConf, strings.Split(baseConf, "\n")[2], fmt.Sprintf(esnLine, spi), 1)
	}
	file, err := OpenNonceLedger(filepath.Join(t.TempDir(), "esp-nonces"), LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*NonceLedger{"memory": NewNonceLedger(), "file": file} {
		t.Run(name, func(t *testing.T) {
			e := newTestEngine(t, Options{NonceLedger: l})
			applyText(t, e, conf("0x1001"))
			pool := NewPool(0)
			s := e.sad.Load().bySPI[0x1001][0]
			seekSeq(s, 1<<64-2)
			if p := sendOne(t, e, pool); p.Verdict != VerdictForward || p.Seq != 1<<64-1 {
				t.Fatalf("last number: %v %v seq %d", p.Verdict, p.Drop, p.Seq)
			}
			l.mu.Lock()
			l.m[s.nonceID].next = max(l.m[s.nonceID].next, 1<<64-1) // as if granted up to the end
			l.mu.Unlock()
			applyText(t, e, "delete 192.0.2.1 192.0.2.2 esp 0x1001;")
			for _, spi := range []string{"0x1001", "0x2001"} {
				err := e.Apply(context.Background(), parse(t, conf(spi)))
				if !errors.Is(err, ErrInvalidSA) || !strings.Contains(err.Error(), "up to 18446744073709551615") || !strings.HasSuffix(err.Error(), ": re-key") {
					t.Errorf("spi %s: got %v, want a re-key error", spi, err)
				}
				for _, sa := range e.SAs() {
					if sa.Alg.IsAEAD() {
						t.Fatalf("spi %s: AEAD SA installed with a spent key (seq %d)", spi, sa.Seq)
					}
				}
			}
		})
	}
}
