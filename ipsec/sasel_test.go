package ipsec

import (
	"io/fs"
	"net/netip"
	"strings"
	"testing"

	"github.com/keelinit/keel/etc"
)

// shippedConfigs returns the shipped etc/ipsec.conf (gateway 192.0.2.1)
// and its mirror for the peer 192.0.2.2: the same SAs, with the
// directions of the policies swapped.
func shippedConfigs(t *testing.T) (local, peer string) {
	t.Helper()
	b, err := fs.ReadFile(etc.Root(), "etc/ipsec.conf")
	if err != nil {
		t.Fatal(err)
	}
	local = string(b)
	peer = strings.NewReplacer("-P out", "-P in", "-P in", "-P out").Replace(local)
	return local, peer
}

// TestShippedConfigTwoPolicies is issue 13's reproduction: with the
// shipped configuration, a batch [10.2.0.1, 10.3.0.1] must go out on the
// SAs of the two policies (unique:1 -> SPI 0x1001, unique:2 -> 0x1002),
// and the peer accepts both without policy-mismatch. Before the fix, the
// per-batch last-SA cache (keyed by the tunnel endpoints only) sent both
// on 0x1001.
func TestShippedConfigTwoPolicies(t *testing.T) {
	local, peer := shippedConfigs(t)
	ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
	applyText(t, ea, local)
	applyText(t, eb, peer)
	pool := NewPool(0)
	src := netip.MustParseAddr("10.1.0.1")
	dsts := []string{"10.2.0.1", "10.3.0.1", "10.3.0.1", "10.2.0.1", "10.2.0.7", "10.3.0.9"}
	want := []uint32{0x1001, 0x1002, 0x1002, 0x1001, 0x1001, 0x1002}
	for _, n := range []int{2, len(dsts)} {
		ps := make([]*Packet, n)
		for i := range ps {
			ps[i] = packetOf(t, pool, udpPacket(src, netip.MustParseAddr(dsts[i]), 1000, 2000, make([]byte, 64)))
		}
		ea.Outbound(ps)
		for i, p := range ps {
			if p.Verdict != VerdictForward || p.SPI != want[i] {
				t.Errorf("batch of %d: packet %d to %s: %v %v SPI %#x, want forward on SPI %#x", n, i, dsts[i], p.Verdict, p.Drop, p.SPI, want[i])
			}
			p.Frame = FrameIP
		}
		eb.Inbound(ps)
		for i, p := range ps {
			if p.Verdict != VerdictForward {
				t.Errorf("batch of %d: peer: packet %d to %s: %v %v", n, i, dsts[i], p.Verdict, p.Drop)
			}
		}
	}
	if d := eb.Counters().Drops[DropPolicy.String()]; d != 0 {
		t.Errorf("peer counted %d policy-mismatch drops", d)
	}
}
