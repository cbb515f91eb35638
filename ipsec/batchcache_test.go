package ipsec

import (
	"strings"
	"testing"

	"github.com/keelinit/keel/ipsec/spd"
)

// TestCrossBatchCaches checks that the state Outbound and Inbound carry
// from one call to the next (batch.out4, batch.in4, sa.inPol) never
// outlives what it was derived from: an SPD change, an SAD change or an
// SA leaving the mature state takes effect at the next call, as it would
// without the caches.
func TestCrossBatchCaches(t *testing.T) {
	tp := topology{tunnel: true, xform: transforms[0]}
	tp.setAddrs(false)
	ca, cb := tp.configs()
	ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
	applyText(t, ea, ca)
	applyText(t, eb, cb)
	pool := NewPool(0)
	plain := udpPacket(tp.hostA, tp.hostB, 1000, 2000, make([]byte, 200))
	const n = 8
	ps := make([]*Packet, n)
	for i := range ps {
		ps[i] = pool.Get()
	}
	out := func(want Verdict, wantDrop DropReason, wantSPI uint32) [][]byte {
		t.Helper()
		for _, p := range ps {
			p.SetData(plain)
		}
		ea.Outbound(ps)
		var wire [][]byte
		for i, p := range ps {
			if p.Verdict != want || p.Drop != wantDrop || (want == VerdictForward && p.SPI != wantSPI) {
				t.Fatalf("outbound packet %d: %v %v SPI %#x, want %v %v SPI %#x", i, p.Verdict, p.Drop, p.SPI, want, wantDrop, wantSPI)
			}
			wire = append(wire, append([]byte(nil), p.Data()...))
		}
		return wire
	}
	in := func(wire [][]byte, want Verdict, wantDrop DropReason) {
		t.Helper()
		for i, p := range ps {
			p.SetData(wire[i])
		}
		eb.Inbound(ps)
		for i, p := range ps {
			if p.Verdict != want || p.Drop != wantDrop {
				t.Fatalf("inbound packet %d: %v %v, want %v %v", i, p.Verdict, p.Drop, want, wantDrop)
			}
		}
	}

	// Warm every cache.
	in(out(VerdictForward, DropNone, 0x1001), VerdictForward, DropNone)
	in(out(VerdictForward, DropNone, 0x1001), VerdictForward, DropNone)

	// Outbound: the policy becomes discard, through Apply (a new SAD
	// snapshot too) and through the SPD alone.
	applyText(t, ea, strings.Replace(ca, "-P out ipsec esp/tunnel/"+tp.a.String()+"-"+tp.b.String()+"/require", "-P out discard", 1))
	out(VerdictDrop, DropDiscard, 0)
	applyText(t, ea, ca)
	out(VerdictForward, DropNone, 0x1001)
	pols := ea.spd.Policies()
	for i := range pols {
		if pols[i].Dir == spd.DirOut {
			pols[i].Action, pols[i].Requests = spd.Discard, nil
		}
	}
	if err := ea.spd.Replace(pols); err != nil {
		t.Fatal(err)
	}
	out(VerdictDrop, DropDiscard, 0)
	applyText(t, ea, ca)
	wire := out(VerdictForward, DropNone, 0x1001)

	// Inbound: the policy no longer accepts this SA's tunnel.
	pin := "-P in ipsec esp/tunnel/" + tp.a.String() + "-" + tp.b.String() + "/require"
	if !strings.Contains(cb, pin) {
		t.Fatalf("unexpected config %q", cb)
	}
	applyText(t, eb, strings.Replace(cb, pin, "-P in ipsec esp/tunnel/198.51.100.1-198.51.100.2/require", 1))
	in(wire, VerdictDrop, DropPolicy)
	applyText(t, eb, cb)
	in(out(VerdictForward, DropNone, 0x1001), VerdictForward, DropNone)

	// Inbound: the SA is removed.
	noSA := strings.Replace(cb, "add "+tp.a.String()+" "+tp.b.String()+" esp 0x1001", "add "+tp.a.String()+" "+tp.b.String()+" esp 0x1003", 1)
	if noSA == cb {
		t.Fatalf("unexpected config %q", cb)
	}
	applyText(t, eb, noSA)
	in(out(VerdictForward, DropNone, 0x1001), VerdictDrop, DropNoSA)
	applyText(t, eb, cb)

	// Outbound: a second, newer SA for the pair is preferred, dying too
	// (FreeBSD's key_allocsa_policy takes the newest of the mature and
	// dying SAs); once it is dead, the older one is. With PreferOldSA the
	// older one is, from the next call on.
	two := strings.Replace(ca, "spdadd", "add "+tp.a.String()+" "+tp.b.String()+" esp 0x1003 -m tunnel "+tp.xform.spec+";\nspdadd", 1)
	applyText(t, ea, two)
	out(VerdictForward, DropNone, 0x1003)
	out(VerdictForward, DropNone, 0x1003)
	ea.SetPreferOldSA(true)
	out(VerdictForward, DropNone, 0x1001)
	ea.SetPreferOldSA(false)
	out(VerdictForward, DropNone, 0x1003)
	setState := func(st uint32) {
		for _, s := range ea.sad.Load().all {
			if s.cfg.SPI == 0x1003 {
				s.setState(st)
			}
		}
	}
	setState(stateDying)
	out(VerdictForward, DropNone, 0x1003)
	setState(stateDead)
	out(VerdictForward, DropNone, 0x1001)
}
