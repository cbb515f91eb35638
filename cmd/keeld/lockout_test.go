package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelinit/keel/services"
)

// TestConfigTypoDoesNotLockOut boots the default appliance with a typo
// in ipsec.conf. ipsec fails; the services ordered after it (the
// NETWORKING and DAEMON milestones, where management daemons hang) start
// all the same and say so; only pktgen, which lists ipsec as requisite,
// is blocked.
func TestConfigTypoDoesNotLockOut(t *testing.T) {
	root := applianceTree(t, "flush;\nspdflush;\nadd 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-gcm-16 \"0123456789abcdef0123\";\nspdadd 10.1.0.0/24 10.2.0.0/24 any -P out ipsec esp/tunel/192.0.2.1-192.0.2.2/require;\n")
	d := startKeeld(t, root)
	st := d.status()
	if s := st["ipsec"]; s.State != services.StateFailed {
		t.Fatalf("ipsec with a typo: %s (%s), want failed", s.State, s.Reason)
	}
	// The error names the file to edit, under --root.
	if s := st["ipsec"]; !strings.HasPrefix(s.Reason, filepath.Join(root, "etc/ipsec.conf")+":4:") {
		t.Errorf("ipsec's reason %q does not name %s", s.Reason, filepath.Join(root, "etc/ipsec.conf"))
	}
	if s := st["NETWORKING"]; s.State != services.StateExited || s.Reason != "started after failed ipsec" {
		t.Errorf("NETWORKING: %s %q, want exited %q", s.State, s.Reason, "started after failed ipsec")
	}
	if s := st["DAEMON"]; s.State != services.StateExited {
		t.Errorf("DAEMON (after NETWORKING): %s %q, want exited", s.State, s.Reason)
	}
	if s := st["syslogd"]; s.State != services.StateRunning {
		t.Errorf("syslogd: %s (%s)", s.State, s.Reason)
	}
	if s := st["pktgen"]; s.State != services.StateBlocked || s.Reason != "blocked by ipsec" {
		t.Errorf("pktgen (requisite=ipsec): %s %q, want blocked by ipsec", s.State, s.Reason)
	}
}
