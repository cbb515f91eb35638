package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/services"
)

// holdUDP binds UDP port (IPv4 and IPv6) in namespace ns until the
// returned function is called (or the test ends). The socket is made by
// inNamespace, on a thread that comes back to the test's namespace.
func holdUDP(t *testing.T, ns string, port int) (release func()) {
	t.Helper()
	var c net.PacketConn
	if err := inNamespace(ns, func() (err error) {
		c, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func() { c.Close() }
}

// keelctlErr runs keelctl against s's keeld and returns its combined
// output and error.
func (tp *topo) keelctlErr(s *side, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "keelctl"), append([]string{"--socket", s.socket}, args...)...).CombinedOutput()
	return string(out), err
}

// TestReloadRollback: with the tunnel up, A's new NAT-T port is taken by
// another socket; a reload that moves A's gateway to it and adds an SA
// fails, says why, and leaves A as it was: the same SAs, the gateway on
// the old port, traffic through the tunnel both ways, ipsec running. With
// the port free the same reload applies.
func TestReloadRollback(t *testing.T) {
	requireTools(t, "ping")
	tp := newTopo(t)
	tp.startKeeld(tp.a, "cryptosoft", "")
	tp.startKeeld(tp.b, "cryptosoft", "")
	tp.in(tp.a, "ping", "-c", "2", "-i", "0.2", "-W", "2", innerB)

	root := filepath.Join(tp.dir, "rootA")
	add := func(name, text string) {
		p := filepath.Join(root, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append(b, text...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	spis := func(s *side) []uint32 {
		var out []uint32
		for _, sa := range tp.status(s).SAs {
			out = append(out, sa.SPI)
		}
		slices.Sort(out)
		return out
	}
	before := spis(tp.a)
	release := holdUDP(t, tp.a.ns, 4501)
	add("etc/rc.conf", "ipsec_natt_port=\"4501\"\n")
	add("etc/ipsec.conf", fmt.Sprintf("add %s %s esp-udp 0x3001 -m tunnel -E aes-gcm-16 %s;\n", tp.a.outer, tp.a.peer, randHex(t, 20)))

	out, err := tp.keelctlErr(tp.a, "reload")
	if err == nil || !strings.Contains(out, "address already in use") {
		t.Fatalf("keelctl reload with the port taken: %v\n%s", err, out)
	}
	if got := spis(tp.a); !slices.Equal(got, before) {
		t.Errorf("SAs after the failed reload: %x, want %x", got, before)
	}
	if gw := tp.status(tp.a).Interfaces[0]; gw.Outer != "udp:4500" || gw.Error != "" {
		t.Errorf("gateway after the failed reload: %+v", gw)
	}
	var d services.Detail
	tp.keelctlJSON(tp.a, &d, "status", "ipsec")
	if d.State != services.StateRunning || !strings.Contains(d.StatusText, "tun keel0 udp") || strings.Contains(d.StatusText, "FAILED") {
		t.Errorf("ipsec after the failed reload: %s %q", d.State, d.StatusText)
	}
	tp.in(tp.a, "ping", "-c", "2", "-i", "0.2", "-W", "2", innerB)
	tp.in(tp.b, "ping", "-c", "2", "-i", "0.2", "-W", "2", innerA)

	// Once the port is free, the same reload applies.
	release()
	if out, err := tp.keelctlErr(tp.a, "reload"); err != nil {
		t.Fatalf("keelctl reload with the port free: %v\n%s", err, out)
	}
	if got := spis(tp.a); !slices.Contains(got, 0x3001) {
		t.Errorf("SAs after the reload: %x", got)
	}
	if gw := tp.status(tp.a).Interfaces[0]; gw.Outer != "udp:4501" {
		t.Errorf("gateway after the reload: %+v", gw)
	}
}
