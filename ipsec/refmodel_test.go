package ipsec

import (
	"net/netip"

	"github.com/keelinit/keel/ipsec/spd"
)

// The reference model of SA selection (RFC 4301 sections 4.4.1, 5.1 and
// 5.2, FreeBSD key_allocsa_policy): a linear scan of the policies in
// order, a linear scan of the SAs, no caches. It shares no code with the
// engine's data path: the engine is checked against it.

// mSA is an SA as the model sees it.
type mSA struct {
	src, dst netip.AddrPort // ports set for ESP in UDP (default 4500)
	udp      bool
	spi      uint32
	mode     spd.Mode // tunnel, transport or any
	reqid    uint32
	serial   int // installation order: larger is newer
}

// mPolicy is an SPD entry as the model sees it. Zero prefixes, proto and
// ports are wildcards.
type mPolicy struct {
	dir          spd.Dir
	src, dst     netip.Prefix
	proto        uint8
	sport, dport uint16
	action       spd.Action
	mode         spd.Mode // of the request (ipsec)
	rsrc, rdst   netip.Addr
	level        spd.Level
	reqid        uint32
}

// mFlow is the tuple a policy selects on (ICMP: type and code as ports).
type mFlow struct {
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16
}

func (p *mPolicy) selects(f mFlow) bool {
	in := func(pr netip.Prefix, a netip.Addr) bool { return !pr.IsValid() || pr.Contains(a) }
	return in(p.src, f.src) && in(p.dst, f.dst) && (p.proto == 0 || p.proto == f.proto) &&
		(p.sport == 0 || p.sport == f.sport) && (p.dport == 0 || p.dport == f.dport)
}

// mResult is what the model expects of one packet.
type mResult struct {
	verdict  Verdict
	drop     DropReason
	spi      uint32
	src, dst netip.AddrPort // outer addresses (outbound forward)
	tunnel   bool           // the mode the packet was (de)encapsulated in
}

type model struct {
	sas       []mSA
	pols      []mPolicy
	preferOld bool
}

// first returns the first policy of direction dir selecting f.
func (m *model) first(dir spd.Dir, f mFlow) *mPolicy {
	for i := range m.pols {
		if p := &m.pols[i]; p.dir == dir && p.selects(f) {
			return p
		}
	}
	return nil
}

// outbound is the fate of a plaintext packet of flow f.
func (m *model) outbound(f mFlow) mResult {
	p := m.first(spd.DirOut, f)
	switch {
	case p == nil:
		return mResult{drop: DropNoPolicy}
	case p.action == spd.None:
		return mResult{verdict: VerdictBypass}
	case p.action == spd.Discard:
		return mResult{drop: DropDiscard}
	}
	src, dst := p.rsrc, p.rdst
	if p.mode == spd.ModeTransport {
		src, dst = f.src, f.dst
	}
	var best *mSA
	for i := range m.sas {
		s := &m.sas[i]
		if s.src.Addr() != src || s.dst.Addr() != dst || (s.mode != spd.ModeAny && s.mode != p.mode) {
			continue
		}
		if p.level == spd.LevelUnique && p.reqid != 0 && s.reqid != p.reqid {
			continue
		}
		if best == nil || (s.serial > best.serial) != m.preferOld {
			best = s
		}
	}
	if best == nil {
		if p.level == spd.LevelUse {
			return mResult{verdict: VerdictBypass}
		}
		return mResult{drop: DropNoOutSA}
	}
	tunnel := p.mode == spd.ModeTunnel
	if best.mode != spd.ModeAny {
		tunnel = best.mode == spd.ModeTunnel
	}
	return mResult{verdict: VerdictForward, spi: best.spi, src: best.src, dst: best.dst, tunnel: tunnel}
}

// inbound is the fate of an ESP packet with the given SPI to outer
// address dst (in UDP or not) carrying flow f, encapsulated in tunnel
// mode or not: the SA is found by SPI, destination and protocol, and the
// decapsulated packet must match an inbound ipsec policy whose request
// the SA serves (RFC 4301 section 5.2).
func (m *model) inbound(spi uint32, dst netip.Addr, udp bool, f mFlow, tunnel bool) mResult {
	var s *mSA
	for i := range m.sas {
		if x := &m.sas[i]; x.spi == spi && x.dst.Addr() == dst && x.udp == udp {
			s = x
		}
	}
	if s == nil {
		return mResult{drop: DropNoSA}
	}
	if s.mode != spd.ModeAny && (s.mode == spd.ModeTunnel) != tunnel {
		// The engine decapsulates by the SA's mode; the generator never
		// sends a packet in the other one.
		panic("model: packet in the wrong mode for its SA")
	}
	res := mResult{verdict: VerdictForward, spi: spi, tunnel: tunnel}
	p := m.first(spd.DirIn, f)
	ok := p != nil && p.action == spd.IPsec && (p.mode == spd.ModeTunnel) == tunnel &&
		(!tunnel || (p.rsrc == s.src.Addr() && p.rdst == s.dst.Addr())) &&
		(p.level != spd.LevelUnique || p.reqid == 0 || p.reqid == s.reqid)
	if !ok {
		return mResult{drop: DropPolicy, spi: spi}
	}
	return res
}

// clear is the fate of an inbound packet that is not ESP.
func (m *model) clear(f mFlow) mResult {
	p := m.first(spd.DirIn, f)
	switch {
	case p == nil || p.action == spd.None || (p.action == spd.IPsec && p.level == spd.LevelUse):
		return mResult{verdict: VerdictBypass}
	case p.action == spd.IPsec:
		return mResult{drop: DropNotESP}
	}
	return mResult{drop: DropDiscard}
}
