package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/builtin"
)

func TestPrintTable(t *testing.T) {
	st := []services.Status{
		{Name: "ipsec", Type: services.TypeBuiltin, State: services.StateRunning, Since: time.Now().Add(-3 * time.Second), Duration: 1500 * time.Microsecond, StatusText: "4 SA(s)"},
		{Name: "syslogd", Type: services.TypeDaemon, State: services.StateRunning, PID: 4242, Restarts: 2},
		{Name: "d", Type: services.TypeOneshot, State: services.StateBlocked, Reason: "blocked by c"},
		{Name: "x", Type: services.TypeDaemon, State: services.StateDisabled, Reason: strings.Repeat("r", 200)},
	}
	var b bytes.Buffer
	printTable(&b, st)
	out := b.String()
	for _, want := range []string{"SERVICE", "REASON", "ipsec", "running", "1.5ms", "4 SA(s)", "4242", "(restarts: 2)", "blocked by c", "...", "4 services: 2 running, 1 blocked, 1 disabled"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestPrintDetail(t *testing.T) {
	d := services.Detail{
		Status:     services.Status{Name: "syslogd", Type: services.TypeDaemon, State: services.StateRunning, PID: 7, StatusText: "logging", Since: time.Now()},
		Path:       "etc/rc.d/syslogd",
		Provides:   []string{"syslogd"},
		Requires:   []string{"cleanvar", "FILESYSTEMS"},
		RequiredBy: []string{"DAEMON"},
		Command:    []string{"/usr/bin/keeld", "syslogd"},
		Rcvar:      "syslogd_enable",
		Settings:   map[string]string{"syslogd_enable": "YES"},
		Log:        []string{"08:00:00.000 hello"},
	}
	var b bytes.Buffer
	printDetail(&b, d)
	out := b.String()
	for _, want := range []string{"● syslogd - daemon service (etc/rc.d/syslogd)", "State: running since", "Main PID: 7", `Status: "logging"`,
		"Rcvar: syslogd_enable=YES", "Requires: cleanvar FILESYSTEMS", "Required by: DAEMON", "08:00:00.000 hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("detail lacks %q:\n%s", want, out)
		}
	}
}

func TestPrintInterfaces(t *testing.T) {
	cases := []struct {
		name string
		ifs  []builtin.Interface
		want []string
	}{
		{"none", nil, []string{"no gateway interface (ipsec_tun is not set)"}},
		{"healthy", []builtin.Interface{{Name: "keel0", MTU: 1420, Encap: "udp", Outer: "udp:4500", Local: "10.99.0.1", Peer: "10.99.0.2",
			Out: builtin.IfDir{Packets: 1234, Bytes: 99999}, In: builtin.IfDir{Packets: 777, Bytes: 5555}}},
			[]string{"IF", "OUT PKTS", "IN DROPS", "keel0", "udp:4500", "10.99.0.1", "10.99.0.2", "1420", "1234", "99999", "777", "5555"}},
		{"drops and failure", []builtin.Interface{{Name: "keel1", Encap: "esp", Outer: "esp:10.0.0.1", Local: "10.0.0.1",
			Out: builtin.IfDir{Drops: map[string]uint64{"no-policy": 3}, DropTotal: 3}, In: builtin.IfDir{Drops: map[string]uint64{"bad-icv": 2, "replay": 1}, DropTotal: 3},
			Error: "keel1: 100 consecutive read errors"}},
			[]string{"keel1 drops: out no-policy=3; in bad-icv=2,replay=1", "keel1 FAILED: keel1: 100 consecutive read errors"}},
		{"peers", []builtin.Interface{{Name: "keel0", Encap: "udp", Outer: "udp:4500", Local: "10.99.0.1", Peers: []builtin.IfPeer{
			{Addr: "10.99.0.2:4500", OutPackets: 11, OutBytes: 1100, InPackets: 12, InBytes: 1200},
			{Addr: "10.99.0.3:4500", OutPackets: 21, OutDrops: 4, InPackets: 22, InDrops: 5}}}},
			[]string{"keel0 peers:", "PEER", "OUT PKTS", "IN DROPS", "10.99.0.2:4500  11", "1100", "1200", "10.99.0.3:4500  21"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			printInterfaces(&b, c.ifs)
			for _, want := range c.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}
