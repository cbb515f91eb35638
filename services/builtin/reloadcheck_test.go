package builtin

import (
	"errors"
	"reflect"
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
