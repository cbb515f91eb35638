package ipsec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ledgerRig opens ledgers sharing one record in a temporary directory and
// sends through baseConf's AES-GCM SA 0x1001.
type ledgerRig struct {
	t      *testing.T
	dir    string
	record string
	log    *syncBuffer
	pool   *Pool
}

func newLedgerRig(t *testing.T) *ledgerRig {
	dir := t.TempDir()
	return &ledgerRig{t: t, dir: dir, record: filepath.Join(dir, "anchor", "esp-nonces.record"), log: &syncBuffer{}, pool: NewPool(0)}
}

func (r *ledgerRig) path(name string) string { return filepath.Join(r.dir, name, "esp-nonces") }

func (r *ledgerRig) opts(p NoncePolicy) LedgerOptions {
	return LedgerOptions{Record: r.record, Policy: p, Log: slog.New(slog.NewTextHandler(r.log, nil))}
}

func (r *ledgerRig) open(name string, p NoncePolicy) (*NonceLedger, error) {
	return OpenNonceLedger(r.path(name), r.opts(p))
}

func (r *ledgerRig) mustOpen(name string, p NoncePolicy) *NonceLedger {
	r.t.Helper()
	l, err := r.open(name, p)
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// send applies conf on a new engine of l and sends n packets on SA
// 0x1001; it returns the engine and the last sequence number (0 if the
// apply failed: err).
func (r *ledgerRig) send(l *NonceLedger, conf string, n int) (*Engine, uint64, error) {
	r.t.Helper()
	e := newTestEngine(r.t, Options{NonceLedger: l})
	if err := e.Apply(context.Background(), parse(r.t, conf)); err != nil {
		return e, 0, err
	}
	var last uint64
	for range n {
		p := sendOne(r.t, e, r.pool)
		if p.Verdict != VerdictForward {
			r.t.Fatalf("send: %v %v", p.Verdict, p.Drop)
		}
		last = p.Seq
	}
	return e, last, nil
}

// otherKeyConf is baseConf with another AES-GCM key on SA 0x1001 (a re-key).
var otherKeyConf = strings.Replace(baseConf, "0x"+gcmKeyHex+";", "0xee0102030405060708090a0b0c0d0e0f10111213;", 1)

// TestNonceLedgerMoved: a ledger opened at another path (a new
// ipsec_nonce_ledger or state directory) carries over the previous one
// named by the record, after a clean close or a crash, when the new file
// is new or an earlier ledger of the same installation (A -> B -> A); a
// running ledger moved with Move keeps its installed SAs' ranges and its
// keys continue in the next process. No key ever restarts at 1.
func TestNonceLedgerMoved(t *testing.T) {
	for _, clean := range []bool{true, false} {
		name := map[bool]string{true: "clean", false: "crash"}[clean]
		t.Run(name, func(t *testing.T) {
			r := newLedgerRig(t)
			last := uint64(0)
			for i, dir := range []string{"a", "b", "a", "c"} {
				l := r.mustOpen(dir, "")
				e, seq, err := r.send(l, baseConf, 3)
				if err != nil {
					t.Fatal(err)
				}
				if seq <= last+2 {
					t.Fatalf("step %d (%s): seq %d after %d: nonce reuse", i, dir, seq, last)
				}
				if clean && seq != last+3 {
					t.Errorf("step %d (%s): seq %d, want %d (a clean stop loses nothing)", i, dir, seq, last+3)
				}
				last = seq
				if clean {
					_ = e.Close(context.Background())
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
	t.Run("live", func(t *testing.T) {
		r := newLedgerRig(t)
		l := r.mustOpen("a", "")
		e, last, err := r.send(l, baseConf, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Move(r.path("b"), r.opts("")); err != nil {
			t.Fatal(err)
		}
		if l.Path() != r.path("b") {
			t.Fatalf("path %s after the move", l.Path())
		}
		if p := sendOne(t, e, r.pool); p.Verdict != VerdictForward || p.Seq != last+1 {
			t.Fatalf("after the move: %v seq %d, want %d", p.Verdict, p.Seq, last+1)
		}
		// Crash; the next process opens b (a is gone: not needed).
		if err := os.RemoveAll(filepath.Dir(r.path("a"))); err != nil {
			t.Fatal(err)
		}
		l2 := r.mustOpen("b", "")
		if _, seq, err := r.send(l2, baseConf, 1); err != nil || seq <= last+1 {
			t.Fatalf("next process: seq %d (%v), want > %d", seq, err, last+1)
		}
		// Moving onto a file of another installation (another ledger
		// key) is refused; the ledger stays where it was.
		foreign := filepath.Join(r.dir, "foreign")
		if _, err := OpenNonceLedger(foreign, LedgerOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := l2.Move(foreign, r.opts("")); err == nil || !strings.Contains(err.Error(), foreign+": the file (or the previous ledger its record names) has another ledger key") {
			t.Errorf("move onto a foreign ledger: %v", err)
		}
		if l2.Path() != r.path("b") {
			t.Errorf("path %s after a failed move", l2.Path())
		}
	})
}

// TestNonceLedgerUnsafe: a ledger that was lost or rolled back, or whose
// predecessor cannot be carried over, is never mistaken for a first start:
// the policy decides, with a loud log line and counted keys; a first
// start needs no decision under any policy.
func TestNonceLedgerUnsafe(t *testing.T) {
	type outcome struct {
		err        string // the open fails with ErrLedgerUnsafe and this text
		oldKey     string // "refused", "continues" or "starts at 1" for the known key
		unrecorded uint64
	}
	scenarios := []struct {
		name string
		// setup runs after a first ledger "a" sent 3 packets under the
		// key and was closed; it returns the ledger to open.
		setup func(r *ledgerRig) string
		want  map[NoncePolicy]outcome
	}{
		{"first start", func(r *ledgerRig) string {
			r.record = filepath.Join(r.dir, "fresh.record")
			return "z"
		}, map[NoncePolicy]outcome{
			NoncePolicyRefuse:       {oldKey: "starts at 1", unrecorded: 1},
			NoncePolicyFreshKeyOnly: {oldKey: "starts at 1", unrecorded: 1},
			NoncePolicyTrust:        {oldKey: "starts at 1", unrecorded: 1},
		}},
		{"lost", func(r *ledgerRig) string {
			if err := os.Remove(r.path("a")); err != nil {
				r.t.Fatal(err)
			}
			return "a"
		}, map[NoncePolicy]outcome{
			NoncePolicyRefuse:       {err: "lost: the file is missing, but " + "RECORD records it at epoch"},
			NoncePolicyFreshKeyOnly: {oldKey: "starts at 1", unrecorded: 1},
			NoncePolicyTrust:        {oldKey: "starts at 1", unrecorded: 1},
		}},
		{"rolled back", func(r *ledgerRig) string {
			r.restoreSnapshot()
			return "a"
		}, map[NoncePolicy]outcome{
			NoncePolicyRefuse:       {err: "rolled back: the file is at epoch"},
			NoncePolicyFreshKeyOnly: {oldKey: "refused"},
			NoncePolicyTrust:        {oldKey: "continues"},
		}},
		{"previous missing", func(r *ledgerRig) string {
			if err := os.RemoveAll(filepath.Dir(r.path("a"))); err != nil {
				r.t.Fatal(err)
			}
			return "b"
		}, map[NoncePolicy]outcome{
			NoncePolicyRefuse:       {err: "the previous ledger PATH_A, recorded in RECORD at epoch"},
			NoncePolicyFreshKeyOnly: {oldKey: "starts at 1", unrecorded: 1},
			NoncePolicyTrust:        {oldKey: "starts at 1", unrecorded: 1},
		}},
		{"previous rolled back", func(r *ledgerRig) string {
			r.restoreSnapshot()
			return "b"
		}, map[NoncePolicy]outcome{
			NoncePolicyRefuse:       {err: "the previous ledger PATH_A was rolled back"},
			NoncePolicyFreshKeyOnly: {oldKey: "refused"},
			NoncePolicyTrust:        {oldKey: "continues"},
		}},
		{"previous has another key", func(r *ledgerRig) string {
			if _, err := OpenNonceLedger(r.path("b"), LedgerOptions{}); err != nil { // another installation's
				r.t.Fatal(err)
			}
			return "b"
		}, map[NoncePolicy]outcome{
			NoncePolicyRefuse:       {err: "the previous ledger PATH_A has another ledger key"},
			NoncePolicyFreshKeyOnly: {oldKey: "starts at 1", unrecorded: 1},
			NoncePolicyTrust:        {oldKey: "starts at 1", unrecorded: 1},
		}},
	}
	for _, sc := range scenarios {
		for _, pol := range []NoncePolicy{NoncePolicyRefuse, NoncePolicyFreshKeyOnly, NoncePolicyTrust} {
			t.Run(sc.name+"/"+string(pol), func(t *testing.T) {
				want := sc.want[pol]
				r := newLedgerRig(t)
				// Two runs on ledger a: seq 1, a backup, then seq 2..4.
				for i, n := range []int{1, 3} {
					l := r.mustOpen("a", "")
					e, _, err := r.send(l, baseConf, n)
					if err != nil {
						t.Fatal(err)
					}
					_ = e.Close(context.Background())
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						r.snapshot()
					}
				}
				name := sc.setup(r)
				fileBefore, _ := os.ReadFile(r.path(name))
				l2, err := r.open(name, pol)
				if want.err != "" {
					text := strings.NewReplacer("RECORD", r.record, "PATH_A", r.path("a")).Replace(want.err)
					if !errors.Is(err, ErrLedgerUnsafe) || !strings.Contains(err.Error(), text) || !strings.Contains(err.Error(), "re-key every AEAD SA") {
						t.Fatalf("open: %v, want ErrLedgerUnsafe with %q", err, text)
					}
					if after, _ := os.ReadFile(r.path(name)); !bytes.Equal(after, fileBefore) {
						t.Error("a refused open changed the ledger file")
					}
					if _, err := r.open(name, pol); !errors.Is(err, ErrLedgerUnsafe) {
						t.Errorf("second open: %v, want it refused again", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				st := l2.Stats()
				if (sc.name != "first start") != (st.Incident != "") {
					t.Errorf("incident %q", st.Incident)
				}
				if st.Incident != "" && !strings.Contains(r.log.String(), "level=ERROR") {
					t.Errorf("no error logged for the incident:\n%s", r.log)
				}
				_, seq, err := r.send(l2, baseConf, 1)
				switch want.oldKey {
				case "refused":
					if !errors.Is(err, ErrInvalidSA) || !strings.Contains(err.Error(), "re-key") {
						t.Errorf("known key of a rolled-back ledger: seq %d, %v; want refused", seq, err)
					}
					// A re-key is the way out: a new key starts at 1.
					if _, seq, err := r.send(l2, otherKeyConf, 1); err != nil || seq != 1 {
						t.Errorf("re-keyed: seq %d, %v; want 1", seq, err)
					}
					want.unrecorded = 1
				case "continues":
					if err != nil || seq != 2 {
						t.Errorf("known key, trusted: seq %d, %v; want 2 (above the stale entry)", seq, err)
					}
				case "starts at 1":
					if err != nil || seq != 1 {
						t.Errorf("seq %d, %v; want 1", seq, err)
					}
				}
				if st := l2.Stats(); st.UnrecordedKeys != want.unrecorded {
					t.Errorf("unrecorded keys %d, want %d", st.UnrecordedKeys, want.unrecorded)
				}
				if st.Incident != "" && want.unrecorded > 0 && !strings.Contains(r.log.String(), "level=WARN") {
					t.Errorf("no warning logged for the key without an entry:\n%s", r.log)
				}
				// The decision is recorded: the next open is safe.
				if err := l2.Close(); err != nil {
					t.Fatal(err)
				}
				l3, err := r.open(name, NoncePolicyRefuse)
				if err != nil {
					t.Fatalf("open after the decision: %v", err)
				}
				if st := l3.Stats(); st.Incident != "" {
					t.Errorf("incident again: %s", st.Incident)
				}
			})
		}
	}
}

// snapshot saves ledger a's file (a backup); restoreSnapshot puts it back.
func (r *ledgerRig) snapshot() {
	r.t.Helper()
	data, err := os.ReadFile(r.path("a"))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "snapshot"), data, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func (r *ledgerRig) restoreSnapshot() {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join(r.dir, "snapshot"))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(r.path("a"), data, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// TestNonceLedgerPrint: printing a ledger, in any verb, never shows its
// ledger key (which makes its key ids guessable for weak keys).
func TestNonceLedgerPrint(t *testing.T) {
	r := newLedgerRig(t)
	l := r.mustOpen("a", "")
	key := fmt.Sprintf("%x", l.key[:])
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(verb, l); strings.Contains(out, key) || strings.Contains(out, fmt.Sprint(l.key[:4])) || !strings.Contains(out, r.path("a")) {
			t.Errorf("%s: %q", verb, out)
		}
	}
}

// FuzzParseRecord: any record parses or fails with ErrLedgerCorrupt
// naming the file, never panics, and what parses is an absolute path
// that the writer writes back identically.
func FuzzParseRecord(f *testing.F) {
	for _, seed := range []string{
		string(formatRecord("/var/db/keel/esp-nonces", 7)),
		recordMagic + " 7 /var/db/keel/esp-nonces\nend ebfa44c9\n",
		recordMagic + " 7 /var/db/keel/esp nonces with spaces\nend 00000000\n",
		recordMagic + " 18446744073709551616 /x\nend 00000000\n",
		recordMagic + " 1 relative\nend 00000000\n",
		recordMagic + " 1 /x\n",
		recordMagic + " 1 /x",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path, epoch, err := parseRecord("fuzz.record", data)
		if err != nil {
			if !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), "fuzz.record: line ") {
				t.Fatalf("error %v", err)
			}
			return
		}
		if !filepath.IsAbs(path) {
			t.Fatalf("relative path %q", path)
		}
		if rec := formatRecord(path, epoch); !bytes.Equal(rec, data) {
			t.Fatalf("%q parsed, would be written as %q", data, rec)
		}
	})
}
