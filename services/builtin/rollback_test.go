package builtin

import (
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/services"
)

// newSA3001 adds an SA and a policy to the appliance's ipsec.conf: a
// configuration change that a rolled-back reload must not install.
const newSA3001 = "add 192.0.2.1 192.0.2.2 esp 0x3001 -m tunnel -u 3 -E aes-gcm-16 0x0a0b0c0d0e0f101112131415161718191a1b1c1d;\n" +
	"spdadd 10.1.0.0/24 10.5.0.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/unique:3;\n"

// sendThrough writes a packet for the first outbound policy to the
// current gateway's TUN and waits (5 s at most) until the gateway sent it
// as ESP.
func sendThrough(t *testing.T, b *testbed, fake *fakeGateways) {
	t.Helper()
	gw, tun := fake.last()
	if b.sys.Gateway() != gw {
		t.Fatal("the service's gateway is not the last one started")
	}
	before := gw.Status().Out.Packets
	var sel spd.Selector
	for _, p := range b.sys.Engine().Policies() {
		if p.Dir == spd.DirOut {
			sel = p.Sel
			break
		}
	}
	tun.Outbound <- innerPacket(sel, 500)
	if !poll(5*time.Second, func() bool { return gw.Status().Out.Packets > before }) {
		t.Fatalf("no ESP sent: %+v", gw.Status())
	}
}

// spis returns the SPIs of the running engine's SAs.
func spis(b *testbed) []uint32 {
	var out []uint32
	for _, sa := range b.sys.Engine().SAs() {
		out = append(out, sa.SPI)
	}
	return out
}

// TestIPsecReloadRollsBack: a reload that changes ipsec.conf and a
// gateway variable, whose new gateway cannot start (its port is in use),
// leaves everything as it was: the engine keeps its SAs and policies, the
// previous gateway configuration runs again and carries traffic, the
// service is running and says so, and the reload reports the error. When
// the previous gateway cannot start again either, the service stops and
// shows failed with the reason, and the next good reload starts it.
func TestIPsecReloadRollsBack(t *testing.T) {
	fake := &fakeGateways{}
	b := newTestbed(t, gwLocal, 2*time.Millisecond, fake)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	sendThrough(t, b, fake)
	conf := string(b.root["etc/ipsec.conf"].Data)
	wantSPIs := spis(b)
	wantPols := b.sys.Engine().Policies()
	fake.mu.Lock()
	oldCfg := fake.configs[0]
	fake.mu.Unlock()
	busy := &net4500Error{}

	// The new gateway fails; the old one comes back.
	fake.mu.Lock()
	fake.fails = []error{busy}
	fake.mu.Unlock()
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(conf + newSA3001)}
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte(gwLocal + "ipsec_natt_port=4501\n")}
	n := fake.count()
	_, err := b.m.Reload(b.ctx)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "ipsec_tun keel0") {
		t.Fatalf("reload: %v, want the gateway's address-in-use error", err)
	}
	if got := spis(b); !reflect.DeepEqual(got, wantSPIs) {
		t.Errorf("SAs after the failed reload: %x, want %x", got, wantSPIs)
	}
	if got := b.sys.Engine().Policies(); !reflect.DeepEqual(got, wantPols) {
		t.Errorf("policies after the failed reload: %v", got)
	}
	if fake.count() != n+1 {
		t.Fatalf("%d gateways started, want the previous one again", fake.count()-n)
	}
	fake.mu.Lock()
	restored := fake.configs[len(fake.configs)-1]
	fake.mu.Unlock()
	if !reflect.DeepEqual(restored, oldCfg) {
		t.Errorf("restored gateway config %+v, want %+v", restored, oldCfg)
	}
	st := b.status("ipsec")
	if st.State != services.StateRunning || !strings.Contains(st.StatusText, "tun keel0 udp 192.0.2.1->192.0.2.2") || strings.Contains(st.StatusText, "FAILED") {
		t.Errorf("ipsec after the rollback: %s %q", st.State, st.StatusText)
	}
	sendThrough(t, b, fake)
	d, _ := b.m.Detail("ipsec", 50)
	if !strings.Contains(strings.Join(d.Log, "\n"), "starting the previous gateway again") {
		t.Errorf("the rollback is not in the log:\n%s", strings.Join(d.Log, "\n"))
	}

	// The port is free again: the same reload now applies.
	if _, err := b.m.Reload(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := spis(b); len(got) != len(wantSPIs)+1 || got[len(got)-1] != 0x3001 {
		t.Fatalf("SAs after the good reload: %x", got)
	}
	fake.mu.Lock()
	if c := fake.configs[len(fake.configs)-1]; c.Port != 4501 {
		t.Errorf("new gateway port %d", c.Port)
	}
	fake.mu.Unlock()
	sendThrough(t, b, fake)

	// Neither the new gateway nor the previous one can start: ipsec stops
	// and shows failed.
	fake.mu.Lock()
	fake.fails = []error{busy, errors.New("open /dev/net/tun: no such device")}
	fake.mu.Unlock()
	b.root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte(gwLocal + "ipsec_natt_port=4502\n")}
	_, err = b.m.Reload(b.ctx)
	if !errors.Is(err, services.ErrStopped) || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "no such device") {
		t.Fatalf("reload: %v, want both errors and ErrStopped", err)
	}
	st = b.status("ipsec")
	if st.State != services.StateFailed || !strings.Contains(st.Reason, "no such device") {
		t.Errorf("ipsec: %s %q, want failed with the reason", st.State, st.Reason)
	}
	if b.sys.Engine() != nil || b.sys.Gateway() != nil {
		t.Error("a stopped ipsec left its engine or gateway")
	}
	// Fixed: the next reload starts it.
	res, err := b.m.Reload(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := b.status("ipsec"); st.State != services.StateRunning || len(res.Restarted)+len(res.Started) == 0 {
		t.Fatalf("after the fix: ipsec %s, reload %+v", st.State, res)
	}
	sendThrough(t, b, fake)
}

// net4500Error is what binding a taken UDP port returns.
type net4500Error struct{}

func (*net4500Error) Error() string { return "listen udp :4501: bind: address already in use" }
func (*net4500Error) Unwrap() error { return syscall.EADDRINUSE }
