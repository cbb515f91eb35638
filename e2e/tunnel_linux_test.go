package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/builtin"
)

// espSA is a tshark esp_sa UAT record for one direction.
func espSA(src, dst string, spi int, key string) string {
	return fmt.Sprintf(`"IPv4","%s","%s","0x%08x","AES-GCM with 16 octet ICV [RFC4106]","%s","NULL",""`, src, dst, spi, key)
}

// TestTunnel: a keeld in each namespace runs the gateway with mirrored SAs;
// ping and a TCP transfer in each direction pass through the tunnel; a
// capture on the veth shows only ESP (in UDP/4500, or raw), and tshark
// decrypts every packet with the SA keys and finds its ICV good; keelctl
// shows the interface's counters.
func TestTunnel(t *testing.T) {
	for _, encap := range []string{"udp", "esp"} {
		t.Run(encap, func(t *testing.T) { testTunnel(t, encap) })
	}
}

func testTunnel(t *testing.T, encap string) {
	requireTools(t, "ping", "tcpdump", "tshark")
	tp := newTopo(t)
	tp.encap = encap
	tp.startKeeld(tp.a, "cryptosoft", "aesni")
	tp.startKeeld(tp.b, "cryptosoft", "aesni")
	for _, s := range []*side{tp.a, tp.b} {
		var d services.Detail
		tp.keelctlJSON(s, &d, "status", "ipsec")
		if want := fmt.Sprintf("tun keel0 %s %s->%s", encap, s.outer, s.peer); !strings.Contains(d.StatusText, want) {
			t.Errorf("keeld %s: ipsec status %q lacks %q", s.name, d.StatusText, want)
		}
	}
	cp := tp.capture(tp.a, 65535)

	tp.in(tp.a, "ping", "-c", "3", "-i", "0.2", "-W", "2", innerB)
	tp.in(tp.b, "ping", "-c", "3", "-i", "0.2", "-W", "2", innerA)
	tp.tcpTransfer(tp.a, tp.b, 2<<20, 0, nil)
	tp.tcpTransfer(tp.b, tp.a, 2<<20, 0, nil)
	if d := cp.stop(t); d != 0 {
		t.Logf("tcpdump: %d packets dropped by the kernel", d)
	}

	// Only ESP (in UDP/4500, or IP protocol 50) on the wire: no plaintext
	// TCP, ICMP or UDP.
	all := tp.tshark(cp.file, "-T", "fields", "-e", "frame.number")
	// (!icmp: an ICMP error quoting an ESP packet is not ESP.)
	wire := "udp.port == 4500 && esp && !icmp"
	if encap == "esp" {
		wire = "ip.proto == 50 && esp && !icmp"
	}
	notESP := tp.tshark(cp.file, "-Y", "!("+wire+")", "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Protocol", "-e", "_ws.col.Info")
	if len(all) < 1000 {
		t.Fatalf("capture has only %d packets", len(all))
	}
	if len(notESP) != 0 {
		t.Fatalf("%d of %d captured IPv4 packets are not %s, first: %q", len(notESP), len(all), wire, notESP[0])
	}

	// tshark decrypts with the SA keys: every ICV good, inner traffic is
	// the TCP transfer and the pings.
	args := []string{
		"-o", "esp.enable_encryption_decode:TRUE",
		"-o", "esp.enable_authentication_check:TRUE",
		"-o", "uat:esp_sa:" + espSA(outerA, outerB, spiAB, tp.a.outKey),
		"-o", "uat:esp_sa:" + espSA(outerB, outerA, spiBA, tp.b.outKey),
	}
	lines := tp.tshark(cp.file, append(args, "-Y", "esp", "-T", "fields", "-e", "esp.spi", "-e", "esp.icv_good", "-e", "ip.proto")...)
	if len(lines) != len(all) {
		t.Fatalf("tshark decoded %d ESP packets of %d", len(lines), len(all))
	}
	bad := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || (f[1] != "1" && f[1] != "True") {
			bad++
			if bad < 5 {
				t.Errorf("ICV not good: %q", l)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d ESP packets failed tshark's ICV check", bad, len(lines))
	}
	inner := tp.tshark(cp.file, append(args, "-Y", "esp && tcp.port == 5001", "-T", "fields", "-e", "frame.number")...)
	icmp := tp.tshark(cp.file, append(args, "-Y", "esp && icmp", "-T", "fields", "-e", "frame.number")...)
	if len(inner) < 1000 || len(icmp) != 12 {
		t.Fatalf("decrypted inner traffic: %d TCP packets to port 5001, %d ICMP (want 12)", len(inner), len(icmp))
	}
	for _, s := range []*side{tp.a, tp.b} {
		gw := tp.status(s).Interfaces[0]
		if gw.Out.Packets == 0 || gw.In.Packets == 0 || gw.Encap != encap {
			t.Fatalf("keeld %s interface: %+v", s.name, gw)
		}
		for reason, n := range gw.In.Drops {
			t.Errorf("keeld %s dropped %d inbound packets: %s", s.name, n, reason)
		}
		// The plain table a user reads.
		out := tp.keelctl(s, "ipsec", "if")
		if !strings.Contains(out, "OUT PKTS") || !strings.Contains(out, "keel0") || !strings.Contains(out, s.outer) {
			t.Errorf("keelctl ipsec if on %s:\n%s", s.name, out)
		}
	}
}

// TestHotRebind: the tunnel starts with only cryptosoft; mid-transfer
// `keelctl kldload aesni` loads aesni, every SA rebinds to it live, the
// transfer completes intact, and the ESP sequence numbers on the wire have
// no gap and no repeat.
func TestHotRebind(t *testing.T) {
	requireTools(t, "tcpdump", "tshark")
	tp := newTopo(t)
	tp.startKeeld(tp.a, "cryptosoft", "")
	tp.startKeeld(tp.b, "cryptosoft", "")
	for _, s := range []*side{tp.a, tp.b} {
		for _, sa := range tp.status(s).SAs {
			if sa.Provider != "cryptosoft" {
				t.Fatalf("keeld %s SA %#x on %q before the load", s.name, sa.SPI, sa.Provider)
			}
		}
	}
	cp := tp.capture(tp.a, 96)            // headers suffice for sequence numbers
	const total, rate = 24 << 20, 8 << 20 // about 3 s
	tp.tcpTransfer(tp.a, tp.b, total, rate, func() {
		time.Sleep(time.Second)
		for _, s := range []*side{tp.a, tp.b} {
			if out := tp.keelctl(s, "kldload", "aesni"); !strings.Contains(out, "aesni") {
				t.Errorf("keelctl kldload aesni on %s: %s", s.name, out)
			}
		}
	})
	if d := cp.stop(t); d != 0 {
		t.Fatalf("tcpdump dropped %d packets: the sequence check needs them all", d)
	}
	for _, s := range []*side{tp.a, tp.b} {
		sn := tp.status(s)
		for _, sa := range sn.SAs {
			if sa.Provider != "aesni" || sa.Rebinds == 0 {
				t.Errorf("keeld %s SA %#x: provider %q after %d rebinds, want aesni", s.name, sa.SPI, sa.Provider, sa.Rebinds)
			}
		}
		for reason, n := range sn.Interfaces[0].In.Drops {
			t.Errorf("keeld %s dropped %d inbound packets: %s", s.name, n, reason)
		}
	}
	lines := tp.tshark(cp.file, "-Y", "esp", "-T", "fields", "-e", "esp.spi", "-e", "esp.sequence")
	last := map[string]uint64{}
	count := map[string]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("tshark line %q", l)
		}
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("tshark line %q: %v", l, err)
		}
		if prev, ok := last[f[0]]; ok && seq != prev+1 {
			t.Fatalf("SPI %s: sequence %d follows %d on the wire (gap or repeat)", f[0], seq, prev)
		}
		last[f[0]] = seq
		count[f[0]]++
	}
	if count["0x00001001"] < 10000 || count["0x00002001"] == 0 {
		t.Fatalf("ESP packets per SPI: %v", count)
	}
	t.Logf("ESP packets per SPI: %v, sequence numbers contiguous", count)
}

// TestProviderDeath: the SAs run on the virtio provider (an emulated
// virtio-crypto device in its own process, keeld's cryptodev_modules);
// cryptosoft is loaded with keelctl as a fallback; mid-transfer both
// keelds' device processes (PIDs from keelctl crypto --json) are killed.
// The SAs fail over to cryptosoft and the TCP transfer completes intact.
func TestProviderDeath(t *testing.T) {
	requireTools(t)
	tp := newTopo(t)
	tp.startKeeld(tp.a, "virtio", "")
	tp.startKeeld(tp.b, "virtio", "")
	for _, s := range []*side{tp.a, tp.b} {
		// A fallback, loaded after the SAs are bound to virtio.
		tp.keelctl(s, "kldload", "cryptosoft")
		for _, sa := range tp.status(s).SAs {
			if sa.Provider != "virtio" {
				t.Fatalf("keeld %s SA %#x on %q, want virtio", s.name, sa.SPI, sa.Provider)
			}
		}
	}
	devicePID := func(s *side) int {
		var cv builtin.Crypto
		tp.keelctlJSON(s, &cv, "crypto")
		for _, p := range cv.Providers {
			if p.Name == "virtio" {
				pid, err := strconv.Atoi(p.Params["device_pid"])
				if err != nil || pid <= 0 {
					t.Fatalf("keeld %s: virtio device_pid %q", s.name, p.Params["device_pid"])
				}
				return pid
			}
		}
		t.Fatalf("keeld %s: no virtio provider in %+v", s.name, cv.Providers)
		return 0
	}
	pids := map[*side]int{tp.a: devicePID(tp.a), tp.b: devicePID(tp.b)}
	const total, rate = 16 << 20, 6 << 20 // about 3 s
	tp.tcpTransfer(tp.a, tp.b, total, rate, func() {
		time.Sleep(time.Second)
		for _, s := range []*side{tp.a, tp.b} {
			if err := syscall.Kill(pids[s], syscall.SIGKILL); err != nil {
				t.Fatalf("kill virtio device %d of %s: %v", pids[s], s.name, err)
			}
		}
	})
	for _, s := range []*side{tp.a, tp.b} {
		sn := tp.waitSAs(s, "cryptosoft")
		for _, sa := range sn.SAs {
			if sa.Rebinds == 0 {
				t.Errorf("keeld %s SA %#x: on cryptosoft after %d rebinds", s.name, sa.SPI, sa.Rebinds)
			}
		}
		gw := sn.Interfaces[0]
		t.Logf("keeld %s drops after the failover: out %v, in %v", s.name, gw.Out.Drops, gw.In.Drops)
		// kldstat follows the framework: the module is still loaded,
		// but its provider was dropped when its device died.
		var mods []modules.Stat
		tp.keelctlJSON(s, &mods, "kldstat")
		found := false
		for _, m := range mods {
			if m.Name == "virtio" {
				found = true
				if m.State != modules.StateFailed || !strings.Contains(m.Reason, "after a fault") {
					t.Errorf("keeld %s kldstat: virtio %s %q, want failed with the fault", s.name, m.State, m.Reason)
				}
			}
		}
		if !found {
			t.Errorf("keeld %s kldstat: no virtio row: %+v", s.name, mods)
		}
		// cryptosoft is now the only provider of the SAs: unloading it
		// is refused (exit 1) and they stay on it.
		out, err := exec.Command(filepath.Join(binDir, "keelctl"), "--socket", s.socket, "kldunload", "cryptosoft").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "in use") {
			t.Errorf("keeld %s: kldunload cryptosoft: %v: %s", s.name, err, out)
		}
		tp.waitSAs(s, "cryptosoft")
	}
}
