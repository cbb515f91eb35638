package dataplane

import (
	"net/netip"
	"testing"

	"github.com/keelinit/keel/ipsec"
)

// FuzzInbound feeds arbitrary datagrams from the network (untrusted input)
// to a gateway's inbound path: nothing may panic, and nothing forged may
// reach the TUN (only the seeded genuine packet authenticates).
func FuzzInbound(f *testing.F) {
	h := newHotPath(f, 1, 100)
	h.run() // seq 1 is now taken: a replayed copy must be dropped
	genuine := append([]byte(nil), h.outA.last[0]...)
	f.Add(genuine)
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Add([]byte{0, 0, 0, 0, 1, 2, 3})
	f.Add(genuine[:8])
	f.Fuzz(func(t *testing.T, data []byte) {
		p := h.in[0]
		rb := p.ReadBuffer()
		if len(data) > len(rb) {
			return
		}
		p.Commit(copy(rb, data))
		p.Frame, p.Src, p.Dst = ipsec.FrameUDP, netip.AddrPortFrom(gwA, 4500), netip.AddrPortFrom(gwB, 4500)
		before := h.tunB.n
		h.wbufs, _ = h.b.forwardIn(h.in[:1], h.wbufs, &h.c)
		if h.tunB.n != before {
			t.Fatalf("forged or replayed datagram of %d bytes delivered", len(data))
		}
	})
}
