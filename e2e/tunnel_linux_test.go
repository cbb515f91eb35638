package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// espSA is a tshark esp_sa UAT record for one direction.
func espSA(src, dst string, spi int, key string) string {
	return fmt.Sprintf(`"IPv4","%s","%s","0x%08x","AES-GCM with 16 octet ICV [RFC4106]","%s","NULL",""`, src, dst, spi, key)
}

// TestTunnel: ping and a TCP transfer in each direction pass through the
// tunnel; a capture on the veth shows only ESP in UDP/4500, and tshark
// decrypts every packet with the SA keys and finds its ICV good.
func TestTunnel(t *testing.T) {
	for _, encap := range []string{"udp", "esp"} {
		t.Run(encap, func(t *testing.T) { testTunnel(t, encap) })
	}
}

func testTunnel(t *testing.T, encap string) {
	requireTools(t, "ping", "tcpdump", "tshark")
	tp := newTopo(t)
	tp.encap = encap
	tp.startGateway(tp.a, "cryptosoft aesni")
	tp.startGateway(tp.b, "cryptosoft aesni")
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
		sn := tp.status(s)
		if sn.Gateway.Out.Packets == 0 || sn.Gateway.In.Packets == 0 {
			t.Fatalf("gateway %s counters: %+v", s.name, sn.Gateway)
		}
		for reason, n := range sn.Gateway.In.Drops {
			t.Errorf("gateway %s dropped %d inbound packets: %s", s.name, n, reason)
		}
	}
}

// TestHotRebind: the tunnel starts with only cryptosoft; mid-transfer aesni
// is loaded, every SA rebinds to it live, the transfer completes intact, and
// the ESP sequence numbers on the wire have no gap and no repeat.
func TestHotRebind(t *testing.T) {
	requireTools(t, "tcpdump", "tshark")
	tp := newTopo(t)
	tp.startGateway(tp.a, "cryptosoft")
	tp.startGateway(tp.b, "cryptosoft")
	for _, s := range []*side{tp.a, tp.b} {
		for _, sa := range tp.status(s).SAs {
			if sa.Provider != "cryptosoft" {
				t.Fatalf("gateway %s SA %#x on %q before the load", s.name, sa.SPI, sa.Provider)
			}
		}
	}
	cp := tp.capture(tp.a, 96)            // headers suffice for sequence numbers
	const total, rate = 24 << 20, 8 << 20 // about 3 s
	tp.tcpTransfer(tp.a, tp.b, total, rate, func() {
		time.Sleep(time.Second)
		for _, s := range []*side{tp.a, tp.b} {
			if out := strings.TrimSpace(tp.ctl(s, "kldload aesni")); out != "ok" {
				t.Fatalf("kldload aesni on %s: %s", s.name, out)
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
				t.Errorf("gateway %s SA %#x: provider %q after %d rebinds, want aesni", s.name, sa.SPI, sa.Provider, sa.Rebinds)
			}
		}
		for reason, n := range sn.Gateway.In.Drops {
			t.Errorf("gateway %s dropped %d inbound packets: %s", s.name, n, reason)
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
// virtio-crypto device in its own process); mid-transfer both gateways'
// device processes are killed. The SAs fail over to cryptosoft and the TCP
// transfer completes intact.
func TestProviderDeath(t *testing.T) {
	requireTools(t)
	tp := newTopo(t)
	tp.startGateway(tp.a, "virtio")
	tp.startGateway(tp.b, "virtio")
	for _, s := range []*side{tp.a, tp.b} {
		// A fallback, loaded after the SAs are bound to virtio.
		if out := strings.TrimSpace(tp.ctl(s, "kldload cryptosoft")); out != "ok" {
			t.Fatalf("kldload cryptosoft on %s: %s", s.name, out)
		}
		for _, sa := range tp.status(s).SAs {
			if sa.Provider != "virtio" {
				t.Fatalf("gateway %s SA %#x on %q, want virtio", s.name, sa.SPI, sa.Provider)
			}
		}
	}
	const total, rate = 16 << 20, 6 << 20 // about 3 s
	tp.tcpTransfer(tp.a, tp.b, total, rate, func() {
		time.Sleep(time.Second)
		for _, s := range []*side{tp.a, tp.b} {
			pid, err := strconv.Atoi(strings.TrimSpace(tp.ctl(s, "virtio-pid")))
			if err != nil || pid <= 0 {
				t.Fatalf("virtio device pid of %s: %v", s.name, err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill virtio device %d of %s: %v", pid, s.name, err)
			}
		}
	})
	for _, s := range []*side{tp.a, tp.b} {
		sn := tp.status(s)
		for _, sa := range sn.SAs {
			if sa.Provider != "cryptosoft" || sa.Rebinds == 0 {
				t.Errorf("gateway %s SA %#x: provider %q after %d rebinds, want cryptosoft", s.name, sa.SPI, sa.Provider, sa.Rebinds)
			}
		}
		t.Logf("gateway %s drops after the failover: out %v, in %v", s.name, sn.Gateway.Out.Drops, sn.Gateway.In.Drops)
	}
}
