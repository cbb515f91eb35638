package ipsec

import (
	"bytes"
	"testing"
)

// TestRequestReuse: the same Packets carry, round after round, outbound
// and inbound packets of repeated and changing sizes, on SAs with and
// without ESN (whose AAD lives outside the packet), and with the test IV
// hook (the general sequence writer). A request kept from an earlier use
// (Packet.reqKey) that no longer fits would seal or open the wrong bytes
// and show up here as a drop or as different plaintext.
func TestRequestReuse(t *testing.T) {
	type pair struct{ a, b *Engine }
	var pairs []pair
	for _, esn := range []string{"", "-f esn"} {
		tp := topology{tunnel: true, xform: transforms[0], esnFlag: esn}
		tp.setAddrs(false)
		ca, cb := tp.configs()
		p := pair{newTestEngine(t, Options{}), newTestEngine(t, Options{})}
		applyText(t, p.a, ca)
		applyText(t, p.b, cb)
		pairs = append(pairs, p)
	}
	pool := NewPool(0)
	// ps only ever go out, qs only ever come in: each keeps the request
	// of its last use for the next.
	ps, qs := make([]*Packet, 4), make([]*Packet, 4)
	for i := range ps {
		ps[i], qs[i] = pool.Get(), pool.Get()
	}
	sizes := []int{100, 100, 1400, 100, 61, 61, 1400, 1400, 200}
	for round, n := range sizes {
		for k, pr := range []pair{pairs[0], pairs[1], pairs[0]} {
			if round == 3 && k == 2 {
				pr.a.testIV = func(iv []byte) {} // leaves the sequence number there
			}
			var want [][]byte
			for i, p := range ps {
				raw := udpPacket(innerA, innerB, uint16(1000+i), 2000, bytes.Repeat([]byte{byte(round*16 + i)}, n+i))
				want = append(want, raw)
				p.SetData(raw)
			}
			pr.a.Outbound(ps)
			pr.a.testIV = nil
			for i, p := range ps {
				if p.Verdict != VerdictForward {
					t.Fatalf("round %d/%d packet %d: outbound %v/%v", round, k, i, p.Verdict, p.Drop)
				}
				qs[i].SetData(p.Data())
			}
			pr.b.Inbound(qs)
			for i, p := range qs {
				if p.Verdict != VerdictForward || !bytes.Equal(p.Data(), want[i]) {
					t.Fatalf("round %d/%d packet %d: inbound %v/%v, plaintext equal %v", round, k, i, p.Verdict, p.Drop, bytes.Equal(p.Data(), want[i]))
				}
			}
		}
	}
}
