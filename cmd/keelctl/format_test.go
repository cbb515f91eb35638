package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/services"
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
