package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/netio"
	"github.com/keelinit/keel/netio/netiotest"
)

// hubTransforms are the peers' transforms in TestManyPeers, one per peer
// (cycled), with key material of the right length.
var hubTransforms = []func(seed byte) string{
	func(s byte) string { return "-E aes-gcm-16 " + testKey(s, 20) },
	func(s byte) string { return "-E aes-cbc " + testKey(s, 16) + " -A hmac-sha256 " + testKey(s+1, 32) },
	func(s byte) string { return "-E chacha20-poly1305 " + testKey(s, 36) },
}

// testKey is n bytes of demo key material derived from seed, as setkey hex.
func testKey(seed byte, n int) string {
	var b strings.Builder
	b.WriteString("0x")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%02x", seed*31+byte(i)*7+1)
	}
	return b.String()
}

var hubOuter, hubInner = netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.98.0.1")

// spokeOuter is peer i's outer address (i from 0); spokeInner the address
// behind it that policy j routes (j from 0).
func spokeOuter(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 99, 0, byte(2 + i)}) }
func spokeInner(i, j int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(21 + i), byte(1 + j), 1})
}

// hubConfig returns the setkey configuration of the hub (forHub) or of
// peer i: for every peer and every one of its pols policies a pair of SAs
// (reqid unique:N) and the policies that use them.
func hubConfig(proto string, peers, pols int, forHub bool, only int) string {
	var b strings.Builder
	b.WriteString("flush;\nspdflush;\n")
	for i := 0; i < peers; i++ {
		if !forHub && i != only {
			continue
		}
		h, p := hubOuter.String(), spokeOuter(i).String()
		hp, ph := h, p
		if proto == "esp-udp" {
			hp, ph = h+"[4500]", p+"[4500]"
		}
		for j := 0; j < pols; j++ {
			req := 10*(i+1) + j + 1
			alg := hubTransforms[i%len(hubTransforms)]
			fmt.Fprintf(&b, "add %s %s %s 0x%x -m tunnel -u %d %s;\n", hp, ph, proto, 0x1000+i<<4+j, req, alg(byte(2*req)))
			fmt.Fprintf(&b, "add %s %s %s 0x%x -m tunnel -u %d %s;\n", ph, hp, proto, 0x2000+i<<4+j, req, alg(byte(2*req+1)))
			out, in := "out", "in"
			if !forHub {
				out, in = in, out
			}
			inner := netip.PrefixFrom(spokeInner(i, j), 24).Masked()
			fmt.Fprintf(&b, "spdadd 10.98.0.0/24 %s any -P %s ipsec esp/tunnel/%s-%s/unique:%d;\n", inner, out, h, p, req)
			fmt.Fprintf(&b, "spdadd %s 10.98.0.0/24 any -P %s ipsec esp/tunnel/%s-%s/unique:%d;\n", inner, in, p, h, req)
		}
	}
	return b.String()
}

// TestManyPeers: one hub gateway and three peer gateways on an in-memory
// network, each peer with its own transform and pols policies (unique:N).
// One batch from the hub's TUN interleaves packets to every policy of every
// peer: each arrives at its own peer, on the SA of its policy, and the
// replies come back; nothing is sent to an address without a gateway; the
// hub counts every peer's traffic (Status.Peers) and no peer drops anything.
// Inbound ESP from a peer with an unknown SPI counts as that peer's drop.
func TestManyPeers(t *testing.T) {
	for _, c := range []struct {
		encap Encap
		pols  int
	}{{EncapUDP, 1}, {EncapESP, 1}, {EncapUDP, 2}, {EncapESP, 2}} {
		t.Run(fmt.Sprintf("%s/%d-policies", c.encap, c.pols), func(t *testing.T) { testManyPeers(t, c.encap, c.pols) })
	}
}

func testManyPeers(t *testing.T, encap Encap, pols int) {
	const peers = 3
	proto, kind, port := "esp-udp", netio.KindUDP, uint16(4500)
	if encap == EncapESP {
		proto, kind, port = "esp", netio.KindESP, 0
	}
	net := netiotest.NewNetwork()
	hubTun := netiotest.NewTUN("hub0", 1400)
	hubOut := net.Attach(netip.AddrPortFrom(hubOuter, port), kind)
	hubOut.Record()
	hub, err := New(newEngine(t, hubConfig(proto, peers, pols, true, 0)), hubTun, hubOut, Config{TUN: "hub0", Local: hubOuter, Encap: encap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close() })
	tuns := make([]*netiotest.TUN, peers)
	gws := make([]*Gateway, peers)
	for i := range gws {
		tuns[i] = netiotest.NewTUN(fmt.Sprintf("peer%d", i), 1400)
		o := net.Attach(netip.AddrPortFrom(spokeOuter(i), port), kind)
		if gws[i], err = New(newEngine(t, hubConfig(proto, peers, pols, false, i)), tuns[i], o,
			Config{TUN: fmt.Sprintf("peer%d", i), Local: spokeOuter(i), Peer: hubOuter, Encap: encap}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { gws[i].Close() })
	}

	// One batch: rounds of one packet to every policy of every peer.
	const rounds = 20
	for r := 0; r < rounds; r++ {
		for i := 0; i < peers; i++ {
			for j := 0; j < pols; j++ {
				hubTun.Outbound <- udp4(hubInner, spokeInner(i, j), []byte(fmt.Sprintf("round %d peer %d policy %d", r, i, j)))
			}
		}
	}
	for i := 0; i < peers; i++ {
		for k := 0; k < rounds*pols; k++ {
			var got []byte
			select {
			case got = <-tuns[i].Inbound:
			case <-time.After(5 * time.Second):
				st := gws[i].Status()
				t.Fatalf("peer %d received %d of %d packets; its drops: %v", i, k, rounds*pols, st.In.Drops)
			}
			var r, pi, pj int
			if _, err := fmt.Sscanf(string(got[28:]), "round %d peer %d policy %d", &r, &pi, &pj); err != nil || pi != i ||
				!bytes.Equal(got[16:20], spokeInner(i, pj).AsSlice()) {
				t.Fatalf("peer %d received %q for %v", i, got[28:], netip.AddrFrom4([4]byte(got[16:20])))
			}
			// The reply goes back through the peer's policy for
			// that inner address.
			tuns[i].Outbound <- udp4(spokeInner(i, pj), hubInner, []byte(fmt.Sprintf("reply %d %d %d", r, pi, pj)))
		}
	}
	for k := 0; k < rounds*pols*peers; k++ {
		got := recv(t, hubTun.Inbound)
		if !bytes.HasPrefix(got[28:], []byte("reply ")) {
			t.Fatalf("hub received %q", got[28:])
		}
	}
	// On the wire, each packet carries the SPI of the policy its inner
	// destination matches (the hub sent them in order per peer and policy).
	bySPI := map[uint32]int{}
	for _, s := range hubOut.Sent() {
		bySPI[binary.BigEndian.Uint32(s)]++
	}
	for i := 0; i < peers; i++ {
		for j := 0; j < pols; j++ {
			if n := bySPI[uint32(0x1000+i<<4+j)]; n != rounds {
				t.Errorf("SPI %#x (peer %d policy %d) carried %d packets, want %d; all: %v", 0x1000+i<<4+j, i, j, n, rounds, bySPI)
			}
		}
	}
	if n := net.Lost(); n != 0 {
		t.Fatalf("%d packets sent to an address without a gateway", n)
	}
	want := uint64(rounds * pols)
	eventually(t, "per-peer counters", func() bool {
		st := hub.Status()
		if len(st.Peers) != peers {
			return false
		}
		for _, p := range st.Peers {
			if p.OutPackets != want || p.InPackets != want {
				return false
			}
		}
		return true
	})
	st := hub.Status()
	for i, p := range st.Peers {
		if wantAddr := netip.AddrPortFrom(spokeOuter(i), port); p.Addr != wantAddr || p.OutDrops != 0 || p.InDrops != 0 || p.OutBytes == 0 || p.InBytes == 0 {
			t.Errorf("hub peer %d: %+v, want address %v and no drops", i, p, wantAddr)
		}
	}
	for i, g := range gws {
		if s := g.Status(); s.In.DropTotal != 0 || s.Out.DropTotal != 0 || len(s.Peers) != 1 {
			t.Errorf("peer %d: drops out %v in %v, peers %+v", i, s.Out.Drops, s.In.Drops, s.Peers)
		}
	}

	// ESP from peer 1 with an SPI nobody has is that peer's drop.
	bad := make([]byte, 64)
	binary.BigEndian.PutUint32(bad, 0xdead)
	binary.BigEndian.PutUint32(bad[4:], 1)
	hubOut.Inject(bad, netip.AddrPortFrom(spokeOuter(1), port))
	eventually(t, "peer 1's drop", func() bool { return hub.Status().Peers[1].InDrops == 1 })
	if st := hub.Status(); st.Peers[0].InDrops != 0 || st.Peers[2].InDrops != 0 || st.In.Drops["no-sa"] != 1 {
		t.Fatalf("after a bad SPI from peer 1: peers %+v, drops %v", st.Peers, st.In.Drops)
	}
}

// TestRefreshPeers: after an Apply that adds a peer and one that removes
// it, Refresh (racing with traffic) counts the new peer, keeps the counters
// of the peer that stays, and forgets the removed one.
func TestRefreshPeers(t *testing.T) {
	net := netiotest.NewNetwork()
	hubTun := netiotest.NewTUN("hub0", 1400)
	eng := newEngine(t, hubConfig("esp-udp", 1, 1, true, 0))
	hub, err := New(eng, hubTun, net.Attach(netip.AddrPortFrom(hubOuter, 4500), netio.KindUDP), Config{TUN: "hub0", Local: hubOuter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close() })
	peer0 := netip.AddrPortFrom(spokeOuter(0), 4500)
	net.Attach(peer0, netio.KindUDP) // no gateway behind it: the hub only sends
	send := func(n int) {
		for i := 0; i < n; i++ {
			hubTun.Outbound <- udp4(hubInner, spokeInner(0, 0), []byte("x"))
		}
	}
	peers := func() map[netip.AddrPort]uint64 {
		m := map[netip.AddrPort]uint64{}
		for _, p := range hub.Status().Peers {
			m[p.Addr] = p.OutPackets
		}
		return m
	}
	send(10)
	eventually(t, "10 packets to peer 0", func() bool { return peers()[peer0] == 10 })
	apply := func(conf string) {
		t.Helper()
		cfg, err := setkey.Parse("test.conf", strings.NewReader(conf))
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Apply(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { send(50); close(done) }()
		hub.Refresh()
		<-done
	}
	apply(hubConfig("esp-udp", 2, 1, true, 0))
	peer1 := netip.AddrPortFrom(spokeOuter(1), 4500)
	eventually(t, "peer 0 keeps counting, peer 1 appears", func() bool { p := peers(); return p[peer0] == 60 && len(p) == 2 })
	if p := peers(); p[peer1] != 0 {
		t.Fatalf("peers %v", p)
	}
	apply(hubConfig("esp-udp", 1, 1, true, 0))
	eventually(t, "peer 1 forgotten", func() bool { p := peers(); return p[peer0] == 110 && len(p) == 1 })
}
