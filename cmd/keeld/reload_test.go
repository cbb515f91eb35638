package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
)

// loaded returns the names of the modules keeld has loaded.
func (d *keeldProc) loaded() []string {
	d.t.Helper()
	out, errs, code := d.keelctl(nil, "kldstat", "--json")
	if code != 0 {
		d.t.Fatalf("kldstat: %d %s", code, errs)
	}
	var st []modules.Stat
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		d.t.Fatal(err)
	}
	var names []string
	for _, s := range st {
		if s.State == modules.StateLoaded {
			names = append(names, s.Name)
		}
	}
	return names
}

// TestReloadRollsBack drives the real keeld: a global reload changes
// kld_list (kld restarts, without glxsb, and pktgen with it) and moves
// syslogd's socket into a directory that does not exist, which only
// starting syslogd shows. The reload fails on syslogd and rolls back: kld
// runs its previous list again (glxsb is loaded), syslogd runs on its
// previous socket, pktgen runs, and keelctl reload exits non-zero naming
// the failure and what was rolled back. Before, kld stayed on the new
// list and syslogd stayed failed. The same reload with a directory that
// exists then applies.
func TestReloadRollsBack(t *testing.T) {
	root := applianceTree(t, mustRead(t, "../../etc/ipsec.conf"))
	d := startKeeld(t, root)
	if got := d.loaded(); !strings.Contains(strings.Join(got, " "), "glxsb") {
		t.Fatalf("glxsb not loaded at boot: %v", got)
	}
	before := d.status()
	for _, n := range []string{"kld", "syslogd", "pktgen", "ipsec"} {
		if before[n].State != services.StateRunning {
			t.Fatalf("%s: %s %s", n, before[n].State, before[n].Reason)
		}
	}
	// Issue 14's reproduction first: a typo in ipsec.conf (and one in
	// rc.conf) used to stop pktgen and leave it failed. The reload is
	// refused, names both, and nothing restarts.
	conf := filepath.Join(root, "etc/ipsec.conf")
	good := mustRead(t, conf)
	if err := os.WriteFile(conf, []byte(strings.Replace(good, "-m tunnel", "-m tunel", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(root, "etc/rc.conf"), "pktgen_size=9000\n")
	out, errs, code := d.keelctl(nil, "reload")
	if code == 0 {
		t.Fatalf("reload with a typo in ipsec.conf exited 0:\n%s", out)
	}
	for _, want := range []string{"configuration invalid, nothing changed", conf + ":9:", root + "/etc/rc.conf:", "pktgen_size: want 64..1500"} {
		if !strings.Contains(errs, want) {
			t.Errorf("keelctl reload's error lacks %q:\n%s", want, errs)
		}
	}
	for n, s := range d.status() {
		if s.State != before[n].State || s.PID != before[n].PID || !s.Since.Equal(before[n].Since) {
			t.Errorf("the refused reload changed %s: %s %q", n, s.State, s.Reason)
		}
	}
	if err := os.WriteFile(conf, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := mustRead(t, filepath.Join(root, "etc/rc.conf"))
	if err := os.WriteFile(filepath.Join(root, "etc/rc.conf"), []byte(strings.TrimSuffix(rc, "pktgen_size=9000\n")), 0o644); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(d.rt, "log.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("syslogd's socket: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	local := filepath.Join(root, "etc/rc.conf.local")
	if err := os.WriteFile(local, []byte("kld_list=\"cryptosoft aesni\"\nsyslogd_socket=\""+missing+"/log.sock\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = d.keelctl(nil, "reload")
	if code == 0 {
		t.Fatalf("reload that cannot start syslogd exited 0:\n%s", out)
	}
	for _, want := range []string{"rolled back", "syslogd: ", "before it was ready"} {
		if !strings.Contains(errs, want) {
			t.Errorf("keelctl reload's error lacks %q:\n%s", want, errs)
		}
	}
	after := d.status()
	for _, n := range []string{"kld", "syslogd", "pktgen", "ipsec", "cryptodev"} {
		if after[n].State != services.StateRunning {
			t.Errorf("after the rollback %s: %s %q", n, after[n].State, after[n].Reason)
		}
	}
	if got := d.loaded(); !strings.Contains(strings.Join(got, " "), "glxsb") {
		t.Errorf("after the rollback kld runs without glxsb (the new kld_list): %v", got)
	}
	if det, _, _ := d.keelctl(nil, "status", "syslogd"); !strings.Contains(det, "--socket "+sock+" ") {
		t.Errorf("syslogd is not back on %s:\n%s", sock, det)
	}
	if after["ipsec"].Since != before["ipsec"].Since {
		t.Errorf("ipsec, which the reload does not change, was restarted")
	}

	// The directory exists: the same reload applies.
	if err := os.MkdirAll(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := d.keelctl(nil, "reload"); code != 0 {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errs)
	}
	if got := d.loaded(); strings.Contains(strings.Join(got, " "), "glxsb") {
		t.Errorf("glxsb still loaded after the good reload: %v", got)
	}
	if st := d.status()["syslogd"]; st.State != services.StateRunning {
		t.Errorf("syslogd after the good reload: %s %q", st.State, st.Reason)
	}
	if _, err := os.Stat(filepath.Join(missing, "log.sock")); err != nil {
		t.Errorf("syslogd's new socket: %v", err)
	}
}
