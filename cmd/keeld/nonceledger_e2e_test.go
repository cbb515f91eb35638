package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/services/builtin"
)

// sendingSAs polls keelctl ipsec sa until every outbound SA of d has sent
// (pktgen's traffic) and returns them by SPI.
func sendingSAs(t *testing.T, d *keeldProc) map[uint32]builtin.SA {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := d.keelctl(nil, "ipsec", "sa", "--json")
		var v builtin.IPsec
		_ = json.Unmarshal([]byte(out), &v)
		got := map[uint32]builtin.SA{}
		for _, sa := range v.SAs {
			if sa.OutPackets > 0 {
				got[sa.SPI] = sa
			}
		}
		if len(got) > 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no SA sent within 10 s: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNonceLedgerAcrossRuns: the real keeld on the embedded appliance
// (pktgen sends through its AES-GCM SAs), stopped cleanly or killed with
// SIGKILL, then started with another --state-dir: each SA continues above
// every number of the first run (the record carried the ledger over)
// instead of restarting at 1. With the ledger file then removed, the next
// run refuses to start ipsec and says why.
func TestNonceLedgerAcrossRuns(t *testing.T) {
	for _, stop := range []string{"shutdown", "kill -9"} {
		t.Run(stop, func(t *testing.T) {
			dir := t.TempDir()
			record := filepath.Join(dir, "esp-nonces.record")
			d1 := startKeeld(t, "", "--state-dir", filepath.Join(dir, "s1"), "--nonce-record", record)
			first := sendingSAs(t, d1)
			if stop == "shutdown" {
				if out, errs, code := d1.keelctl(nil, "shutdown"); code != 0 {
					t.Fatalf("shutdown: %s %s", out, errs)
				}
				d1.waitExit(t)
			} else {
				_ = d1.cmd.Process.Signal(syscall.SIGKILL)
				<-d1.exited
			}
			s2 := filepath.Join(dir, "s2")
			d2 := startKeeld(t, "", "--state-dir", s2, "--nonce-record", record)
			for spi, sa := range sendingSAs(t, d2) {
				before, ok := first[spi]
				if !ok || !strings.Contains(sa.Alg, "gcm") {
					continue
				}
				// The first number of this run is Seq-OutPackets+1.
				if start := sa.Seq - sa.OutPackets + 1; start <= before.Seq {
					t.Errorf("SA 0x%x: second run started at seq %d, the first had sent up to %d at least: nonce reuse", spi, start, before.Seq)
				}
			}
			if out, errs, code := d2.keelctl(nil, "shutdown"); code != 0 {
				t.Fatalf("shutdown: %s %s", out, errs)
			}
			d2.waitExit(t)
			if err := os.Remove(filepath.Join(s2, "esp-nonces")); err != nil {
				t.Fatal(err)
			}
			d3 := startKeeld(t, "", "--state-dir", s2, "--nonce-record", record)
			st := d3.status()["ipsec"]
			if st.State.Active() || !strings.Contains(st.Reason, "lost") || !strings.Contains(st.Reason, "ipsec_nonce_policy=fresh-key-only") {
				t.Errorf("ipsec after the ledger was removed: %s %q, want a refusal", st.State, st.Reason)
			}
		})
	}
}
