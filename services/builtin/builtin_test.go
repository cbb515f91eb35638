package builtin

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	_ "github.com/keelinit/keel/crypto/aesni"
	_ "github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
)

// hasMetric reports whether got (from gather) has a sample of the metric
// name.
func hasMetric(got map[string]float64, name string) bool {
	for key := range got {
		if n, _, _ := strings.Cut(key, ","); n == name {
			return true
		}
	}
	return false
}

func TestApplianceBuiltins(t *testing.T) {
	if !hasModule("aesni") {
		t.Skip("aesni not registered on this CPU")
	}
	b := newTestbed(t, "kld_list=\"cryptosoft aesni\"\nsyslogd_enable=NO\npktgen_rate=500\n", 5*time.Millisecond, nil)
	sys, m, root, ctx := b.sys, b.m, b.root, b.ctx
	if err := m.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	b.checkActive("boot")
	// The control API endpoints of the builtins.
	c := b.serve()
	waitSAs := func(provider string) IPsec {
		t.Helper()
		var v IPsec
		if !poll(10*time.Second, func() bool {
			v = IPsec{}
			if err := c.Get(ctx, "/v1/ipsec/sa", nil, &v); err != nil {
				t.Fatal(err)
			}
			ok := len(v.SAs) == 4
			for _, sa := range v.SAs {
				ok = ok && sa.Provider == provider && sa.OutPackets+sa.InPackets > 0
			}
			return ok
		}) {
			t.Fatalf("SAs not all on %s with traffic: %+v", provider, v.SAs)
		}
		return v
	}
	before := waitSAs("aesni")
	// pktgen's data path allocates nothing per packet in steady state.
	sys.pg.mu.Lock()
	peer := sys.pg.peer
	sys.pg.mu.Unlock()
	eng := sys.ips.engine()
	pol := eng.Policies()[0]
	fl := flow{eng: eng, peer: peer, pkt: innerPacket(pol.Sel, 1400)}
	pool := ipsec.NewPool(0)
	if n := sys.pg.push(pool, fl, 32); n != 32 {
		t.Fatalf("push delivered %d of 32", n)
	}
	if a := testing.AllocsPerRun(50, func() { sys.pg.push(pool, fl, 32) }); a > 1 && !raceEnabled {
		t.Errorf("pktgen push: %.1f allocations per 32-packet batch", a)
	}
	// Unloading aesni moves every SA to cryptosoft live; loading it again
	// moves them back; traffic keeps flowing.
	var st []modules.Stat
	if err := c.Post(ctx, "/v1/modules/unload", ModuleRequest{Name: "aesni"}, &st); err != nil {
		t.Fatal(err)
	}
	waitSAs("cryptosoft")
	if err := c.Post(ctx, "/v1/modules/load", ModuleRequest{Name: "aesni"}, &st); err != nil {
		t.Fatal(err)
	}
	after := waitSAs("aesni")
	for i := range after.SAs {
		if after.SAs[i].Rebinds < before.SAs[i].Rebinds+2 {
			t.Errorf("SA 0x%x rebinds %d -> %d", after.SAs[i].SPI, before.SAs[i].Rebinds, after.SAs[i].Rebinds)
		}
		if len(after.SAs[i].Drops) > 0 {
			t.Errorf("SA 0x%x drops %v", after.SAs[i].SPI, after.SAs[i].Drops)
		}
	}
	if err := c.Post(ctx, "/v1/modules/unload", ModuleRequest{Name: "nonexistent"}, nil); err == nil {
		t.Error("unloading an unknown module succeeded")
	}
	var cv Crypto
	if err := c.Get(ctx, "/v1/crypto", nil, &cv); err != nil || len(cv.Providers) != 2 || len(cv.Bindings) < 4 {
		t.Errorf("crypto view %+v %v", cv, err)
	}
	var spdv IPsec
	if err := c.Get(ctx, "/v1/ipsec/spd", nil, &spdv); err != nil || len(spdv.Policies) != 4 || !strings.Contains(spdv.Policies[0].Policy, "10.1.0.0/24") {
		t.Errorf("spd view %+v %v", spdv, err)
	}
	// A changed ipsec.conf is applied in place; pktgen, which mirrors the
	// SAs, restarts; nothing else does.
	conf := string(root["etc/ipsec.conf"].Data)
	cut := strings.Index(conf, "# AES-128-CBC")
	// A broken file is refused and the running configuration stays.
	root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf + "add 192.0.2.1 192.0.2.2 esp 12 -E null;\n")}
	if _, err := m.Reload(ctx); err == nil || !strings.Contains(err.Error(), "ipsec.conf:") {
		t.Errorf("reload of a broken ipsec.conf: %v", err)
	}
	if n := len(sys.ips.engine().SAs()); n != 4 {
		t.Errorf("%d SAs after a failed reload, want 4", n)
	}
	root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf[:cut] + "spdadd 10.1.0.0/24 10.2.0.0/24 any -P out ipsec\n\tesp/tunnel/192.0.2.1-192.0.2.2/unique:1;\nspdadd 10.2.0.0/24 10.1.0.0/24 any -P in ipsec\n\tesp/tunnel/192.0.2.2-192.0.2.1/unique:1;\n")}
	res, err := m.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Reloaded, ",") != "ipsec" || strings.Join(append(res.Restarted, res.Started...), ",") != "pktgen" {
		t.Errorf("reload: %+v", res)
	}
	if n := len(sys.ips.engine().SAs()); n != 2 {
		t.Errorf("%d SAs after reload, want 2", n)
	}
	// Restarting cryptodev restarts the builtins holding its framework.
	if err := m.Restart(ctx, "cryptodev"); err != nil {
		t.Fatal(err)
	}
	b.checkActive("after restart")
	var v2 IPsec
	if !poll(10*time.Second, func() bool {
		v2 = IPsec{}
		_ = c.Get(ctx, "/v1/ipsec/sa", nil, &v2)
		return len(v2.SAs) == 2 && v2.SAs[0].Provider == "aesni" && v2.SAs[0].OutPackets > 0 && v2.SAs[1].InPackets > 0
	}) {
		t.Errorf("after cryptodev restart: %+v", v2.SAs)
	}
	// Prometheus metrics.
	metrics := gather(t, append(sys.Collectors(), services.NewCollector(m))...)
	for _, want := range []string{"keel_service_state", "keel_boot_duration_seconds", "keel_crypto_provider_state",
		"keel_crypto_provider_calibrated_bytes_per_second", "keel_ipsec_sa_packets_total", "keel_ipsec_sa_bytes_total", "keel_ipsec_sa_rebinds_total"} {
		if !hasMetric(metrics, want) {
			t.Errorf("metric %s missing", want)
		}
	}
	// Shutdown stops pktgen, ipsec, kld and cryptodev cleanly.
	if err := m.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if sys.Framework() != nil || sys.ips.running() {
		t.Error("subsystems still running after shutdown")
	}
}

func TestCryptodevFailureBlocksDependents(t *testing.T) {
	b := newTestbed(t, "cryptodev_modules=\"cryptosoft nosuchprovider\"\nsyslogd_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err == nil || !strings.Contains(err.Error(), "cryptodev") {
		t.Fatalf("boot: %v", err)
	}
	if s := b.status("cryptodev"); s.State != services.StateFailed || !strings.Contains(s.Reason, "nosuchprovider") {
		t.Errorf("cryptodev: %+v", s)
	}
	for _, n := range []string{"kld", "ipsec", "pktgen"} {
		if s := b.status(n); s.State != services.StateBlocked || s.Reason != "blocked by cryptodev" {
			t.Errorf("%s: %+v", n, s)
		}
	}
	if b.sys.Framework() != nil || b.sys.Loader().IsLoaded("cryptosoft") {
		t.Error("failed cryptodev left its framework or modules behind")
	}
}

func TestKldSkipsModulesThatFail(t *testing.T) {
	b := newTestbed(t, "kld_list=\"nosuchmodule cryptosoft\"\nsyslogd_enable=NO\npktgen_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.status("kld"); s.State != services.StateRunning || !strings.Contains(s.StatusText, "FAILED: nosuchmodule") {
		t.Errorf("kld: %+v", s)
	}
}
