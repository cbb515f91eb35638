package builtin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/ipsec"
)

// ledgerLocal is an rc.conf.local for the nonce ledger tests: the
// appliance without extras, the record at record, and extra lines.
func ledgerLocal(record string, extra ...string) string {
	return "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n" + recordVar + "=" + record + "\n" + strings.Join(extra, "\n") + "\n"
}

// TestIPsecLedgerMoves: changing ipsec_nonce_ledger is a settings change
// that keelctl reload applies (not "unchanged"), moving the live ledger
// with its entries; a keeld restarted with another state directory (and
// no ipsec_nonce_ledger) carries the previous ledger over through the
// record. The SA's sequence numbers continue across both instead of
// restarting at 1.
func TestIPsecLedgerMoves(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "anchor", "esp-nonces.record")
	a, bfile := filepath.Join(dir, "a", "esp-nonces"), filepath.Join(dir, "b", "esp-nonces")
	b := newTestbed(t, ledgerLocal(record, ledgerVar+"="+a), 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 3 {
		last = sendSeq(t, b)
	}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte(ledgerLocal(record, ledgerVar+"="+bfile))}
	res, err := b.m.Reload(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Reloaded, "ipsec") {
		t.Fatalf("reload after %s changed: %+v, want ipsec reloaded", ledgerVar, res)
	}
	if l := b.sys.ips.currentLedger(); l == nil || l.Path() != bfile {
		t.Fatalf("%v after the reload, want %s", l, bfile)
	}
	if seq := sendSeq(t, b); seq != last+1 {
		t.Fatalf("after the reload: seq %d, want %d", seq, last+1)
	}
	last++
	if err := b.m.Shutdown(b.ctx); err != nil {
		t.Fatal(err)
	}
	// keeld again, with another state directory and the default ledger
	// in it: only the record knows where the keys' numbers are.
	state2 := filepath.Join(dir, "state2")
	b2 := newTestbed(t, ledgerLocal(record, "keel_state_dir="+state2), 2*time.Millisecond, nil)
	if err := b2.m.Boot(b2.ctx); err != nil {
		t.Fatal(err)
	}
	if l := b2.sys.ips.currentLedger(); l == nil || l.Path() != filepath.Join(state2, "esp-nonces") {
		t.Fatalf("%v, want the new state directory's", l)
	}
	if seq := sendSeq(t, b2); seq != last+1 {
		t.Fatalf("new state directory: seq %d, want %d", seq, last+1)
	}
}

// TestIPsecLedgerLost: after the ledger file is removed, ipsec refuses to
// start (naming the file, what happened and the way out) instead of
// starting its keys at 1; with ipsec_nonce_policy=fresh-key-only (the
// operator re-keyed) it starts, loudly and counted, and the decision is
// recorded: the next start needs none. A bad policy value fails the start.
func TestIPsecLedgerLost(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "esp-nonces.record")
	ledger := filepath.Join(dir, "esp-nonces")
	local := ledgerLocal(record, ledgerVar+"="+ledger)
	boot := func(local string) *testbed {
		b := newTestbed(t, local, 2*time.Millisecond, nil)
		_ = b.m.Boot(b.ctx)
		return b
	}
	b := boot(local)
	sendSeq(t, b)
	if err := b.m.Shutdown(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ledger); err != nil {
		t.Fatal(err)
	}
	b = boot(local)
	st := b.status("ipsec")
	for _, want := range []string{ledger, "lost", "re-key every AEAD SA", policyVar + "=fresh-key-only"} {
		if st.State.Active() || !strings.Contains(st.Reason, want) {
			t.Errorf("ipsec %s %q: want a failure with %q", st.State, st.Reason, want)
		}
	}
	if got := gather(t, b.sys.Collectors()...)["keel_ipsec_nonce_ledger_refused_total"]; got != 1 {
		t.Errorf("refused opens metric %v, want 1", got)
	}
	b.m.Shutdown(b.ctx)

	b = boot(ledgerLocal(record, ledgerVar+"="+ledger, policyVar+"=fresh-key-only"))
	if st := b.status("ipsec"); !st.State.Active() {
		t.Fatalf("ipsec with fresh-key-only: %s %s", st.State, st.Reason)
	}
	if seq := sendSeq(t, b); seq != 1 {
		t.Errorf("re-keyed (fresh-key-only): seq %d, want 1", seq)
	}
	v := b.sys.IPsecView().NonceLedger
	if v == nil || v.Incident == "" || v.UnrecordedKeys == 0 || v.Policy != ipsec.NoncePolicyFreshKeyOnly {
		t.Errorf("ledger view %+v: want the incident and the unrecorded keys", v)
	}
	d, err := b.m.Detail("ipsec", 100)
	if err != nil {
		t.Fatal(err)
	}
	if log := strings.Join(d.Log, "\n"); !strings.Contains(log, "was unsafe") || !strings.Contains(log, "taken as a fresh key") {
		t.Errorf("ipsec log lacks the incident and the fresh keys:\n%s", log)
	}
	metrics := gather(t, b.sys.Collectors()...)
	if metrics["keel_ipsec_nonce_unrecorded_keys_total,ledger="+ledger] == 0 || metrics["keel_ipsec_nonce_ledger_unsafe,ledger="+ledger+",policy=fresh-key-only"] != 1 {
		t.Errorf("metrics: %v", metrics)
	}
	b.m.Shutdown(b.ctx)

	b = boot(local)
	if st := b.status("ipsec"); !st.State.Active() {
		t.Fatalf("after the decision: %s %s", st.State, st.Reason)
	}
	if seq := sendSeq(t, b); seq != 2 {
		t.Errorf("after the decision: seq %d, want 2", seq)
	}
	b.m.Shutdown(b.ctx)

	b = boot(ledgerLocal(record, ledgerVar+"="+ledger, policyVar+"=maybe"))
	if st := b.status("ipsec"); st.State.Active() || !strings.Contains(st.Reason, policyVar+`: "maybe" is not a nonce policy`) {
		t.Errorf("bad policy: %s %q", st.State, st.Reason)
	}
}

// sendMany encrypts n packets through the running engine's first outbound
// policy, in batches, and returns how many were forwarded.
func sendMany(t *testing.T, b *testbed, n int) int {
	t.Helper()
	eng, sel := outPolicy(t, b)
	pool := ipsec.NewPool(0)
	data := innerPacket(sel, 64)
	batch := make([]*ipsec.Packet, 64)
	fwd := 0
	for sent := 0; sent < n; sent += len(batch) {
		for i := range batch {
			batch[i] = pool.Get()
			batch[i].SetData(data)
		}
		eng.Outbound(batch)
		for _, p := range batch {
			if p.Verdict == ipsec.VerdictForward {
				fwd++
			}
			p.Release()
		}
	}
	return fwd
}
