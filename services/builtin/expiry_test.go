package builtin

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/ipsec"
)

const (
	lifetimeKey1 = "0x5ec2e7a15ec2e7a15ec2e7a15ec2e7a1cafe0001"
	lifetimeKey2 = "0x5ec2e7a25ec2e7a25ec2e7a25ec2e7a2cafe0002"
)

// lifetimeConf has an SA with byte lifetimes (soft 300, hard 600) and one
// with time lifetimes (soft 1 s, hard 2 s).
const lifetimeConf = `flush;
spdflush;
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -bs 300 -bh 600 -E aes-gcm-16 ` + lifetimeKey1 + `;
add 192.0.2.1 192.0.2.3 esp 0x1002 -m tunnel -ls 1 -lh 2 -E aes-gcm-16 ` + lifetimeKey2 + `;
spdadd 10.1.0.0/24 10.2.0.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 10.1.0.0/24 10.3.0.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.3/require;
`

// TestSALifetimeEvents: SAs of the ipsec service that pass their soft and
// hard lifetimes (bytes, and time) are logged (without keys), counted in
// keel_ipsec_sa_expired_total and keel_ipsec_sas, shown in the unit's
// status line and in /v1/ipsec/sa, and passed to the expiry hooks, soft
// before hard, once each; a removed hook hears nothing.
func TestSALifetimeEvents(t *testing.T) {
	log := newSafeBuffer()
	b := newTestbedLog(t, "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n", 2*time.Millisecond, nil, log)
	b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(lifetimeConf)}
	events := make(chan SAExpiry, 16)
	b.sys.AddExpiryHook(func(ev SAExpiry) { events <- ev })
	remove := b.sys.AddExpiryHook(func(ev SAExpiry) { t.Errorf("removed hook called: %+v", ev) })
	remove()
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	eng := b.sys.Engine()
	pool := ipsec.NewPool(0)
	send := func() *ipsec.Packet {
		p := pool.Get()
		p.SetData(innerPacket(eng.Policies()[0].Sel, 200))
		eng.Outbound([]*ipsec.Packet{p})
		return p
	}
	for i := range 3 {
		if p := send(); p.Verdict != ipsec.VerdictForward {
			t.Fatalf("packet %d: %v", i, p.Drop)
		}
	}
	if p := send(); p.Drop != ipsec.DropExpired {
		t.Fatalf("after the hard byte lifetime: %v %v", p.Verdict, p.Drop)
	}

	type ev struct {
		hard    bool
		expired string
	}
	got := map[uint32][]ev{}
	deadline := time.After(10 * time.Second)
	for n := 0; n < 4; n++ {
		select {
		case e := <-events:
			got[e.SA.SPI] = append(got[e.SA.SPI], ev{e.Hard, e.SA.Expired})
		case <-deadline:
			t.Fatalf("after 10 s only these lifetime events: %+v", got)
		}
	}
	for spi, want := range map[uint32][]ev{0x1001: {{false, ipsec.ExpiredBytes}, {true, ipsec.ExpiredBytes}}, 0x1002: {{false, ipsec.ExpiredTime}, {true, ipsec.ExpiredTime}}} {
		if g := got[spi]; len(g) != 2 || g[0] != want[0] || g[1] != want[1] {
			t.Errorf("SA 0x%x events %+v, want %+v", spi, g, want)
		}
	}

	// Status line, /v1/ipsec/sa, metrics.
	if st := b.status("ipsec"); !strings.Contains(st.StatusText, "SA 0x1001 dead (bytes), SA 0x1002 dead (time)") {
		t.Errorf("ipsec status %q", st.StatusText)
	}
	var v IPsec
	if err := b.serve().Get(b.ctx, "/v1/ipsec/sa", nil, &v); err != nil {
		t.Fatal(err)
	}
	for _, sa := range v.SAs {
		if sa.State != "dead" || sa.Expired == "" {
			t.Errorf("/v1/ipsec/sa: SA 0x%x %s %q", sa.SPI, sa.State, sa.Expired)
		}
	}
	wantMetrics(t, map[string]float64{
		"keel_ipsec_sa_expired_total,lifetime=soft,reason=bytes": 1,
		"keel_ipsec_sa_expired_total,lifetime=hard,reason=bytes": 1,
		"keel_ipsec_sa_expired_total,lifetime=soft,reason=time":  1,
		"keel_ipsec_sa_expired_total,lifetime=hard,reason=time":  1,
		"keel_ipsec_sas,state=dead":                              2,
		"keel_ipsec_sas,state=mature":                            0,
	}, b.sys.Collectors()...)

	// keeld's log: one line per event, saying what ran out; no key.
	text := log.String()
	for _, want := range []string{
		"SA spi 0x1001 192.0.2.1->192.0.2.2 aes-gcm-16-128 (/etc/ipsec.conf:3:1): soft lifetime passed (bytes: ",
		"SA spi 0x1001 192.0.2.1->192.0.2.2 aes-gcm-16-128 (/etc/ipsec.conf:3:1): hard lifetime reached (bytes: 600 of 600): the SA carries no more traffic",
		"SA spi 0x1002 192.0.2.1->192.0.2.3 aes-gcm-16-128 (/etc/ipsec.conf:4:1): soft lifetime passed (time: 1s): rekey due",
		"hard lifetime reached (time: 2s)",
	} {
		if strings.Count(text, want) != 1 {
			t.Errorf("keeld's log has %d lines with %q:\n%s", strings.Count(text, want), want, text)
		}
	}
	for _, k := range []string{lifetimeKey1, lifetimeKey2} {
		for i := 2; i+8 <= len(k); i++ {
			if strings.Contains(text, k[i:i+8]) {
				t.Fatalf("key text %q in keeld's log", k[i:i+8])
			}
		}
	}
}
