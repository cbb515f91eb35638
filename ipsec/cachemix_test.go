package ipsec

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/keelinit/keel/ipsec/spd"
)

// TestCachesMixedFlows: for each cache on the data path, a batch mixing
// flows that differ only in a field the cached decision depends on, in
// runs and alternating ([0 1 0 0 1 1 0 1], so that each cache is both
// hit and contradicted), then the flows one per call (the caches carried
// from one call to the next). Every packet must get its own flow's
// outcome (written out in the table, and the model's), on the fast paths
// and on the general path.
func TestCachesMixedFlows(t *testing.T) {
	ep := func(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 0) }
	udp := func(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), NATTPort) }
	pfx := netip.MustParsePrefix
	a, b, a2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	h1, h2, h3 := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1"), netip.MustParseAddr("10.3.0.1")
	sa := func(spi uint32, src, dst netip.AddrPort, reqid uint32, xf int) genSA {
		return genSA{mSA: mSA{src: src, dst: dst, udp: src.Port() != 0, spi: spi, mode: spd.ModeTunnel, reqid: reqid}, xf: xf}
	}
	out := func(sel mPolicy, level spd.Level, reqid uint32) mPolicy {
		sel.dir, sel.action, sel.mode, sel.rsrc, sel.rdst, sel.level, sel.reqid = spd.DirOut, spd.IPsec, spd.ModeTunnel, a, b, level, reqid
		return sel
	}
	in := func(sel mPolicy, src, dst netip.Addr, reqid uint32) mPolicy {
		sel.dir, sel.action, sel.mode, sel.rsrc, sel.rdst, sel.level, sel.reqid = spd.DirIn, spd.IPsec, spd.ModeTunnel, src, dst, spd.LevelUnique, reqid
		return sel
	}
	flow := func(src, dst netip.Addr, proto uint8, sport, dport uint16) mFlow {
		return mFlow{src: src, dst: dst, proto: proto, sport: sport, dport: dport}
	}
	// Two SAs a->b (reqid 1, then reqid 2, the newer) for outbound.
	outSAs := []genSA{sa(0x1001, ep("192.0.2.1"), ep("192.0.2.2"), 1, 0), sa(0x1002, ep("192.0.2.1"), ep("192.0.2.2"), 2, 0)}
	cases := []struct {
		name, cache string
		sas         []genSA
		pols        []mPolicy
		flows       []mFlow
		on          []int // inbound: the SA (index) each flow arrives on; nil: outbound
		want        []string
	}{
		{"reqid", "outbound last SA (request's reqid)", outSAs,
			[]mPolicy{out(mPolicy{src: pfx("10.1.0.0/16"), dst: pfx("10.2.0.0/16")}, spd.LevelUnique, 1), out(mPolicy{src: pfx("10.1.0.0/16"), dst: pfx("10.3.0.0/16")}, spd.LevelUnique, 2)},
			[]mFlow{flow(h1, h2, protoUDP, 1000, 80), flow(h1, h3, protoUDP, 1000, 80)}, nil,
			[]string{"forward 0x1001", "forward 0x1002"}},
		{"level", "outbound last SA (request's level)", outSAs,
			[]mPolicy{out(mPolicy{dst: pfx("10.2.0.0/16"), proto: protoUDP, dport: 80}, spd.LevelUnique, 1), out(mPolicy{dst: pfx("10.2.0.0/16")}, spd.LevelRequire, 0)},
			[]mFlow{flow(h1, h2, protoUDP, 1000, 80), flow(h1, h2, protoUDP, 1000, 81)}, nil,
			[]string{"forward 0x1001", "forward 0x1002"}},
		{"sport", "SPD flow cache and last flow (source port)", outSAs,
			[]mPolicy{{dir: spd.DirOut, proto: protoUDP, sport: 1001, action: spd.Discard}, out(mPolicy{}, spd.LevelUnique, 1)},
			[]mFlow{flow(h1, h2, protoUDP, 1000, 80), flow(h1, h2, protoUDP, 1001, 80)}, nil,
			[]string{"forward 0x1001", "drop discard"}},
		{"dport", "SPD flow cache and last flow (destination port)", outSAs,
			[]mPolicy{{dir: spd.DirOut, proto: protoTCP, dport: 443, action: spd.None}, out(mPolicy{}, spd.LevelUnique, 2)},
			[]mFlow{flow(h1, h2, protoTCP, 1000, 80), flow(h1, h2, protoTCP, 1000, 443)}, nil,
			[]string{"forward 0x1002", "bypass"}},
		{"proto", "SPD flow cache and last flow (protocol)", outSAs,
			[]mPolicy{{dir: spd.DirOut, proto: protoTCP, action: spd.None}, out(mPolicy{}, spd.LevelUnique, 1)},
			[]mFlow{flow(h1, h2, protoUDP, 1000, 80), flow(h1, h2, protoTCP, 1000, 80)}, nil,
			[]string{"forward 0x1001", "bypass"}},
		{"src", "SPD flow cache and last flow (source address)", outSAs,
			[]mPolicy{out(mPolicy{src: pfx("10.1.0.1/32")}, spd.LevelUnique, 2), out(mPolicy{}, spd.LevelUnique, 1)},
			[]mFlow{flow(h1, h2, protoUDP, 1000, 80), flow(h3, h2, protoUDP, 1000, 80)}, nil,
			[]string{"forward 0x1002", "forward 0x1001"}},
		{"spi", "inbound last SA (SPI); per-SA policy decision", []genSA{sa(0x2001, ep("192.0.2.2"), ep("192.0.2.1"), 1, 0), sa(0x2002, ep("192.0.2.2"), ep("192.0.2.1"), 2, 0)},
			[]mPolicy{in(mPolicy{}, b, a, 1)},
			[]mFlow{flow(h2, h1, protoUDP, 80, 1000), flow(h2, h1, protoUDP, 80, 1000)}, []int{0, 1},
			[]string{"forward 0x2001", "drop policy-mismatch"}},
		{"dst", "inbound last SA (destination address)", []genSA{sa(0x2001, ep("192.0.2.2"), ep("192.0.2.1"), 1, 0), sa(0x2001, ep("192.0.2.2"), ep("192.0.2.3"), 1, 0)},
			[]mPolicy{in(mPolicy{}, b, a, 1)},
			[]mFlow{flow(h2, h1, protoUDP, 80, 1000), flow(h2, h1, protoUDP, 80, 1000)}, []int{0, 1},
			[]string{"forward 0x2001", "drop policy-mismatch"}},
		{"udp", "inbound last SA (ESP in UDP)", []genSA{sa(0x2001, ep("192.0.2.2"), ep("192.0.2.1"), 1, 0), sa(0x2001, udp("192.0.2.2"), udp("192.0.2.1"), 2, 0)},
			[]mPolicy{in(mPolicy{}, b, a, 2)},
			[]mFlow{flow(h2, h1, protoUDP, 80, 1000), flow(h2, h1, protoUDP, 80, 1000)}, []int{0, 1},
			[]string{"drop policy-mismatch", "forward 0x2001"}},
		{"inner port", "per-SA policy decision (inner destination port)", []genSA{sa(0x2001, ep("192.0.2.2"), ep("192.0.2.1"), 1, 0)},
			[]mPolicy{in(mPolicy{proto: protoUDP, dport: 1001}, b, a, 2), in(mPolicy{}, b, a, 1)},
			[]mFlow{flow(h2, h1, protoUDP, 80, 1000), flow(h2, h1, protoUDP, 80, 1001)}, []int{0, 0},
			[]string{"forward 0x2001", "drop policy-mismatch"}},
		{"inner source", "per-SA policy decision (inner source address)", []genSA{sa(0x2001, ep("192.0.2.2"), ep("192.0.2.1"), 1, 2)},
			[]mPolicy{in(mPolicy{src: pfx("10.3.0.0/16")}, a2, a, 1), in(mPolicy{}, b, a, 1)},
			[]mFlow{flow(h2, h1, protoTCP, 80, 1000), flow(h3, h1, protoTCP, 80, 1000)}, []int{0, 0},
			[]string{"forward 0x2001", "drop policy-mismatch"}},
	}
	pattern := []int{0, 1, 0, 0, 1, 1, 0, 1}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := genConfig{sas: tc.sas}
			for _, p := range tc.pols {
				// An unset address selects any IPv4 address.
				if !p.src.IsValid() {
					p.src = pfx("0.0.0.0/0")
				}
				if !p.dst.IsValid() {
					p.dst = pfx("0.0.0.0/0")
				}
				c.pols = append(c.pols, p)
			}
			g := &gen{serials: map[uint32]int{}}
			m := g.model(c, false)
			for _, general := range []bool{false, true} {
				e := newTestEngine(t, Options{})
				e.generalOnly = general
				applyText(t, e, c.text(nil))
				rig := &modelRig{t: t, pool: NewPool(0)}
				if tc.on != nil {
					rig.snd = newTestEngine(t, Options{})
					applyText(t, rig.snd, c.text(senderReqID))
				}
				check := func(idx []int) {
					t.Helper()
					data := make([][]byte, len(idx))
					for i, fi := range idx {
						data[i] = tc.flows[fi].packet(40+i, byte(i))
						if tc.on != nil {
							data[i] = rig.send(tc.sas[tc.on[fi]], tc.flows[fi], true, data[i])
						}
					}
					ps := rig.packets(data)
					defer rig.release(ps)
					if tc.on == nil {
						e.Outbound(ps)
					} else {
						e.Inbound(ps)
					}
					for i, p := range ps {
						fi := idx[i]
						got := fmt.Sprintf("%v %v", p.Verdict, p.Drop)
						if p.Verdict == VerdictForward {
							got = fmt.Sprintf("forward %#x", p.SPI)
						} else if p.Verdict == VerdictBypass {
							got = "bypass"
						}
						var mr mResult
						if tc.on == nil {
							mr = m.outbound(tc.flows[fi])
						} else {
							s := tc.sas[tc.on[fi]]
							mr = m.inbound(s.spi, s.dst.Addr(), s.udp, tc.flows[fi], true)
						}
						if got != tc.want[fi] || mr.verdict != p.Verdict || mr.drop != p.Drop {
							t.Errorf("%s, general path %v: batch %v packet %d (flow %d %s): got %s, want %s (model %v %v)",
								tc.cache, general, idx, i, fi, tc.flows[fi], got, tc.want[fi], mr.verdict, mr.drop)
						}
					}
				}
				check(pattern)
				for _, fi := range pattern {
					check([]int{fi})
				}
			}
		})
	}
}
