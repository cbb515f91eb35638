package builtin

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testfault"
	"github.com/keelinit/keel/services"
)

// TestIPsecLedgerDegraded: while the ledger's file system is full or
// read-only (a real tmpfs), ipsec's status says degraded with the cause
// and the ledger metrics show it; once the fault is gone, the status and
// the metrics recover and traffic flows again.
func TestIPsecLedgerDegraded(t *testing.T) {
	for _, name := range testfault.Names() {
		t.Run(name, func(t *testing.T) {
			dir := testfault.Tmpfs(t, 256<<10)
			ledger := filepath.Join(dir, "esp-nonces")
			b := newTestbed(t, ledgerLocal(filepath.Join(dir, "esp-nonces.record"), ledgerVar+"="+ledger), 2*time.Millisecond, nil)
			if err := b.m.Boot(b.ctx); err != nil {
				t.Fatal(err)
			}
			writable := "keel_ipsec_nonce_ledger_writable,ledger=" + ledger
			if st := b.sys.ips.Status(); strings.Contains(st, "degraded") || gather(t, b.sys.Collectors()...)[writable] != 1 {
				t.Fatalf("degraded before the fault: %s", st)
			}
			undo, err := testfault.Faults[name](dir)
			if err != nil {
				t.Fatal(err)
			}
			// Use up the first block (2^16 numbers): the refresh fails.
			sendMany(t, b, 1<<16)
			if !poll(5*time.Second, func() bool { return strings.HasPrefix(b.sys.ips.Status(), "degraded: nonce ledger write failing: ") }) {
				t.Fatalf("status %q, want degraded", b.sys.ips.Status())
			}
			if st := b.status("ipsec"); !strings.Contains(st.StatusText, ledger) {
				t.Errorf("status text %q does not name the ledger", st.StatusText)
			}
			if st := b.status("ipsec"); st.State != services.StateRunning || !strings.HasPrefix(st.Degraded, "nonce ledger write failing: ") {
				t.Errorf("unit status %s, degraded %q: want running and degraded by the ledger", st.State, st.Degraded)
			}
			m := gather(t, b.sys.Collectors()...)
			if m[writable] != 0 || m["keel_ipsec_nonce_ledger_write_errors_total,ledger="+ledger] == 0 {
				t.Errorf("metrics during the fault: writable %v, errors %v", m[writable], m["keel_ipsec_nonce_ledger_write_errors_total,ledger="+ledger])
			}
			if err := undo(); err != nil {
				t.Fatal(err)
			}
			if !poll(5*time.Second, func() bool { return !strings.Contains(b.sys.ips.Status(), "degraded") }) {
				t.Fatalf("status %q after the fault was fixed", b.sys.ips.Status())
			}
			if d := b.status("ipsec").Degraded; d != "" {
				t.Errorf("unit still degraded after the fault was fixed: %q", d)
			}
			if gather(t, b.sys.Collectors()...)[writable] != 1 || sendMany(t, b, 64) != 64 {
				t.Error("not recovered after the fault was fixed")
			}
		})
	}
}
