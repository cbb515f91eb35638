package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/netio"
	"github.com/keelinit/keel/netio/netiotest"
)

// Test keys; demo values, never used outside tests.
const (
	keyAB = "0x000102030405060708090a0b0c0d0e0f10111213"
	keyBA = "0x202122232425262728292a2b2c2d2e2f30313233"
)

var (
	gwA = netip.MustParseAddr("10.99.0.1")
	gwB = netip.MustParseAddr("10.99.0.2")
	inA = netip.MustParseAddr("10.98.0.1")
	inB = netip.MustParseAddr("10.98.0.2")
)

// setkeyConf returns the configuration of the gateway at local (mirrored for
// the peer) plus extra statements.
func setkeyConf(proto string, local, peer, inLocal, inPeer netip.Addr, outKey, inKey string, outSPI, inSPI int, extra string) string {
	return fmt.Sprintf(`flush;
spdflush;
add %[1]s %[2]s %[7]s 0x%[8]x -m tunnel -E aes-gcm-16 %[5]s;
add %[2]s %[1]s %[7]s 0x%[9]x -m tunnel -E aes-gcm-16 %[6]s;
%[10]s
spdadd %[3]s %[4]s any -P out ipsec esp/tunnel/%[1]s-%[2]s/require;
spdadd %[4]s %[3]s any -P in ipsec esp/tunnel/%[2]s-%[1]s/require;
`, local, peer, inLocal, inPeer, outKey, inKey, proto, outSPI, inSPI, extra)
}

func newEngine(t *testing.T, conf string) *ipsec.Engine { return newEngineTB(t, conf) }

func newEngineTB(t testing.TB, conf string) *ipsec.Engine {
	t.Helper()
	// aesni when the CPU has it (as in production), else the portable
	// provider.
	var prov crypto.Provider = cryptosoft.New()
	if aesni.Supported() {
		prov = aesni.New()
	}
	eng := ipsec.NewEngineWithProvider(prov, ipsec.Options{})
	t.Cleanup(func() { eng.Close(testwait.Context(t)) })
	cfg, err := setkey.Parse("test.conf", strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return eng
}

type pair struct {
	a, b       *Gateway
	tunA, tunB *netiotest.TUN
	outA, outB *netiotest.Outer
}

func newPair(t *testing.T, encap Encap, extraA string) *pair {
	t.Helper()
	proto, kind, port := "esp-udp", netio.KindUDP, uint16(4500)
	if encap == EncapESP {
		proto, kind, port = "esp", netio.KindESP, 0
	}
	engA := newEngine(t, setkeyConf(proto, gwA, gwB, inA, inB, keyAB, keyBA, 0x1001, 0x2001, extraA))
	engB := newEngine(t, setkeyConf(proto, gwB, gwA, inB, inA, keyBA, keyAB, 0x2001, 0x1001, ""))
	p := &pair{tunA: netiotest.NewTUN("tunA", 1400), tunB: netiotest.NewTUN("tunB", 1400)}
	p.outA, p.outB = netiotest.Pipe(netip.AddrPortFrom(gwA, port), netip.AddrPortFrom(gwB, port), kind)
	p.outA.Record()
	var err error
	if p.a, err = New(engA, p.tunA, p.outA, Config{TUN: "tunA", Local: gwA, Peer: gwB, Encap: encap}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close() })
	if p.b, err = New(engB, p.tunB, p.outB, Config{TUN: "tunB", Local: gwB, Peer: gwA, Encap: encap}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.b.Close() })
	return p
}

// udp4 builds an IPv4/UDP packet with a valid header checksum.
func udp4(src, dst netip.Addr, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8] = 64
	p[9] = 17
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(p[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(p[20:], 1234)
	binary.BigEndian.PutUint16(p[22:], 5678)
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}

func recv(t *testing.T, ch chan []byte) []byte {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("timeout waiting for a packet")
		return nil
	}
}

func noPacket(t *testing.T, ch chan []byte) {
	t.Helper()
	select {
	case p := <-ch:
		t.Fatalf("unexpected packet of %d bytes", len(p))
	case <-time.After(50 * time.Millisecond):
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timeout waiting for %s", what)
}

func TestRoundTrip(t *testing.T) {
	for _, encap := range []Encap{EncapUDP, EncapESP} {
		t.Run(encap.String(), func(t *testing.T) {
			p := newPair(t, encap, "")
			const n = 300 // more than one batch
			for i := 0; i < n; i++ {
				pl := bytes.Repeat([]byte{byte(i)}, 1+i%1300)
				pkt := udp4(inA, inB, pl)
				p.tunA.Outbound <- pkt
				got := recv(t, p.tunB.Inbound)
				if !bytes.Equal(got, pkt) {
					t.Fatalf("packet %d: A->B got %x, want %x", i, got[:min(len(got), 40)], pkt[:40])
				}
				back := udp4(inB, inA, pl)
				p.tunB.Outbound <- back
				if got := recv(t, p.tunA.Inbound); !bytes.Equal(got, back) {
					t.Fatalf("packet %d: B->A differs", i)
				}
			}
			// What A sent on the wire is ESP with SPI 0x1001 and
			// consecutive sequence numbers, never the plaintext.
			sent := p.outA.Sent()
			if len(sent) != n {
				t.Fatalf("A sent %d packets, want %d", len(sent), n)
			}
			for i, s := range sent {
				if spi := binary.BigEndian.Uint32(s); spi != 0x1001 {
					t.Fatalf("packet %d: SPI %#x", i, spi)
				}
				if seq := binary.BigEndian.Uint32(s[4:]); seq != uint32(i+1) {
					t.Fatalf("packet %d: seq %d", i, seq)
				}
				if bytes.Contains(s, bytes.Repeat([]byte{byte(i)}, 16)) && i%1300 > 16 {
					t.Fatalf("packet %d: plaintext on the wire", i)
				}
			}
			eventually(t, "counters", func() bool {
				a, b := p.a.Status(), p.b.Status()
				return a.Out.Packets == n && b.In.Packets == n && b.Out.Packets == n && a.In.Packets == n
			})
			st := p.a.Status()
			if st.Out.ReadPackets != n || st.Out.DropTotal != 0 || st.In.DropTotal != 0 {
				t.Fatalf("status %+v", st)
			}
			if st.Encap != encap.String() || st.Interface != "tunA" {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

func TestOutboundDrops(t *testing.T) {
	other := netip.MustParseAddr("10.97.0.9")
	disc := netip.MustParseAddr("10.98.0.3")
	p := newPair(t, EncapUDP, fmt.Sprintf("spdadd %s %s any -P out discard;", inA, disc))
	cases := []struct {
		name   string
		pkt    []byte
		reason string
	}{
		{"no-policy", udp4(inA, other, []byte("x")), "no-policy"},
		{"discard", udp4(inA, disc, []byte("x")), "discard"},
		{"malformed", []byte{0x45, 0, 0}, ipsec.DropMalformed.String()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := p.a.Status().Out.Drops[c.reason]
			p.tunA.Outbound <- c.pkt
			eventually(t, c.reason, func() bool { return p.a.Status().Out.Drops[c.reason] == before+1 })
			noPacket(t, p.tunB.Inbound)
		})
	}
	if n := len(p.outA.Sent()); n != 0 {
		t.Fatalf("%d packets sent for dropped input", n)
	}
}

// sealed returns n ESP-in-UDP payloads (sequence 1..n) that gateway A would
// send to B, made by a separate engine with A's configuration.
func sealed(t *testing.T, n int) [][]byte {
	t.Helper()
	eng := newEngine(t, setkeyConf("esp-udp", gwA, gwB, inA, inB, keyAB, keyBA, 0x1001, 0x2001, ""))
	pool := ipsec.NewPool(0)
	var out [][]byte
	for i := 0; i < n; i++ {
		p := pool.Get()
		p.SetData(udp4(inA, inB, []byte(fmt.Sprintf("hello through the tunnel %d", i))))
		eng.Outbound([]*ipsec.Packet{p})
		if p.Verdict != ipsec.VerdictForward {
			t.Fatalf("sealing: %v %v", p.Verdict, p.Drop)
		}
		out = append(out, bytes.Clone(p.ESP()))
		p.Release()
	}
	return out
}

func TestInboundDrops(t *testing.T) {
	p := newPair(t, EncapUDP, "")
	esp := sealed(t, 3)
	src := netip.AddrPortFrom(gwA, 4500)
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 1; return b }
	cases := []struct {
		name    string
		pkt     []byte
		reason  string
		deliver bool
	}{
		{"bad-icv", flip(esp[1], len(esp[1])-1), ipsec.DropAuth.String(), false},
		{"ciphertext", flip(esp[2], 20), ipsec.DropAuth.String(), false},
		{"unknown-spi", flip(esp[0], 3), ipsec.DropNoSA.String(), false},
		{"short", esp[0][:10], ipsec.DropShort.String(), false},
		{"good", esp[0], "", true},
		{"replay", esp[0], ipsec.DropReplay.String(), false},
		{"ike", []byte{0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, "ike-unhandled", false},
		{"keepalive", []byte{0xff}, ipsec.DropKeepalive.String(), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := p.b.Status()
			p.outB.Inject(c.pkt, src)
			if c.deliver {
				recv(t, p.tunB.Inbound)
				eventually(t, "delivery count", func() bool { return p.b.Status().In.Packets == before.In.Packets+1 })
				if st := p.b.Status(); st.In.DropTotal != before.In.DropTotal {
					t.Fatalf("drops changed: %v", st.In.Drops)
				}
				return
			}
			eventually(t, c.reason, func() bool { return p.b.Status().In.Drops[c.reason] == before.In.Drops[c.reason]+1 })
			noPacket(t, p.tunB.Inbound)
		})
	}
}

func TestCloseStopsLoops(t *testing.T) {
	p := newPair(t, EncapUDP, "")
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loops still running after Close")
	}
	if err := p.a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := p.a.Status(); st.Err != "" {
		t.Fatalf("Err after clean close: %s", st.Err)
	}
}

func TestConfigFromRC(t *testing.T) {
	base := map[string]string{"ipsec_tun": "keel0", "ipsec_local": "10.99.0.1", "ipsec_peer": "10.99.0.2"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		m[k] = v
		return m
	}
	cases := []struct {
		name string
		vars map[string]string
		bad  string // variable named in the error; "" means valid
		want func(Config) bool
	}{
		{"defaults", base, "", func(c Config) bool {
			return c.TUN == "keel0" && c.Encap == EncapUDP && c.Local == gwA && c.Peer == gwB && c.MTU == 0
		}},
		{"esp", with("ipsec_encap", "esp"), "", func(c Config) bool { return c.Encap == EncapESP }},
		{"addrs", with("ipsec_tun_addr", "10.98.0.1/24 fd00::1/64"), "", func(c Config) bool { return len(c.Addrs) == 2 }},
		{"routes", with("ipsec_routes", "10.2.0.7/24"), "", func(c Config) bool {
			return len(c.Routes) == 1 && c.Routes[0] == netip.MustParsePrefix("10.2.0.0/24")
		}},
		{"mtu", with("ipsec_tun_mtu", "1420"), "", func(c Config) bool { return c.MTU == 1420 }},
		{"port", with("ipsec_natt_port", "4501"), "", func(c Config) bool { return c.Port == 4501 }},
		{"gso off", with("ipsec_udp_gso", "NO"), "", func(c Config) bool { return c.NoUDPGSO }},
		{"gso", with("ipsec_udp_gso", "yes"), "", func(c Config) bool { return !c.NoUDPGSO }},
		{"gso bad", with("ipsec_udp_gso", "maybe"), "ipsec_udp_gso", nil},
		{"no tun", with("ipsec_tun", ""), "ipsec_tun", nil},
		{"long tun", with("ipsec_tun", "abcdefghijklmnopq"), "ipsec_tun", nil},
		{"no local", with("ipsec_local", ""), "ipsec_local", nil},
		{"bad peer", with("ipsec_peer", "nope"), "ipsec_peer", nil},
		{"family", with("ipsec_peer", "2001:db8::1"), "ipsec_peer", nil},
		{"encap", with("ipsec_encap", "gre"), "ipsec_encap", nil},
		{"mtu low", with("ipsec_tun_mtu", "100"), "ipsec_tun_mtu", nil},
		{"port 0", with("ipsec_natt_port", "0"), "ipsec_natt_port", nil},
		{"bad addr", with("ipsec_tun_addr", "10.98.0.1"), "ipsec_tun_addr", nil},
		{"bad route", with("ipsec_routes", "x/8"), "ipsec_routes", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ConfigFromRC(func(k string) string { return c.vars[k] })
			if c.bad != "" {
				if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.bad+"=") {
					t.Fatalf("err = %v, want ErrConfig naming %s", err, c.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(cfg) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}

func TestPolicyRoutes(t *testing.T) {
	eng := newEngine(t, setkeyConf("esp-udp", gwA, gwB, inA, inB, keyAB, keyBA, 0x1001, 0x2001,
		"spdadd 10.98.0.1 10.5.0.0/16 any -P out ipsec esp/tunnel/10.99.0.1-10.99.0.2/require;\n"+
			"spdadd 10.98.0.1 10.6.0.0/16 any -P out discard;\n"+
			"spdadd 10.98.0.1 10.5.0.0/16 tcp -P out ipsec esp/tunnel/10.99.0.1-10.99.0.2/require;\n"+
			// Routes that would carry the ESP to the peer into the
			// tunnel: a transport policy to the peer, a prefix holding it.
			"spdadd 10.99.0.1 10.99.0.2 any -P out ipsec esp/transport//require;\n"+
			"spdadd 10.98.0.1 10.99.0.0/16 any -P out ipsec esp/tunnel/10.99.0.1-10.99.0.2/require;"))
	var ends []netip.Addr
	for _, sa := range eng.SAs() {
		ends = append(ends, sa.Src.Addr(), sa.Dst.Addr())
	}
	got, skipped := PolicyRoutes(eng.Policies(), ends)
	if want := []netip.Prefix{netip.MustParsePrefix("10.99.0.2/32"), netip.MustParsePrefix("10.99.0.0/16")}; !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.5.0.0/16"), netip.MustParsePrefix("10.98.0.2/32")}
	if len(got) != len(want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Fatalf("routes %v lack %v", got, w)
		}
	}
}

// udp6 builds an IPv6/UDP packet.
func udp6(src, dst netip.Addr, payload []byte) []byte {
	p := make([]byte, 48+len(payload))
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(8+len(payload)))
	p[6], p[7] = 17, 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	binary.BigEndian.PutUint16(p[40:], 1234)
	binary.BigEndian.PutUint16(p[42:], 5678)
	binary.BigEndian.PutUint16(p[44:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(p[46:], 0xffff) // any nonzero checksum: nobody verifies it here
	copy(p[48:], payload)
	return p
}

// TestRoundTripIPv6: IPv6 outside and inside, ESP in UDP.
func TestRoundTripIPv6(t *testing.T) {
	g6A, g6B := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	i6A, i6B := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	engA := newEngine(t, setkeyConf("esp-udp", g6A, g6B, i6A, i6B, keyAB, keyBA, 0x1001, 0x2001, ""))
	engB := newEngine(t, setkeyConf("esp-udp", g6B, g6A, i6B, i6A, keyBA, keyAB, 0x2001, 0x1001, ""))
	tunA, tunB := netiotest.NewTUN("a", 1400), netiotest.NewTUN("b", 1400)
	outA, outB := netiotest.Pipe(netip.AddrPortFrom(g6A, 4500), netip.AddrPortFrom(g6B, 4500), netio.KindUDP)
	a, err := New(engA, tunA, outA, Config{TUN: "a", Local: g6A})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(engB, tunB, outB, Config{TUN: "b", Local: g6B})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := 0; i < 50; i++ {
		pkt := udp6(i6A, i6B, bytes.Repeat([]byte{byte(i)}, 10+i*20))
		tunA.Outbound <- pkt
		if got := recv(t, tunB.Inbound); !bytes.Equal(got, pkt) {
			t.Fatalf("packet %d differs", i)
		}
		back := udp6(i6B, i6A, []byte("ack"))
		tunB.Outbound <- back
		if got := recv(t, tunA.Inbound); !bytes.Equal(got, back) {
			t.Fatalf("reply %d differs", i)
		}
	}
}
