package builtin

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/etc"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/netio"
	"github.com/keelinit/keel/netio/netiotest"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/rcconf"
)

// fakeGateways replaces dataplane.Start with gateways on the in-memory
// I/O of netio/netiotest and records what the ipsec service asked for.
type fakeGateways struct {
	mu      sync.Mutex
	configs []dataplane.Config
	gws     []*dataplane.Gateway
	tuns    []*netiotest.TUN
	outers  []*netiotest.Outer
	routes  [][]netip.Prefix
	removed [][]netip.Prefix // what delRoutes was asked to remove
	fail    error            // returned by the next start
	fails   []error          // then these, one per start
}

func (f *fakeGateways) start(_ context.Context, eng *ipsec.Engine, cfg dataplane.Config) (*dataplane.Gateway, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail; err != nil {
		f.fail = nil
		return nil, err
	}
	if len(f.fails) > 0 {
		err := f.fails[0]
		f.fails = f.fails[1:]
		return nil, err
	}
	kind := netio.KindUDP
	if cfg.Encap == dataplane.EncapESP {
		kind = netio.KindESP
	}
	o, _ := netiotest.Pipe(netip.AddrPortFrom(cfg.Local, 4500), netip.AddrPortFrom(cfg.Peer, 4500), kind)
	tun := netiotest.NewTUN(cfg.TUN, 1400)
	gw, err := dataplane.New(eng, tun, o, cfg)
	if err != nil {
		return nil, err
	}
	f.configs = append(f.configs, cfg)
	f.gws = append(f.gws, gw)
	f.tuns = append(f.tuns, tun)
	f.outers = append(f.outers, o)
	return gw, nil
}

func (f *fakeGateways) setRoutes(name string, routes []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes = append(f.routes, routes)
	return nil
}

func (f *fakeGateways) delRoutes(name string, routes []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, routes)
	return nil
}

func (f *fakeGateways) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.gws)
}

func (f *fakeGateways) last() (*dataplane.Gateway, *netiotest.TUN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gws[len(f.gws)-1], f.tuns[len(f.tuns)-1]
}

// closed reports whether gw's loops stop within wait.
func closed(gw *dataplane.Gateway, wait time.Duration) bool {
	select {
	case <-gw.Done():
		return true
	case <-time.After(wait):
		return false
	}
}

const gwLocal = "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\nipsec_tun=keel0\nipsec_local=192.0.2.1\nipsec_peer=192.0.2.2\n"

// TestIPsecGateway: with ipsec_tun set, the ipsec service runs a gateway
// on its engine, shows it in its status, the control API and the metrics,
// and reconciles it on reload: a changed ipsec.conf keeps it and adds the
// new policies' routes, a changed gateway variable restarts it, a bad one is
// refused with the running gateway kept, an unset ipsec_tun stops it.
func TestIPsecGateway(t *testing.T) {
	fake := &fakeGateways{}
	b := newTestbed(t, gwLocal, 2*time.Millisecond, fake)
	sys, m, root, ctx := b.sys, b.m, b.root, b.ctx
	if err := m.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	ipsecStatus := func() services.Status { return b.status("ipsec") }
	if st := ipsecStatus(); st.State != services.StateRunning || !strings.Contains(st.StatusText, "tun keel0 udp 192.0.2.1->192.0.2.2") {
		t.Fatalf("ipsec: %+v", st)
	}
	if fake.count() != 1 || sys.Gateway() == nil {
		t.Fatalf("%d gateways started", fake.count())
	}
	c := b.serve()

	// Traffic: one packet for the first policy is encrypted and sent, one
	// for no policy is dropped and counted.
	gw, tun := fake.last()
	pol := sys.Engine().Policies()[0]
	tun.Outbound <- innerPacket(pol.Sel, 1000)
	tun.Outbound <- innerPacket(spd.Selector{Src: pol.Sel.Src, Dst: netip.MustParsePrefix("10.9.0.0/24")}, 1000)
	var v IPsec
	if !poll(10*time.Second, func() bool {
		v = IPsec{}
		if err := c.Get(ctx, "/v1/ipsec/if", nil, &v); err != nil {
			t.Fatal(err)
		}
		return len(v.Interfaces) == 1 && v.Interfaces[0].Out.Packets == 1 && v.Interfaces[0].Out.Drops["no-policy"] == 1
	}) {
		t.Fatalf("/v1/ipsec/if: %+v", v)
	}
	if i := v.Interfaces[0]; i.Name != "keel0" || i.Encap != "udp" || i.Local != "192.0.2.1" || i.Peer != "192.0.2.2" ||
		i.Out.ReadPackets != 2 || i.Out.DropTotal != 1 || i.Out.Bytes == 0 || len(v.SAs) != 0 || len(v.Policies) != 0 ||
		len(i.Peers) != 1 || i.Peers[0].Addr != "192.0.2.2:4500" || i.Peers[0].OutPackets != 1 || i.Peers[0].OutBytes != i.Out.Bytes {
		t.Errorf("/v1/ipsec/if: %+v", v)
	}
	var all IPsec
	if err := c.Get(ctx, "/v1/ipsec", nil, &all); err != nil || len(all.Interfaces) != 1 || len(all.SAs) != 4 || len(all.Policies) != 4 {
		t.Errorf("/v1/ipsec: %+v %v", all, err)
	}
	wantMetrics(t, map[string]float64{
		"keel_ipsec_if_packets_total,dir=out,if=keel0":                       1,
		"keel_ipsec_peer_packets_total,dir=out,if=keel0,peer=192.0.2.2:4500": 1,
		"keel_ipsec_if_read_packets_total,dir=out,if=keel0":                  2,
		"keel_ipsec_if_drops_total,dir=out,if=keel0,reason=no-policy":        1,
		"keel_ipsec_if_up,encap=udp,if=keel0,outer=pipe:192.0.2.1:4500":      1,
	}, sys.Collectors()...)

	conf := string(root["etc/ipsec.conf"].Data)
	steps := []struct {
		name    string
		kill    bool   // stop the running gateway's loops before the reload
		service bool   // keelctl reload ipsec instead of a reload of everything
		local   string // rc.conf.local
		conf    string // ipsec.conf
		wantErr string
		started int    // gateways started by the step
		closed  bool   // the previous gateway was closed
		status  string // expected in the ipsec status text; "" for no tun
		route   string // expected among the routes set
		unroute string // expected among the routes removed by the step
	}{
		{name: "ipsec.conf adds a policy", local: gwLocal,
			conf:   conf + "spdadd 10.1.0.0/24 10.4.0.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/unique:2;\n",
			status: "tun keel0 udp 192.0.2.1->192.0.2.2", route: "10.4.0.0/24"},
		{name: "ipsec.conf removes it again", local: gwLocal,
			status: "tun keel0 udp 192.0.2.1->192.0.2.2", route: "10.2.0.0/24", unroute: "10.4.0.0/24"},
		{name: "encap changes", local: gwLocal + "ipsec_encap=esp\n", started: 1, closed: true,
			status: "tun keel0 esp 192.0.2.1->192.0.2.2"},
		{name: "bad encap is refused", local: gwLocal + "ipsec_encap=gre\n", wantErr: "ipsec_encap",
			status: "tun keel0 esp 192.0.2.1->192.0.2.2"},
		{name: "peer no SA names is refused", local: gwLocal + "ipsec_encap=esp\nipsec_peer=192.0.2.3\n", wantErr: "ipsec_peer=\"192.0.2.3\": no SA in /etc/ipsec.conf",
			status: "tun keel0 esp 192.0.2.1->192.0.2.2"},
		{name: "peer unset", local: gwLocal + "ipsec_encap=esp\nipsec_peer=\n", started: 1, closed: true,
			status: "tun keel0 esp 192.0.2.1->192.0.2.2"},
		{name: "tun unset", local: "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n", closed: true},
		{name: "tun set again", local: gwLocal, started: 1, status: "tun keel0 udp 192.0.2.1->192.0.2.2"},
		{name: "unchanged keeps it", service: true, local: gwLocal, status: "tun keel0 udp 192.0.2.1->192.0.2.2", route: "10.2.0.0/24"},
		{name: "stopped gateway restarts", kill: true, service: true, local: gwLocal, started: 1, closed: true,
			status: "tun keel0 udp 192.0.2.1->192.0.2.2"},
	}
	for _, st := range steps {
		if st.conf == "" {
			st.conf = conf
		}
		prev := sys.Gateway()
		if st.kill {
			// The I/O goes away under the loops (as when the device is
			// deleted): they return and the gateway is stopped.
			fake.mu.Lock()
			fake.tuns[len(fake.tuns)-1].Close()
			fake.outers[len(fake.outers)-1].Close()
			fake.mu.Unlock()
			if !closed(prev, 5*time.Second) {
				t.Fatalf("%s: loops did not stop", st.name)
			}
		}
		n := fake.count()
		fake.mu.Lock()
		nRemoved := len(fake.removed)
		fake.mu.Unlock()
		root["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte(st.local)}
		root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(st.conf)}
		var (
			res services.ReloadResult
			err error
		)
		if st.service {
			err = m.ReloadService(ctx, "ipsec")
			res.Reloaded = []string{"ipsec"}
		} else {
			res, err = m.Reload(ctx)
		}
		if st.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), st.wantErr) {
				t.Errorf("%s: reload error %v, want one naming %s", st.name, err, st.wantErr)
			}
		} else if err != nil {
			t.Errorf("%s: %v", st.name, err)
		} else if !slices.Contains(res.Reloaded, "ipsec") || slices.Contains(res.Restarted, "ipsec") {
			t.Errorf("%s: reload %+v: want ipsec reloaded in place", st.name, res)
		}
		if d := fake.count() - n; d != st.started {
			t.Errorf("%s: %d gateways started, want %d", st.name, d, st.started)
		}
		wait := 50 * time.Millisecond // Reload closes synchronously
		if st.closed {
			wait = 5 * time.Second
		}
		if prev != nil && st.closed != closed(prev, wait) {
			t.Errorf("%s: previous gateway closed = %v, want %v", st.name, !st.closed, st.closed)
		}
		if s := ipsecStatus(); s.State != services.StateRunning || (st.status == "" && strings.Contains(s.StatusText, "tun ")) ||
			!strings.Contains(s.StatusText, st.status) {
			t.Errorf("%s: ipsec %s %q, want %q", st.name, s.State, s.StatusText, st.status)
		}
		if (sys.Gateway() == nil) != (st.status == "") {
			t.Errorf("%s: gateway %v", st.name, sys.Gateway())
		}
		if st.route != "" {
			fake.mu.Lock()
			rs := fake.routes[len(fake.routes)-1]
			fake.mu.Unlock()
			if !slices.Contains(rs, netip.MustParsePrefix(st.route)) {
				t.Errorf("%s: routes %v lack %s", st.name, rs, st.route)
			}
		}
		fake.mu.Lock()
		removed := slices.Concat(fake.removed[nRemoved:]...)
		fake.mu.Unlock()
		if (st.unroute == "") != (len(removed) == 0) || (st.unroute != "" && !slices.Equal(removed, []netip.Prefix{netip.MustParsePrefix(st.unroute)})) {
			t.Errorf("%s: routes removed %v, want %q", st.name, removed, st.unroute)
		}
	}
	gw = sys.Gateway()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if sys.Gateway() != nil || !closed(gw, 5*time.Second) {
		t.Error("gateway still running after shutdown")
	}
}

// TestIPsecGatewayStartFailures: a bad gateway variable or a gateway that
// cannot start fails the ipsec service with the reason, and leaves no
// engine behind.
func TestIPsecGatewayStartFailures(t *testing.T) {
	cases := []struct {
		name, local string
		fail        error
		want        string
	}{
		{"no local address", "ipsec_tun=keel0\n", nil, "ipsec_local"},
		{"bad encap", "ipsec_tun=keel0\nipsec_local=192.0.2.1\nipsec_encap=gre\n", nil, "ipsec_encap"},
		{"device fails", "ipsec_tun=keel0\nipsec_local=192.0.2.1\n", errors.New("open /dev/net/tun: no such device"), "ipsec_tun keel0: open /dev/net/tun"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newTestbed(t, "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n"+c.local, 2*time.Millisecond, &fakeGateways{fail: c.fail})
			if err := b.m.Boot(b.ctx); err == nil {
				t.Fatal("boot succeeded")
			}
			if s := b.status("ipsec"); s.State != services.StateFailed || !strings.Contains(s.Reason, c.want) {
				t.Errorf("ipsec: %s %q, want failed naming %q", s.State, s.Reason, c.want)
			}
			if b.sys.Engine() != nil || b.sys.Gateway() != nil {
				t.Error("failed start left an engine or gateway")
			}
		})
	}
}

// TestDefaultsGatewayVars: etc/defaults/rc.conf sets every gateway
// variable the ipsec service reads, each with a comment, to values that
// mean the dataplane's defaults: with only ipsec_tun and ipsec_local set,
// the gateway runs ESP in UDP with UDP GSO, the default MTU and port and
// the policies' routes.
func TestDefaultsGatewayVars(t *testing.T) {
	data, err := fs.ReadFile(etc.Root(), "etc/defaults/rc.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range dataplaneVars {
		found := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, v+"=") {
				found = true
				if !strings.Contains(line, "\t# ") {
					t.Errorf("etc/defaults/rc.conf:%d: %s has no comment", i+1, v)
				}
			}
		}
		if !found {
			t.Errorf("etc/defaults/rc.conf does not set %s", v)
		}
	}
	ch, err := rcconf.Load(appliance(t, "ipsec_tun=keel0\nipsec_local=192.0.2.1\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dataplane.ConfigFromRC(ch.Global().Get)
	if err != nil {
		t.Fatal(err)
	}
	want := dataplane.Config{TUN: "keel0", Local: netip.MustParseAddr("192.0.2.1"), Encap: dataplane.EncapUDP}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults give %+v, want %+v", got, want)
	}
}
