package ipsec

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
	if err := e.Close(context.Background()); err != nil {
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
	wg.Wait()
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
				if l, err = OpenNonceLedger(filepath.Join(t.TempDir(), "esp-nonces")); err != nil {
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
				disk, err := l.file.read(l.key)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range ss {
					if v := disk[s.nonceID]; v < s.nlimit.Load() {
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
		l, err := OpenNonceLedger(path)
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
	if err := e2.Close(context.Background()); err != nil {
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
	l, err := OpenNonceLedger(good)
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
			_, err := OpenNonceLedger(p)
			if !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), p+": "+tc.want) {
				t.Errorf("got %v, want ErrLedgerCorrupt with %q", err, p+": "+tc.want)
			}
		})
	}
	// A file replaced under an open ledger stops its writes.
	other := filepath.Join(dir, "other")
	if _, err := OpenNonceLedger(other); err != nil {
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
	l, err := OpenNonceLedger(filepath.Join(t.TempDir(), "esp-nonces"))
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
