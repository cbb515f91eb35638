package main

// Security end-to-end tests: key material never leaves keeld (logs, status
// and API JSON, error text), bad ipsec_file input is rejected with
// file:line and changes nothing, and the control and notify sockets have
// the documented modes.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/etc"
	"github.com/keelinit/keel/services/builtin"
)

// secKey returns n distinctive key bytes for label; no two labels share a
// window of 6 bytes in practice.
func secKey(label string, n int) []byte {
	var out []byte
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("keel-security-%s-%d", label, i)))
		out = append(out, h[:]...)
	}
	return out[:n]
}

// keyForms lists the encodings under which a key (or any 8-byte window of
// it) could show up in text: hex in both cases, base64 and the raw bytes.
func keyForms(k []byte) []string {
	forms := []string{
		base64.StdEncoding.EncodeToString(k), base64.RawStdEncoding.EncodeToString(k),
		base64.URLEncoding.EncodeToString(k),
	}
	for i := 0; i+8 <= len(k); i++ {
		w := k[i : i+8]
		forms = append(forms, hex.EncodeToString(w), strings.ToUpper(hex.EncodeToString(w)), string(w))
	}
	return forms
}

// leaks returns the names of the keys of which text contains some form.
func leaks(text string, keys map[string][]byte) []string {
	var out []string
	for name, k := range keys {
		for _, f := range keyForms(k) {
			if strings.Contains(text, f) {
				out = append(out, fmt.Sprintf("%s (as %q)", name, f))
				break
			}
		}
	}
	return out
}

// checkNoKeys fails t if text contains any form of any key.
func checkNoKeys(t *testing.T, where, text string, keys map[string][]byte) {
	t.Helper()
	if l := leaks(text, keys); len(l) > 0 {
		t.Errorf("%s contains key material: %v", where, l)
	}
}

// applianceTree copies the embedded default appliance into a directory
// and replaces its ipsec.conf with conf.
func applianceTree(t *testing.T, conf string) string {
	t.Helper()
	files := map[string]string{}
	err := fs.WalkDir(etc.Root(), "etc", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(etc.Root(), p)
		files[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	files["etc/ipsec.conf"] = conf
	return writeTree(t, files)
}

func secIPsecConf(keys map[string][]byte) string {
	return fmt.Sprintf(`flush;
spdflush;
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -r 64 -u 1
	-E aes-gcm-16 0x%x;
add 192.0.2.2 192.0.2.1 esp 0x2001 -m tunnel -r 64 -u 1
	-E aes-gcm-16 0x%x;
add 192.0.2.1 192.0.2.2 esp 0x1002 -m tunnel -u 2
	-E rijndael-cbc 0x%x
	-A hmac-sha1 0x%x;
add 192.0.2.2 192.0.2.1 esp 0x2002 -m tunnel -u 2
	-E rijndael-cbc 0x%x
	-A hmac-sha1 0x%x;
spdadd 10.1.0.0/24 10.2.0.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/unique:1;
spdadd 10.2.0.0/24 10.1.0.0/24 any -P in ipsec esp/tunnel/192.0.2.2-192.0.2.1/unique:1;
spdadd 10.1.0.0/24 10.3.0.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/unique:2;
spdadd 10.3.0.0/24 10.1.0.0/24 any -P in ipsec esp/tunnel/192.0.2.2-192.0.2.1/unique:2;
`, keys["gcm-out"], keys["gcm-in"], keys["cbc-out"], keys["hmac-out"], keys["cbc-in"], keys["hmac-in"])
}

// TestKeysNeverLeave boots the default appliance with distinctive keys at
// debug log level, pushes traffic, queries every read endpoint in text and
// JSON, reloads ipsec with broken files (bad key length, non-hex key
// digit, unknown algorithm after a valid key) and a valid change, shuts
// down, and checks that no form of any key appears anywhere: log, stdout,
// stderr, JSON. It also checks that a rejected reload names file and line
// and leaves the installed SAs untouched.
func TestKeysNeverLeave(t *testing.T) {
	keys := map[string][]byte{
		"gcm-out": secKey("gcm-out", 20), "gcm-in": secKey("gcm-in", 20),
		"cbc-out": secKey("cbc-out", 16), "cbc-in": secKey("cbc-in", 16),
		"hmac-out": secKey("hmac-out", 20), "hmac-in": secKey("hmac-in", 20),
		"ascii": []byte("k33l-s3c-ascii!"), // 15 bytes: a bad AES key length
	}
	// The detector must see the keys in the file itself, in every form.
	if l := leaks(secIPsecConf(keys), keys); len(l) != 6 {
		t.Fatalf("detector finds %d of the 6 configured keys in the config: %v", len(l), l)
	}
	if l := leaks(strings.ToUpper(secIPsecConf(keys))+base64.StdEncoding.EncodeToString(keys["ascii"]), keys); len(l) != 7 {
		t.Fatalf("detector misses upper-case hex or base64: %v", l)
	}
	root := applianceTree(t, secIPsecConf(keys))
	d := startKeeld(t, root, "--log-level", "debug")

	// Wait for traffic so that the data path (and any rebind) has run.
	deadline := time.Now().Add(10 * time.Second)
	var v builtin.IPsec
	for time.Now().Before(deadline) {
		out, _, _ := d.keelctl(nil, "ipsec", "sa", "--json")
		v = builtin.IPsec{}
		_ = json.Unmarshal([]byte(out), &v)
		if len(v.SAs) == 4 && v.SAs[0].OutPackets+v.SAs[0].InPackets > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(v.SAs) != 4 {
		t.Fatalf("SAs: %+v", v)
	}
	var texts []string
	query := func(args ...string) {
		for _, a := range [][]string{args, append(append([]string(nil), args...), "--json")} {
			out, errs, _ := d.keelctl(nil, a...)
			checkNoKeys(t, "keelctl "+strings.Join(a, " "), out+errs, keys)
			texts = append(texts, out)
		}
	}
	for _, q := range [][]string{
		{"status"}, {"status", "ipsec"}, {"status", "pktgen"}, {"status", "cryptodev"}, {"status", "kld"},
		{"ipsec"}, {"ipsec", "sa"}, {"ipsec", "spd"}, {"ipsec", "if"}, {"crypto"}, {"kldstat"},
		{"boot"}, {"boot", "critical-chain"}, {"graph"},
	} {
		query(q...)
	}

	// Rejected reloads: each names ipsec.conf and a line, and leaves the
	// four SAs (same SPIs) in place.
	confPath := filepath.Join(root, "etc", "ipsec.conf")
	good := secIPsecConf(keys)
	bad := []struct{ name, conf, line string }{
		{"short key", strings.Replace(good, hex.EncodeToString(keys["gcm-out"]), hex.EncodeToString(keys["gcm-out"][:19]), 1), ":4:"},
		{"non-hex digit", strings.Replace(good, hex.EncodeToString(keys["cbc-in"]), hex.EncodeToString(keys["cbc-in"][:8])+"zz"+hex.EncodeToString(keys["cbc-in"][9:]), 1), ":11:"},
		{"bad auth after key", strings.Replace(good, "-A hmac-sha1 0x"+hex.EncodeToString(keys["hmac-out"]), "-A hmac-sha1 0x"+hex.EncodeToString(keys["hmac-out"])+" -Q", 1), ":9:"},
		{"ascii key", strings.Replace(good, "0x"+hex.EncodeToString(keys["cbc-out"]), `"`+string(keys["ascii"])+`"`, 1), ":8:"},
	}
	for _, b := range bad {
		if err := os.WriteFile(confPath, []byte(b.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := d.keelctl(nil, "reload", "ipsec")
		if code == 0 {
			t.Errorf("%s: reload accepted:\n%s", b.name, out)
		}
		checkNoKeys(t, "reload error ("+b.name+")", out+errs, keys)
		if !strings.Contains(errs, "ipsec.conf"+b.line) {
			t.Errorf("%s: error does not name ipsec.conf%s: %q", b.name, b.line, errs)
		}
		// A global reload sees the changed file too.
		out, errs, _ = d.keelctl(nil, "reload")
		checkNoKeys(t, "global reload ("+b.name+")", out+errs, keys)
		out, _, _ = d.keelctl(nil, "ipsec", "sa", "--json")
		var after builtin.IPsec
		_ = json.Unmarshal([]byte(out), &after)
		if len(after.SAs) != 4 {
			t.Errorf("%s: %d SAs after a rejected reload, want 4", b.name, len(after.SAs))
		}
		checkNoKeys(t, "ipsec sa after "+b.name, out, keys)
	}
	// A valid change (one SA re-keyed) is applied.
	keys["gcm-out2"] = secKey("gcm-out2", 20)
	changed := strings.Replace(good, hex.EncodeToString(keys["gcm-out"]), hex.EncodeToString(keys["gcm-out2"]), 1)
	if err := os.WriteFile(confPath, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := d.keelctl(nil, "reload", "ipsec"); code != 0 {
		t.Errorf("valid reload: %d %s %s", code, out, errs)
	}
	if out, errs, code := d.keelctl(nil, "reload"); code != 0 {
		t.Errorf("reload: %d %s %s", code, out, errs)
	}
	query("ipsec", "sa")
	query("status", "ipsec")
	if out, errs, code := d.keelctl(nil, "shutdown"); code != 0 {
		t.Errorf("shutdown: %s %s", out, errs)
	}
	d.waitExit(t)
	log := d.logText()
	checkNoKeys(t, "keeld log", log, keys)
	// The appliance's syslogd file, if any was written under the root.
	_ = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() || strings.HasPrefix(p, filepath.Join(root, "etc")) {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<24 {
			checkNoKeys(t, p, string(b), keys)
		}
		return nil
	})
	if !strings.Contains(log, "reloaded") {
		t.Errorf("log does not show the valid reload")
	}
	if bytes.Count([]byte(log), []byte("ipsec.conf:")) == 0 {
		t.Errorf("log does not name ipsec.conf positions for the rejected reloads")
	}
}

// TestRuntimeSocketModes checks the control socket is 0660, the notify
// socket 0666 (children may run as other users; senders are identified by
// SCM_CREDENTIALS) and keeld refuses a runtime dir writable by others.
func TestRuntimeSocketModes(t *testing.T) {
	root := writeTree(t, map[string]string{
		"etc/rc.d/a": svc("a", "", "name=a\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	d := startKeeld(t, root)
	for path, want := range map[string]os.FileMode{
		d.socket:                           0o660,
		filepath.Join(d.rt, "notify.sock"): 0o666,
	} {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want socket %v", path, fi.Mode(), err, want)
		}
	}
	if err := ensureRuntimeDir(d.rt); err != nil {
		t.Errorf("runtime dir of a running keeld: %v", err)
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := ensureRuntimeDir(shared); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("world-writable runtime dir accepted: %v", err)
	}
	link := filepath.Join(t.TempDir(), "rt")
	if err := os.Symlink(d.rt, link); err != nil {
		t.Fatal(err)
	}
	if err := ensureRuntimeDir(link); err == nil {
		t.Errorf("symlinked runtime dir accepted")
	}
}

// TestSyslogLineEscapes: a datagram from any local process cannot forge
// extra log lines or carry terminal escapes into the appliance's log file.
func TestSyslogLineEscapes(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 5e6, time.UTC)
	tests := []struct{ in, want string }{
		{"<13>app: hello\n", "<13>app: hello"},
		{"app: ok\x00", "app: ok"},
		{"app: one\nNov 30 09:00:00.000 keel sshd: forged root login", "app: one#012Nov 30 09:00:00.000 keel sshd: forged root login"},
		{"a\rb\x1b[2Jc\x7fd\te", "a#015b#033[2Jc#177d\te"},
		{"c1 \u009b31m", "c1 #23331m"},
		{"bad \xff utf8 é", "bad \uFFFD utf8 é"},
	}
	for _, tt := range tests {
		got := syslogLine(now, "keel", tt.in)
		want := "Nov 30 09:00:00.005 keel " + tt.want + "\n"
		if got != want {
			t.Errorf("syslogLine(%q) = %q, want %q", tt.in, got, want)
		}
		if strings.Count(got, "\n") != 1 {
			t.Errorf("syslogLine(%q) is not one line", tt.in)
		}
	}
}

// TestControlListenerUmask: with a permissive process umask the control
// socket still ends up 0660 (it is created under umask 0117, so it is never
// connectable by others, not even before the chmod), and the process umask
// is restored afterwards.
func TestControlListenerUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "sub", "keeld.sock")
	l, activated, err := controlListener(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if activated {
		t.Fatal("socket activation in a test")
	}
	if got := syscall.Umask(0); got != 0 {
		t.Errorf("umask left at %#o, want 0 restored", got)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("control socket %v %v, want socket 0660", fi.Mode(), err)
	}
}
