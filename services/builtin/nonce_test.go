package builtin

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/rcconf"
)

// outPolicy returns the running engine and the selector of its first
// outbound IPsec policy.
func outPolicy(t *testing.T, b *testbed) (*ipsec.Engine, spd.Selector) {
	t.Helper()
	eng := b.sys.Engine()
	if eng == nil {
		t.Fatal("ipsec engine not running")
	}
	for _, p := range eng.Policies() {
		if p.Dir == spd.DirOut && p.Action == spd.IPsec {
			return eng, p.Sel
		}
	}
	t.Fatal("no outbound IPsec policy")
	return nil, spd.Selector{}
}

// sendSeq encrypts one packet through the running engine's first outbound
// policy and returns its sequence number (the AEAD nonce of the SA).
func sendSeq(t *testing.T, b *testbed) uint64 {
	t.Helper()
	eng, sel := outPolicy(t, b)
	pool := ipsec.NewPool(0)
	p := pool.Get()
	defer p.Release()
	if !p.SetData(innerPacket(sel, 200)) {
		t.Fatal("packet does not fit the buffer")
	}
	eng.Outbound([]*ipsec.Packet{p})
	if p.Verdict != ipsec.VerdictForward {
		t.Fatalf("outbound: %v %v", p.Verdict, p.Drop)
	}
	return p.Seq
}

// TestIPsecRestartKeepsNonces: restarting the ipsec service, and a new
// System (a restarted keeld) on the same ledger file, continue the
// sequence numbers of the appliance's AES-GCM SAs instead of reusing
// them from 1; the ledger file holds no key material.
func TestIPsecRestartKeepsNonces(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "db", "esp-nonces")
	local := "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n" + ledgerVar + "=" + ledger + "\n"
	b := newTestbed(t, local, 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 3 {
		last = sendSeq(t, b)
	}
	if last != 3 {
		t.Fatalf("first engine: seq %d, want 3", last)
	}
	l := b.sys.ips.currentLedger()
	if l == nil || l.Path() != ledger {
		t.Fatalf("ledger %v, want %s", l, ledger)
	}
	for i := range 2 {
		if err := b.m.Restart(b.ctx, "ipsec"); err != nil {
			t.Fatal(err)
		}
		if got := b.sys.ips.currentLedger(); got != l {
			t.Fatal("restart opened another ledger")
		}
		if seq := sendSeq(t, b); seq != last+1 {
			t.Fatalf("restart %d: seq %d, want %d (nonce reuse)", i+1, seq, last+1)
		} else {
			last = seq
		}
	}
	// keeld restarts: a new System on the same file.
	if err := b.m.Shutdown(b.ctx); err != nil {
		t.Fatal(err)
	}
	b2 := newTestbed(t, local, 2*time.Millisecond, nil)
	if err := b2.m.Boot(b2.ctx); err != nil {
		t.Fatal(err)
	}
	// The stopped service recorded what its SAs used: no block is lost.
	if seq := sendSeq(t, b2); seq != last+1 {
		t.Fatalf("new keeld: seq %d, want %d", seq, last+1)
	}
	data, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("../../etc/ipsec.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(conf)) {
		if k, ok := strings.CutPrefix(strings.TrimSuffix(f, ";"), "0x"); ok && len(k) >= 16 && strings.Contains(string(data), k[:16]) {
			t.Errorf("ledger file holds key %s...", k[:8])
		}
	}
}

// TestIPsecLedgerRefusal: an unreadable or corrupt ledger file fails the
// start of ipsec with an error naming the file (AEAD SAs are never run
// without it).
func TestIPsecLedgerRefusal(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "esp-nonces")
	if err := os.WriteFile(bad, []byte("keel-esp-nonces v1 00\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"corrupt": bad, "relative": "var/db/esp-nonces"} {
		t.Run(name, func(t *testing.T) {
			b := newTestbed(t, "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n"+ledgerVar+"="+v+"\n", 2*time.Millisecond, nil)
			_ = b.m.Boot(b.ctx)
			st := b.status("ipsec")
			if st.State.Active() || !strings.Contains(st.Reason, ledgerVar) || !strings.Contains(st.Reason, v) {
				t.Errorf("ipsec: %s %q, want a failure naming %s", st.State, st.Reason, v)
			}
		})
	}
}

// TestNonceLedgerPath: the ledger file's default locations.
func TestNonceLedgerPath(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/xdg")
	def := "/var/db/keel/esp-nonces"
	if os.Geteuid() != 0 {
		def = "/xdg/keel/esp-nonces"
	}
	tests := []struct {
		seed      map[string]string
		want, err string
	}{
		{map[string]string{ledgerVar: "/srv/nonces"}, "/srv/nonces", ""},
		{map[string]string{ledgerVar: "nonces"}, "", `ipsec_nonce_ledger: "nonces" is not an absolute path`},
		{map[string]string{"keel_root": "/r"}, "/r/var/db/keel/esp-nonces", ""},
		{map[string]string{"keel_root": "/"}, def, ""},
		{nil, def, ""},
	}
	for _, tc := range tests {
		got, err := nonceLedgerPath(services.BuiltinEnv{Config: rcconf.New(tc.seed)})
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%v: %q, %v; want %q, %q", tc.seed, got, err, tc.want, tc.err)
		}
	}
}

// TestNonceRecordPath: the record's default location follows keel_root
// only: neither keel_state_dir nor ipsec_nonce_ledger moves it (it is how
// a moved ledger is found).
func TestNonceRecordPath(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/xdg")
	def := "/var/db/keel/esp-nonces.record"
	if os.Geteuid() != 0 {
		def = "/xdg/keel/esp-nonces.record"
	}
	tests := []struct {
		seed      map[string]string
		want, err string
	}{
		{map[string]string{recordVar: "/srv/rec"}, "/srv/rec", ""},
		{map[string]string{recordVar: "rec"}, "", `keel_nonce_record: "rec" is not an absolute path`},
		{map[string]string{"keel_root": "/r", "keel_state_dir": "/s", ledgerVar: "/l/n"}, "/r/var/db/keel/esp-nonces.record", ""},
		{map[string]string{"keel_state_dir": "/s", ledgerVar: "/l/n"}, def, ""},
		{nil, def, ""},
	}
	for _, tc := range tests {
		got, err := nonceRecordPath(services.BuiltinEnv{Config: rcconf.New(tc.seed)})
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%v: %q, %v; want %q, %q", tc.seed, got, err, tc.want, tc.err)
		}
	}
}

// TestIPsecSettingsKeyed: the published digest of ipsec.conf (which holds
// the keys) is keyed, not a plain hash, yet still tracks changes.
func TestIPsecSettingsKeyed(t *testing.T) {
	root := appliance(t, "")
	conf := root["etc/ipsec.conf"].Data
	env := services.BuiltinEnv{Config: rcconf.New(map[string]string{"ipsec_file": "/etc/ipsec.conf"}), Root: root,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got := fileSettings(env)
	plain := sha256.Sum256(conf)
	if _, ok := got["ipsec_file_sha256"]; ok {
		t.Errorf("plain hash published: %v", got)
	}
	h := got["ipsec_file_hmac"]
	if len(h) != 32 || strings.Contains(hex.EncodeToString(plain[:]), h[:16]) {
		t.Errorf("ipsec_file_hmac %q (plain sha256 %x)", h, plain[:8])
	}
	if again := fileSettings(env)["ipsec_file_hmac"]; again != h {
		t.Errorf("digest not stable: %s then %s", h, again)
	}
	root["etc/ipsec.conf"].Data = append(append([]byte(nil), conf...), "\n# changed\n"...)
	if changed := fileSettings(env)["ipsec_file_hmac"]; changed == h {
		t.Error("digest did not change with the file")
	}
}
