package e2e

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/services"
)

// The hub topology: the hub gateway H (10.99.0.1 on bridge br0, tunnel
// address 10.98.0.1) and three peer gateways P1..P3 (10.99.0.2..4), each
// joined to the bridge by its own veth (vHi in H, vPi in Pi). Peer i has
// two inner networks, 10.2i.1.0/24 and 10.2i.2.0/24 (address .1 on its
// keel0), each with its own policy and SA pair (unique:N).
const (
	hubOuter, hubInner = "10.99.0.1", "10.98.0.1"
	hubInnerNet        = "10.98.0.0/24" // the hub's side of every policy
	hubPeers, hubPols  = 3, 2
	// hubTCP bytes go to every inner network, with hubPings pings.
	hubTCP, hubPings = 1 << 20, 5
)

// hubTransform is the transform of one peer's SAs.
type hubTransform struct {
	name            string // setkey -E algorithm
	encLen, authLen int    // key bytes; authLen 0 for an AEAD
	// tshark UAT algorithm names; "" where tshark cannot decrypt it
	// (4.0 has no ESP ChaCha20-Poly1305: those packets are opened with
	// x/crypto instead).
	tsharkEnc, tsharkAuth string
}

var hubTransforms = [hubPeers]hubTransform{
	{"aes-gcm-16", 20, 0, "AES-GCM with 16 octet ICV [RFC4106]", "NULL"},
	{"aes-cbc", 16, 32, "AES-CBC [RFC3602]", "HMAC-SHA-256-128 [RFC4868]"},
	{"chacha20-poly1305", 36, 0, "", ""},
}

// hubSA is one SA of the hub topology.
type hubSA struct {
	peer, pol  int    // peer index and policy index (from 0)
	out        bool   // hub -> peer
	src, dst   string // outer addresses
	spi, reqid int
	enc, auth  string // keys, setkey hex (0x...); auth "" for an AEAD
}

// net returns the inner network of the SA's policy.
func (sa hubSA) net() netip.Prefix { return hubNet(sa.peer, sa.pol) }

func hubNet(peer, pol int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(21 + peer), byte(1 + pol), 0}), 24)
}

// hubAddr is the address of peer's keel0 in policy pol's network.
func hubAddr(peer, pol int) string {
	return hubNet(peer, pol).Addr().Next().String()
}

type hubTopo struct {
	*topo
	hub   *side
	peers [hubPeers]*side
	sas   []hubSA
}

// newHubTopo creates the namespaces, the bridge and the veths, and draws
// the keys.
func newHubTopo(t *testing.T, encap string) *hubTopo {
	t.Helper()
	tp, id := newTopoBase(t)
	tp.encap = encap
	h := &hubTopo{topo: tp, hub: &side{name: "H", ns: id + "H", outer: hubOuter, inner: hubInner}}
	tp.more = append(tp.more, h.hub)
	tp.run("ip", "netns", "add", h.hub.ns)
	tp.run("ip", "-n", h.hub.ns, "link", "set", "lo", "up")
	// Without multicast snooping: a snooping bridge joins 224.0.0.106
	// (RFC 4286) and its IGMP reports would be the only non-ESP traffic
	// on the veths.
	tp.run("ip", "-n", h.hub.ns, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	tp.run("ip", "-n", h.hub.ns, "addr", "add", hubOuter+"/24", "dev", "br0")
	tp.run("ip", "-n", h.hub.ns, "link", "set", "br0", "up")
	tp.noUDPGSO(h.hub, "br0")
	for i := range h.peers {
		p := &side{name: fmt.Sprintf("P%d", i+1), ns: fmt.Sprintf("%sP%d", id, i+1),
			outer: fmt.Sprintf("10.99.0.%d", 2+i), inner: hubAddr(i, 0), peer: hubOuter, peerIn: hubInner}
		h.peers[i] = p
		tp.more = append(tp.more, p)
		hv, pv := fmt.Sprintf("vH%d", i+1), fmt.Sprintf("vP%d", i+1)
		tp.run("ip", "netns", "add", p.ns)
		tp.run("ip", "-n", p.ns, "link", "set", "lo", "up")
		tp.run("ip", "link", "add", hv, "netns", h.hub.ns, "type", "veth", "peer", "name", pv, "netns", p.ns)
		tp.run("ip", "-n", h.hub.ns, "link", "set", hv, "master", "br0")
		tp.run("ip", "-n", h.hub.ns, "link", "set", hv, "up")
		tp.run("ip", "-n", p.ns, "addr", "add", p.outer+"/24", "dev", pv)
		tp.run("ip", "-n", p.ns, "link", "set", pv, "up")
		tp.noUDPGSO(h.hub, hv)
		tp.noUDPGSO(p, pv)
		tr := hubTransforms[i]
		for j := 0; j < hubPols; j++ {
			for _, out := range []bool{true, false} {
				sa := hubSA{peer: i, pol: j, out: out, src: hubOuter, dst: p.outer, spi: 0x1000 + (i+1)<<4 + j + 1,
					reqid: 10*(i+1) + j + 1, enc: randHex(t, tr.encLen)}
				if !out {
					sa.src, sa.dst, sa.spi = p.outer, hubOuter, sa.spi+0x1000
				}
				if tr.authLen > 0 {
					sa.auth = randHex(t, tr.authLen)
				}
				h.sas = append(h.sas, sa)
			}
		}
	}
	return h
}

// conf returns the ipsec.conf of the hub (peer -1) or of peer i: the SAs
// it shares with its peers and a policy per inner network, unique:reqid.
func (h *hubTopo) conf(peer int) string {
	proto := "esp-udp"
	if h.encap == "esp" {
		proto = "esp"
	}
	var b strings.Builder
	b.WriteString("flush;\nspdflush;\n")
	for _, sa := range h.sas {
		if peer >= 0 && sa.peer != peer {
			continue
		}
		alg := "-E " + hubTransforms[sa.peer].name + " " + sa.enc
		if sa.auth != "" {
			alg += " -A hmac-sha256 " + sa.auth
		}
		fmt.Fprintf(&b, "add %s %s %s 0x%x -m tunnel -r 512 -u %d %s;\n", sa.src, sa.dst, proto, sa.spi, sa.reqid, alg)
		// The policy whose traffic this SA carries: outbound at the
		// SA's source gateway, inbound at its destination.
		dir := "out"
		if (peer < 0) != sa.out {
			dir = "in"
		}
		src, dst := hubInnerNet, sa.net().String()
		if !sa.out {
			src, dst = dst, src
		}
		fmt.Fprintf(&b, "spdadd %s %s any -P %s ipsec esp/tunnel/%s-%s/unique:%d;\n", src, dst, dir, sa.src, sa.dst, sa.reqid)
	}
	return b.String()
}

// rc returns the rc.conf of the hub (peer -1, no ipsec_peer: it serves
// every peer its SAs name) or of peer i (ipsec_peer set to the hub).
func (h *hubTopo) rc(peer int) string {
	s, extra, kld, addrs := h.hub, "", "aesni", hubInner+"/24"
	if peer >= 0 {
		// The peers run on cryptosoft alone: Keel's own constant-time
		// implementations, checked against tshark and x/crypto.
		s, extra, kld, addrs = h.peers[peer], fmt.Sprintf("ipsec_peer=%q\n", hubOuter), "", hubAddr(peer, 0)+"/24 "+hubAddr(peer, 1)+"/24"
	}
	return fmt.Sprintf(`hostname="keel%s"
cryptodev_modules="cryptosoft"
kld_list="%s"
ipsec_enable="YES"
ipsec_tun="keel0"
ipsec_local="%s"
ipsec_encap="%s"
ipsec_tun_addr="%s"
ipsec_udp_gso="%s"
%s`, s.name, kld, s.outer, h.encap, addrs, h.udpGSO, extra)
}

// TestManyPeers: one Keel hub gateway and three peer gateways, each a real
// keeld, with different transforms (AES-GCM, AES-CBC+HMAC-SHA256,
// ChaCha20-Poly1305) and two policies per peer (unique:N each). Ping and TCP
// run to every inner network of every peer at the same time. The capture on
// every hub veth holds only ESP between the hub and that veth's peer, on the
// peer's four SPIs; every packet decrypts (tshark, esp.icv_good; x/crypto
// for ChaCha20-Poly1305, which tshark 4.0 lacks) to inner traffic of the
// policy its SPI belongs to; no gateway drops anything (no policy-mismatch);
// the hub counts each peer's traffic. A reload without one policy removes
// its route from the kernel and keeps the others.
func TestManyPeers(t *testing.T) {
	for _, encap := range []string{"udp", "esp"} {
		t.Run(encap, func(t *testing.T) { testManyPeers(t, encap) })
	}
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

func testManyPeers(t *testing.T, encap string) {
	requireTools(t, "ping", "tcpdump", "tshark")
	h := newHubTopo(t, encap)
	h.boot(h.hub, h.rc(-1), h.conf(-1))
	for i, p := range h.peers {
		h.boot(p, h.rc(i), h.conf(i))
	}
	var d services.Detail
	h.keelctlJSON(h.hub, &d, "status", "ipsec")
	if want := fmt.Sprintf("tun keel0 %s %s->%d peers", encap, hubOuter, hubPeers); !strings.Contains(d.StatusText, want) {
		t.Errorf("hub: ipsec status %q lacks %q", d.StatusText, want)
	}
	var caps [hubPeers]*capture
	for i := range caps {
		caps[i] = h.captureDev(h.hub, fmt.Sprintf("vH%d", i+1), 65535)
	}

	// Everything at once: a TCP transfer and a ping to every inner
	// network of every peer.
	var flows []*tcpFlow
	type pinger struct {
		addr string
		out  *syncBuffer
		cmd  *exec.Cmd
		done <-chan struct{}
	}
	var pingers []pinger
	for i, p := range h.peers {
		for j := 0; j < hubPols; j++ {
			addr := hubAddr(i, j)
			pg := pinger{addr: addr, out: &syncBuffer{}}
			// -c with -w: ping sends until hubPings replies came
			// back or 15 s passed (a request the saturated TUN queue
			// drops is sent again, as TCP would).
			pg.cmd, pg.done = h.start(h.hub, pg.out, pg.out, nil, "ping", "-c", strconv.Itoa(hubPings), "-i", "0.2", "-w", "15", addr)
			pingers = append(pingers, pg)
			flows = append(flows, h.startTCP(h.hub, p, addr, hubTCP, 0))
		}
	}
	for _, pg := range pingers {
		select {
		case <-pg.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("ping %s: timeout", pg.addr)
		}
		m := pingSummary.FindStringSubmatch(pg.out.String())
		if m == nil || m[2] != strconv.Itoa(hubPings) {
			t.Errorf("ping %s: %s", pg.addr, pg.out.String())
		} else if m[1] != m[2] {
			t.Logf("ping %s: %s requests for %s replies", pg.addr, m[1], m[2])
		}
	}
	for _, f := range flows {
		h.waitTCP(f)
	}
	for i, cp := range caps {
		if n := cp.stop(t); n != 0 {
			t.Logf("tcpdump on vH%d: %d packets dropped by the kernel", i+1, n)
		}
	}

	for i, cp := range caps {
		h.checkPeerCapture(i, cp.file)
	}
	// No gateway drops anything it receives (policy-mismatch above all:
	// a packet on another policy's SA); outbound, only what the kernel
	// routes into keel0 without a policy (IPv6 link-local chatter).
	for _, s := range append([]*side{h.hub}, h.peers[:]...) {
		v := h.status(s)
		if n := v.Drops["policy-mismatch"]; n != 0 {
			t.Errorf("keeld %s: %d packets dropped as policy-mismatch", s.name, n)
		}
		for reason, n := range v.Interfaces[0].In.Drops {
			t.Errorf("keeld %s: gateway dropped %d inbound packets: %s", s.name, n, reason)
		}
		for reason, n := range v.Interfaces[0].Out.Drops {
			if reason != "no-policy" {
				t.Errorf("keeld %s: gateway dropped %d outbound packets: %s", s.name, n, reason)
			}
		}
	}
	gw := h.status(h.hub).Interfaces[0]
	if len(gw.Peers) != hubPeers {
		t.Fatalf("hub: peers %+v, want %d", gw.Peers, hubPeers)
	}
	table := h.keelctl(h.hub, "ipsec", "if")
	for i, p := range gw.Peers {
		want := h.peers[i].outer
		if encap == "udp" {
			want += ":4500"
		}
		if p.Addr != want || p.OutPackets < hubTCP/1500 || p.InPackets == 0 || p.OutDrops != 0 || p.InDrops != 0 {
			t.Errorf("hub peer %d: %+v, want %s with traffic both ways and no drops", i+1, p, want)
		}
		if !strings.Contains(table, want) {
			t.Errorf("keelctl ipsec if lacks peer %s:\n%s", want, table)
		}
	}
	h.checkReloadRoutes()
}

// checkReloadRoutes reloads the hub without peer 3's second policy (and its
// SAs): the kernel's route of that policy into keel0 is gone, the others
// stay, and traffic to peer 3's first network still flows.
func (h *hubTopo) checkReloadRoutes() {
	t := h.t
	t.Helper()
	gone := hubNet(hubPeers-1, 1)
	kept := h.sas[:0:0]
	for _, sa := range h.sas {
		if sa.net() != gone {
			kept = append(kept, sa)
		}
	}
	h.sas = kept
	if err := os.WriteFile(filepath.Join(h.dir, "root"+h.hub.name, "etc", "ipsec.conf"), []byte(h.conf(-1)), 0o600); err != nil {
		t.Fatal(err)
	}
	h.keelctl(h.hub, "reload")
	routes := h.in(h.hub, "ip", "route", "show", "dev", "keel0")
	if strings.Contains(routes, gone.String()) {
		t.Errorf("after the reload, the removed policy's route %s is still there:\n%s", gone, routes)
	}
	for i := 0; i < hubPeers; i++ {
		for j := 0; j < hubPols; j++ {
			if n := hubNet(i, j); n != gone && !strings.Contains(routes, n.String()) {
				t.Errorf("after the reload, route %s is missing:\n%s", n, routes)
			}
		}
	}
	h.in(h.hub, "ping", "-c", "2", "-i", "0.2", "-w", "10", hubAddr(hubPeers-1, 0))
}

// checkPeerCapture checks the capture on the hub's veth to peer i: only
// ESP between the hub and peer i, on all four of the peer's SPIs, each
// packet decrypting to inner traffic of its SA's policy.
func (h *hubTopo) checkPeerCapture(i int, file string) {
	t := h.t
	t.Helper()
	wire := "udp.port == 4500 && esp && !icmp"
	if h.encap == "esp" {
		wire = "ip.proto == 50 && esp && !icmp"
	}
	all := h.tshark(file, "-T", "fields", "-e", "frame.number")
	notESP := h.tshark(file, "-Y", "!("+wire+")", "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Protocol", "-e", "_ws.col.Info")
	if len(all) < hubPols*hubTCP/1500 {
		t.Fatalf("vH%d: capture has only %d packets", i+1, len(all))
	}
	if len(notESP) != 0 {
		t.Fatalf("vH%d: %d of %d captured IPv4 packets are not %s, first: %q", i+1, len(notESP), len(all), wire, notESP[0])
	}
	sas := map[int]hubSA{}
	for _, sa := range h.sas {
		if sa.peer == i {
			sas[sa.spi] = sa
		}
	}
	perSPI := map[int]int{}
	tr := hubTransforms[i]
	if tr.tsharkEnc != "" {
		args := []string{"-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"}
		for _, sa := range sas {
			args = append(args, "-o", fmt.Sprintf(`uat:esp_sa:"IPv4","%s","%s","0x%08x","%s","%s","%s","%s"`,
				sa.src, sa.dst, sa.spi, tr.tsharkEnc, sa.enc, tr.tsharkAuth, sa.auth))
		}
		lines := h.tshark(file, append(args, "-Y", "esp", "-T", "fields", "-E", "separator=|",
			"-e", "esp.spi", "-e", "esp.icv_good", "-e", "ip.src", "-e", "ip.dst")...)
		if len(lines) != len(all) {
			t.Fatalf("vH%d: tshark decoded %d ESP packets of %d", i+1, len(lines), len(all))
		}
		bad := 0
		for _, l := range lines {
			f := strings.Split(l, "|")
			if len(f) != 4 {
				t.Fatalf("vH%d: tshark line %q", i+1, l)
			}
			spi, _ := strconv.ParseInt(strings.TrimPrefix(f[0], "0x"), 16, 64)
			srcs, dsts := strings.Split(f[2], ","), strings.Split(f[3], ",")
			ok := f[1] == "1" || f[1] == "True"
			if ok && len(srcs) == 2 && len(dsts) == 2 {
				ok = h.checkESP(i, sas, int(spi), srcs[0], dsts[0], srcs[1], dsts[1], perSPI)
			} else if ok {
				t.Errorf("vH%d: not decrypted to an inner IPv4 packet: %q", i+1, l)
				ok = false
			}
			if !ok {
				if bad++; bad < 5 {
					t.Errorf("vH%d: bad ESP packet: %q", i+1, l)
				}
			}
		}
		if bad > 0 {
			t.Fatalf("vH%d: %d of %d ESP packets failed", i+1, bad, len(lines))
		}
	} else {
		h.openChaCha(i, file, sas, perSPI, len(all))
	}
	for spi, sa := range sas {
		if perSPI[spi] == 0 {
			t.Errorf("vH%d: no packet on SPI %#x (policy %s, out %v)", i+1, spi, sa.net(), sa.out)
		}
	}
	t.Logf("vH%d (%s): %d ESP packets, per SPI %v", i+1, tr.name, len(all), perSPI)
}

// checkESP checks one decrypted packet: its SPI is one of peer i's SAs, the
// outer addresses are that SA's, and the inner packet belongs to the SA's
// policy (inner destination in the policy's network for hub -> peer, inner
// source for peer -> hub). It counts the packet in perSPI.
func (h *hubTopo) checkESP(i int, sas map[int]hubSA, spi int, osrc, odst, isrc, idst string, perSPI map[int]int) bool {
	t := h.t
	t.Helper()
	sa, ok := sas[spi]
	if !ok {
		t.Errorf("vH%d: SPI %#x is not one of peer %d's", i+1, spi, i+1)
		return false
	}
	inner := idst
	if !sa.out {
		inner = isrc
	}
	a, err := netip.ParseAddr(inner)
	if osrc != sa.src || odst != sa.dst || err != nil || !sa.net().Contains(a) {
		t.Errorf("vH%d: SPI %#x (policy %s, %s->%s) carries %s->%s inside %s->%s", i+1, spi, sa.net(), sa.src, sa.dst, isrc, idst, osrc, odst)
		return false
	}
	perSPI[spi]++
	return true
}

// openChaCha opens every ESP packet of the capture with x/crypto's
// ChaCha20-Poly1305 (RFC 7634: key || 4-byte salt, nonce salt || IV, AAD
// SPI || sequence) and checks it with checkESP; the capture has want
// packets.
func (h *hubTopo) openChaCha(i int, file string, sas map[int]hubSA, perSPI map[int]int, want int) {
	t := h.t
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("vH%d: %v", i+1, err)
	}
	src := gopacket.NewPacketSource(r, r.LinkType())
	n, bad := 0, 0
	for pkt := range src.Packets() {
		n++
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			t.Fatalf("vH%d: packet %d is not IPv4", i+1, n)
		}
		esp := ip.Payload
		if h.encap == "udp" {
			if len(esp) < 8 || ip.Protocol != layers.IPProtocolUDP {
				t.Fatalf("vH%d: packet %d is not UDP", i+1, n)
			}
			esp = esp[8:]
		}
		if len(esp) < 8+8+16 {
			t.Fatalf("vH%d: packet %d: ESP of %d bytes", i+1, n, len(esp))
		}
		spi := int(binary.BigEndian.Uint32(esp))
		sa, ok := sas[spi]
		if !ok {
			t.Fatalf("vH%d: packet %d: SPI %#x is not one of peer %d's", i+1, n, spi, i+1)
		}
		key, _ := hex.DecodeString(strings.TrimPrefix(sa.enc, "0x"))
		aead, err := chacha20poly1305.New(key[:32])
		if err != nil {
			t.Fatal(err)
		}
		nonce := append(append([]byte(nil), key[32:]...), esp[8:16]...)
		pt, err := aead.Open(nil, nonce, esp[16:], esp[:8])
		if err != nil || len(pt) < 2 || int(pt[len(pt)-2])+2 > len(pt) || pt[len(pt)-1] != 4 || len(pt)-2-int(pt[len(pt)-2]) < 20 {
			if bad++; bad < 5 {
				t.Errorf("vH%d: packet %d (SPI %#x, seq %d): does not open to an inner IPv4 packet: %v", i+1, n, spi, binary.BigEndian.Uint32(esp[4:]), err)
			}
			continue
		}
		in := pt[:len(pt)-2-int(pt[len(pt)-2])]
		if !h.checkESP(i, sas, spi, ip.SrcIP.String(), ip.DstIP.String(),
			netip.AddrFrom4([4]byte(in[12:16])).String(), netip.AddrFrom4([4]byte(in[16:20])).String(), perSPI) {
			bad++
		}
	}
	if bad > 0 || n != want {
		t.Fatalf("vH%d: %d of %d ESP packets (tshark counted %d) failed to open", i+1, bad, n, want)
	}
}
