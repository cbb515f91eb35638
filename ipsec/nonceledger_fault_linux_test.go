package ipsec

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelinit/keel/internal/testfault"
)

// TestNonceLedgerWriteFault: with the state directory full or read-only
// (a real tmpfs), the refresher's failed writes are an error logged once
// (not once per retry), counted, and reported by Err and Stats; the SA
// drops rather than reuse a nonce; once the fault is gone the ledger
// writes again, says so, and the SA continues above its durable block.
func TestNonceLedgerWriteFault(t *testing.T) {
	for _, name := range testfault.Names() {
		t.Run(name, func(t *testing.T) {
			dir := testfault.Tmpfs(t, 128<<10)
			r := newLedgerRig(t)
			path := filepath.Join(dir, "esp-nonces")
			l, err := OpenNonceLedger(path, LedgerOptions{Log: r.opts("").Log})
			if err != nil {
				t.Fatal(err)
			}
			e, _, err := r.send(l, baseConf, 1)
			if err != nil {
				t.Fatal(err)
			}
			s := e.sad.Load().bySPI[0x1001][0]
			undo, err := testfault.Faults[name](dir)
			if err != nil {
				t.Fatal(err)
			}
			useBlock(t, s, 1)
			// Two failed attempts (the kick and a retry), one log line.
			if !poll(t, func() bool { return l.Stats().WriteErrors >= 2 }) {
				t.Fatalf("write errors %d, want >= 2 (err %v)", l.Stats().WriteErrors, l.Err())
			}
			st := l.Stats()
			if st.Err == "" || l.Err() == nil || !strings.Contains(st.Err, path) {
				t.Errorf("Stats().Err %q, Err() %v: want the failure naming %s", st.Err, l.Err(), path)
			}
			if n := strings.Count(r.log.String(), "level=ERROR"); n != 1 {
				t.Errorf("%d error lines, want 1:\n%s", n, r.log)
			}
			if p := sendOne(t, e, r.pool); p.Verdict != VerdictDrop || p.Drop != DropSeqOverflow {
				t.Errorf("past the block: %v %v seq %d, want a seq-overflow drop", p.Verdict, p.Drop, p.Seq)
			}
			if err := undo(); err != nil {
				t.Fatal(err)
			}
			var p *Packet
			if !poll(t, func() bool { p = sendOne(t, e, r.pool); return p.Verdict == VerdictForward }) {
				t.Fatalf("not refreshed after the fault was fixed: %v %v (err %v)", p.Verdict, p.Drop, l.Err())
			}
			if p.Seq <= nonceBlockMin || l.Err() != nil || l.Stats().Err != "" {
				t.Errorf("seq %d (want > %d), err %v after the fix", p.Seq, nonceBlockMin, l.Err())
			}
			if !strings.Contains(r.log.String(), "written again") {
				t.Errorf("recovery not logged:\n%s", r.log)
			}
		})
	}
}
