package builtin

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/services"
)

// TestReloadInvalidChangesNothing is the reproduction of issue 14 §4: a
// global reload with a typo in ipsec.conf used to keep ipsec's old
// configuration but stop pktgen (whose settings include ipsec.conf) and
// leave it failed. Now the reload validates every changed service first:
// with errors in ipsec.conf, in rc.conf (pktgen_rate) and in an rc.d
// file at once, it changes nothing, lists all three, and every service
// keeps running as before, pktgen with its traffic.
func TestReloadInvalidChangesNothing(t *testing.T) {
	b := newTestbed(t, "syslogd_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.checkActive("after boot")
	before := map[string]services.Status{}
	for _, s := range b.m.Status() {
		before[s.Name] = s
	}
	wantSPIs := spis(b)
	conf := string(b.root["etc/ipsec.conf"].Data)

	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf + "add 192.0.2.1 192.0.2.2 esp 0x3001 -m tunel -E aes-gcm-16 0x0a0b0c0d0e0f101112131415161718191a1b1c1d;\n")}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("syslogd_enable=NO\npktgen_rate=lots\n")}
	b.root["etc/rc.d/cleanvar"] = &fstest.MapFile{Data: append(append([]byte(nil), b.root["etc/rc.d/cleanvar"].Data...), "start_timout=3s\n"...)}
	res, err := b.m.Reload(b.ctx)
	if !errors.Is(err, services.ErrReloadInvalid) {
		t.Fatalf("reload: %v, want ErrReloadInvalid", err)
	}
	for _, want := range []string{"etc/ipsec.conf:30:", "mode: expected transport", "pktgen_rate: want 1..1000000", "etc/rc.d/cleanvar:", "start_timout"} {
		if !strings.Contains(strings.Join(res.Errors, "\n"), want) || !strings.Contains(err.Error(), want) {
			t.Errorf("reload errors lack %q:\n%s", want, strings.Join(res.Errors, "\n"))
		}
	}
	if len(res.Errors) != 3 {
		t.Errorf("%d errors, want 3:\n%s", len(res.Errors), strings.Join(res.Errors, "\n"))
	}
	if strings.Contains(err.Error(), "0a0b0c0d") {
		t.Errorf("a reload error shows key material: %v", err)
	}
	if len(res.Restarted)+len(res.Reloaded)+len(res.Started)+len(res.Stopped) > 0 {
		t.Errorf("a refused reload changed %+v", res)
	}
	for _, s := range b.m.Status() {
		if o := before[s.Name]; s.State != o.State || !s.Since.Equal(o.Since) {
			t.Errorf("%s: %s since %v, was %s since %v", s.Name, s.State, s.Since, o.State, o.Since)
		}
	}
	if got := spis(b); !reflect.DeepEqual(got, wantSPIs) {
		t.Errorf("SAs %x, want %x", got, wantSPIs)
	}
	sent := b.sys.pg.sent.Load()
	if !poll(5*time.Second, func() bool { return b.sys.pg.sent.Load() > sent }) {
		t.Error("pktgen sends nothing after the refused reload")
	}

	// Fixed, the same reload applies.
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf + newSA3001)}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("syslogd_enable=NO\npktgen_rate=300\n")}
	delete(b.root, "etc/rc.d/cleanvar")
	b.root["etc/rc.d/cleanvar"] = appliance(t, "")["etc/rc.d/cleanvar"]
	if res, err = b.m.Reload(b.ctx); err != nil {
		t.Fatalf("good reload: %v %+v", err, res)
	}
	if got := spis(b); len(got) != len(wantSPIs)+1 {
		t.Errorf("SAs after the good reload: %x", got)
	}
	b.checkActive("after the good reload")
}

// webService is an rc.d daemon ordered after ipsec that starts only when
// web_dir exists (it writes its pidfile, its readiness, after checking):
// a failure that no check can see before the reload applies it.
func webService(rt string) []byte {
	return []byte(`# PROVIDE: web
# REQUIRE: ipsec

name="web"
type="daemon"
command="/bin/sh"
command_args="-c 'test -d ${web_dir} || exit 3; echo \$\$ > ` + rt + `/web.pid; exec sleep 60'"
pidfile="` + rt + `/web.pid"
start_timeout="5s"
`)
}

// TestReloadRollbackUndoesIPsec: a reload changes ipsec.conf (ipsec
// reloads in place, pktgen restarts) and web_dir, and web, after ipsec,
// cannot start. The reload rolls back everything: ipsec runs its previous
// SAs again although the file on disk holds the new ones, web runs on
// its previous directory, and pktgen, restarted on the SAs the engine
// runs, carries traffic through them.
func TestReloadRollbackUndoesIPsec(t *testing.T) {
	b := newTestbed(t, "syslogd_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	// A first reload adds web.
	dir := t.TempDir()
	b.root["etc/rc.d/web"] = &fstest.MapFile{Data: webService(b.rt)}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("syslogd_enable=NO\nweb_dir=" + dir + "\n")}
	if res, err := b.m.Reload(b.ctx); err != nil || !reflect.DeepEqual(res.Started, []string{"web"}) {
		t.Fatalf("adding web: %v %+v", err, res)
	}
	b.checkActive("with web")
	webPID := b.status("web").PID
	wantSPIs := spis(b)
	wantPols := b.sys.Engine().Policies()

	// The new ipsec.conf re-keys 0x1001 (a pktgen that mirrored the file
	// on disk instead of the SAs the engine runs could not decrypt) and
	// adds 0x3001.
	conf := string(b.root["etc/ipsec.conf"].Data)
	rekeyed := strings.Replace(conf, "0x6b65656c2d64656d6f2d6b65792d30316b65656c", "0x00112233445566778899aabbccddeeff01020304", 1)
	if rekeyed == conf {
		t.Fatal("the appliance's SA 0x1001 has another key: update the test")
	}
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(rekeyed + newSA3001)}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("syslogd_enable=NO\nweb_dir=" + dir + "/gone\n")}
	res, err := b.m.Reload(b.ctx)
	if !errors.Is(err, services.ErrRolledBack) || !strings.Contains(err.Error(), "web: ") {
		t.Fatalf("reload: %v, want web's failure and ErrRolledBack", err)
	}
	if !slices.Contains(res.RolledBack, "web") || !slices.Contains(res.RolledBack, "pktgen") {
		t.Errorf("rolled back %v, want web and pktgen", res.RolledBack)
	}
	if got := spis(b); !reflect.DeepEqual(got, wantSPIs) {
		t.Errorf("SAs after the rollback %x, want the previous %x", got, wantSPIs)
	}
	if got := b.sys.Engine().Policies(); !reflect.DeepEqual(got, wantPols) {
		t.Errorf("policies after the rollback: %v", got)
	}
	b.checkActive("after the rollback")
	if st := b.status("web"); st.PID == 0 || st.PID == webPID {
		t.Errorf("web: pid %d (was %d), want it started again on its previous directory", st.PID, webPID)
	}
	d, _ := b.m.Detail("web", 1)
	if d.Settings["web_dir"] != dir {
		t.Errorf("web runs with web_dir %q, want %q", d.Settings["web_dir"], dir)
	}
	delivered := b.sys.pg.delivered.Load()
	if !poll(5*time.Second, func() bool { return b.sys.pg.delivered.Load() > delivered+10 }) {
		t.Error("pktgen delivers nothing after the rollback")
	}

	// The directory exists: the same reload applies, 0x3001 included.
	if err := os.Mkdir(dir+"/gone", 0o755); err != nil {
		t.Fatal(err)
	}
	if res, err := b.m.Reload(b.ctx); err != nil {
		t.Fatalf("good reload: %v %+v", err, res)
	}
	if got := spis(b); len(got) != len(wantSPIs)+1 {
		t.Errorf("SAs after the good reload: %x", got)
	}
	b.checkActive("after the good reload")
}

// TestReloadRestartsDependentsOfRestarted: a reload that changes
// cryptodev_modules (cryptodev restarts: its framework closes) and
// ipsec.conf (which ipsec alone would apply in place) restarts ipsec on
// the new framework instead of reloading it on the closed one, which
// failed to bind the new SA ("crypto: closed") and left pktgen failed.
func TestReloadRestartsDependentsOfRestarted(t *testing.T) {
	b := newTestbed(t, "syslogd_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	conf := string(b.root["etc/ipsec.conf"].Data)
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf + newSA3001)}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("syslogd_enable=NO\ncryptodev_modules=\"cryptosoft aesni\"\n")}
	res, err := b.m.Reload(b.ctx)
	if err != nil {
		t.Fatalf("reload: %v %+v", err, res)
	}
	if !slices.Contains(res.Restarted, "ipsec") || slices.Contains(res.Reloaded, "ipsec") {
		t.Errorf("ipsec not restarted with cryptodev: %+v", res)
	}
	b.checkActive("after the reload")
	if got := spis(b); len(got) != 5 || got[4] != 0x3001 {
		t.Errorf("SAs %x, want the new 0x3001 too", got)
	}
	for _, sa := range b.sys.Engine().SAs() {
		if sa.Provider == "" {
			t.Errorf("SA 0x%x bound to no provider", sa.SPI)
		}
	}
}

// TestIPsecTxZeroesReplacedFiles: the ipsec_file bytes that ipsecTx keeps
// for an undo are zeroed once nothing can need them: the previous file's
// when a global reload applied, when a one-service reload applied, and
// the running one's on stop.
func TestIPsecTxZeroesReplacedFiles(t *testing.T) {
	b := newTestbed(t, "syslogd_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	kept := func() []byte {
		b.sys.ipsTx.mu.Lock()
		defer b.sys.ipsTx.mu.Unlock()
		if b.sys.ipsTx.prev != nil {
			t.Error("bytes kept for an undo after the reload ended")
		}
		return b.sys.ipsTx.cur
	}
	zeroed := func(what string, p []byte) {
		t.Helper()
		if len(p) == 0 {
			t.Fatalf("%s: no bytes were kept", what)
		}
		if strings.Trim(string(p), "\x00") != "" {
			t.Errorf("%s: the replaced ipsec_file's bytes (keys) are not zeroed", what)
		}
	}
	first := kept()
	if !bytes.Contains(first, []byte("0x6b65656c")) {
		t.Fatalf("ipsecTx keeps %q, want the file with its keys", first)
	}
	conf := string(b.root["etc/ipsec.conf"].Data)
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf + newSA3001)}
	if _, err := b.m.Reload(b.ctx); err != nil {
		t.Fatal(err)
	}
	zeroed("global reload", first)
	second := kept()
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf)}
	if err := b.m.ReloadService(b.ctx, "ipsec"); err != nil {
		t.Fatal(err)
	}
	zeroed("keelctl reload ipsec", second)
	third := kept()
	if err := b.m.Stop(b.ctx, "ipsec"); err != nil {
		t.Fatal(err)
	}
	zeroed("stop", third)
}
