package dataplane

import (
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/setkey"
)

// A gateway serves every peer its engine's SAs name: outbound ESP goes to
// the remote endpoint of the SA the policy selected (forwardOut sends per
// run of packets to one endpoint), inbound ESP is accepted from anyone and
// identified by SPI by the engine. The peer table only attributes traffic
// to peers for the per-peer counters; it never decides a packet's fate.

// peerCounters are one peer's counters, updated once per run of packets.
type peerCounters struct {
	outPkts, outBytes, outDrops atomic.Uint64
	inPkts, inBytes, inDrops    atomic.Uint64
}

// peerTable is an immutable snapshot of the peers, rebuilt by Refresh.
type peerTable struct {
	addrs []netip.AddrPort // in the order of the SAs that name them
	ctrs  []*peerCounters
	// byDst attributes outbound packets: the SA's remote endpoint as
	// forwardOut sends to it (normalised by peerKey).
	byDst map[netip.AddrPort]*peerCounters
	// bySPI attributes inbound packets the engine matched to an SA (one
	// of this gateway's encapsulation, to the local address).
	bySPI map[uint32]*peerCounters
	// byAddr attributes the other inbound packets (an unknown SPI, say)
	// by their outer source address: the first peer at that address.
	byAddr map[netip.Addr]*peerCounters
}

// peerKey is how the gateway names a remote endpoint: the address, and the
// UDP port for ESP-in-UDP (DefaultPort where the SA gives none, as
// forwardOut sends).
func (g *Gateway) peerKey(a netip.AddrPort) netip.AddrPort {
	if g.cfg.Encap != EncapUDP {
		return netip.AddrPortFrom(a.Addr().Unmap(), 0)
	}
	if a.Port() == 0 {
		return netip.AddrPortFrom(a.Addr().Unmap(), DefaultPort)
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// Refresh re-reads the engine's SAs and updates the set of peers the
// gateway counts traffic for: call it after every Apply. Counters of peers
// that remain are kept; those of peers no SA names any more are dropped.
// Traffic is forwarded by the engine's configuration whether or not Refresh
// ran (until it does, a new peer's packets count only in the interface's
// totals). Safe for concurrent use.
func (g *Gateway) Refresh() {
	g.peersMu.Lock()
	defer g.peersMu.Unlock()
	old := g.peers.Load()
	t := &peerTable{byDst: map[netip.AddrPort]*peerCounters{}, bySPI: map[uint32]*peerCounters{}, byAddr: map[netip.Addr]*peerCounters{}}
	get := func(k netip.AddrPort) *peerCounters {
		if i := slices.Index(t.addrs, k); i >= 0 {
			return t.ctrs[i]
		}
		var c *peerCounters
		if old != nil {
			if i := slices.Index(old.addrs, k); i >= 0 {
				c = old.ctrs[i]
			}
		}
		if c == nil {
			c = &peerCounters{}
		}
		t.addrs, t.ctrs = append(t.addrs, k), append(t.ctrs, c)
		if _, ok := t.byAddr[k.Addr()]; !ok {
			t.byAddr[k.Addr()] = c
		}
		return c
	}
	local := g.cfg.Local.Unmap()
	wantProto := setkey.ProtoESPUDP
	if g.cfg.Encap == EncapESP {
		wantProto = setkey.ProtoESP
	}
	for _, sa := range g.eng.SAs() {
		if sa.Dst.Addr().Unmap() == local {
			c := get(g.peerKey(sa.Src))
			if sa.Proto == wantProto {
				t.bySPI[sa.SPI] = c
			}
			continue
		}
		k := g.peerKey(sa.Dst)
		t.byDst[k] = get(k)
	}
	g.peers.Store(t)
}

// spiCache remembers the last SPI inPeer found, so that a run of packets
// of one SA costs one map lookup.
type spiCache struct {
	spi uint32 // 0: empty (no SA has SPI 0)
	c   *peerCounters
}

// inPeer returns the counters inbound packet p (after the engine) counts
// against, or nil: the peer of its SA, else the first peer at its outer
// source address.
func (t *peerTable) inPeer(p *ipsec.Packet, k *spiCache) *peerCounters {
	if p.SPI != 0 {
		if p.SPI == k.spi {
			return k.c
		}
		if c := t.bySPI[p.SPI]; c != nil {
			k.spi, k.c = p.SPI, c
			return c
		}
	}
	return t.byAddr[p.Src.Addr().Unmap()]
}

// peerRun accumulates the counts of a run of packets of one peer, so that
// the shared counters are touched once per run, not per packet.
type peerRun struct {
	c                 *peerCounters
	pkts, bytes, drop uint64
}

// switchTo flushes the run if c is another peer's and starts c's.
func (r *peerRun) switchTo(c *peerCounters, out bool) {
	if c != r.c {
		r.flush(out)
		r.c = c
	}
}

// flush publishes the run (outbound or inbound counters).
func (r *peerRun) flush(out bool) {
	if c := r.c; c != nil && (r.pkts|r.drop) != 0 {
		if out {
			c.outPkts.Add(r.pkts)
			c.outBytes.Add(r.bytes)
			c.outDrops.Add(r.drop)
		} else {
			c.inPkts.Add(r.pkts)
			c.inBytes.Add(r.bytes)
			c.inDrops.Add(r.drop)
		}
	}
	*r = peerRun{}
}

// PeerStatus is the traffic of one peer: a remote endpoint some SA names.
type PeerStatus struct {
	// Addr is the peer's outer address; its port for ESP-in-UDP.
	Addr netip.AddrPort
	// OutPackets and OutBytes count the ESP packets sent to the peer and
	// their bytes; OutDrops those whose send failed.
	OutPackets, OutBytes, OutDrops uint64
	// InPackets and InBytes count the inner packets received from the
	// peer and written to the TUN; InDrops the peer's ESP packets the
	// engine or the gateway dropped (by SPI, or by outer source).
	InPackets, InBytes, InDrops uint64
}

// peerStatus returns the current peers' counters.
func (g *Gateway) peerStatus() []PeerStatus {
	t := g.peers.Load()
	if t == nil {
		return nil
	}
	out := make([]PeerStatus, len(t.addrs))
	for i, c := range t.ctrs {
		out[i] = PeerStatus{Addr: t.addrs[i],
			OutPackets: c.outPkts.Load(), OutBytes: c.outBytes.Load(), OutDrops: c.outDrops.Load(),
			InPackets: c.inPkts.Load(), InBytes: c.inBytes.Load(), InDrops: c.inDrops.Load()}
	}
	return out
}
