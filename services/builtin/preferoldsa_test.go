package builtin

import (
	"testing"
	"testing/fstest"
	"time"
)

// TestPreferredOldSA: rc.conf's ipsec_preferred_oldsa reaches the engine
// at start and on reload (default NO: the newest SA).
func TestPreferredOldSA(t *testing.T) {
	b := newTestbed(t, "syslogd_enable=NO\npktgen_enable=NO\nipsec_preferred_oldsa=YES\n", 5*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	eng := b.sys.ips.engine()
	if eng == nil || !eng.PreferOldSA() {
		t.Fatalf("after boot with ipsec_preferred_oldsa=YES: engine %v", eng)
	}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("syslogd_enable=NO\npktgen_enable=NO\n")}
	if _, err := b.m.Reload(b.ctx); err != nil {
		t.Fatal(err)
	}
	if e := b.sys.ips.engine(); e != eng || e.PreferOldSA() {
		t.Errorf("after reload with the default (NO): same engine %v, prefers old %v", e == eng, e.PreferOldSA())
	}
}
