package exchange

import (
	"github.com/keelinit/keel/ike/keys"
	"github.com/keelinit/keel/ike/wire"
)

// transformTypes are the types a proposal may carry, in wire order.
var transformTypes = []wire.TransformType{wire.TransformENCR, wire.TransformPRF, wire.TransformINTEG, wire.TransformDH, wire.TransformESN}

// choose is the responder's proposal selection (§2.7, §3.3.6): in this
// side's order of preference (ours, then for each of ours the peer's
// proposals in their order), the first pair of proposals of protocol
// proto from which one transform of every type can be taken, each the
// first of ours the peer also offers. It returns the chosen proposal with
// the peer's proposal number and SPI, and false when none fits
// (NO_PROPOSAL_CHOSEN).
func choose(ours, theirs []wire.Proposal, proto wire.ProtocolID) (wire.Proposal, keys.Suite, bool) {
	for _, o := range ours {
		for _, t := range theirs {
			if t.Protocol != proto {
				continue
			}
			p, ok := chooseFrom(o, t)
			if !ok {
				continue
			}
			s, err := keys.FromProposal(&p)
			if err != nil {
				continue
			}
			return p, s, true
		}
	}
	return wire.Proposal{}, keys.Suite{}, false
}

func chooseFrom(o, t wire.Proposal) (wire.Proposal, bool) {
	p := wire.Proposal{Num: t.Num, Protocol: t.Protocol, SPI: t.SPI}
	aead := false
	for _, typ := range transformTypes {
		var mine, peer []wire.Transform
		for _, x := range o.Transforms {
			if x.Type == typ {
				mine = append(mine, x)
			}
		}
		for _, x := range t.Transforms {
			if x.Type == typ {
				peer = append(peer, x)
			}
		}
		if len(mine) == 0 && len(peer) == 0 {
			continue
		}
		var pick *wire.Transform
		for i := range mine {
			for j := range peer {
				if sameTransform(mine[i], peer[j]) {
					pick = &mine[i]
					break
				}
			}
			if pick != nil {
				break
			}
		}
		switch {
		case pick != nil:
			if typ == wire.TransformINTEG && aead && pick.ID != wire.AUTH_NONE {
				continue // an AEAD takes no integrity transform
			}
			p.Transforms = append(p.Transforms, *pick)
			if typ == wire.TransformENCR {
				aead = pick.ID == wire.ENCR_AES_GCM_16 || pick.ID == wire.ENCR_CHACHA20_POLY1305
			}
		case typ == wire.TransformINTEG && aead:
			// The peer combined an AEAD with integrity transforms for
			// other ciphers, or we listed none: fine for an AEAD.
		case typ == wire.TransformDH && t.Protocol != wire.ProtoIKE && offersNone(peer):
			// A CHILD_SA proposal that allows no PFS.
		default:
			return p, false
		}
	}
	return p, true
}

func offersNone(ts []wire.Transform) bool {
	for _, t := range ts {
		if t.ID == wire.DH_NONE {
			return true
		}
	}
	return len(ts) == 0
}

// narrow returns the intersections of the selectors the peer proposed
// with those configured (§2.9); empty means TS_UNACCEPTABLE.
func narrow(proposed, configured []wire.Selector) []wire.Selector {
	var out []wire.Selector
	for _, p := range proposed {
		for _, c := range configured {
			if s, ok := intersect(p, c); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func intersect(a, b wire.Selector) (wire.Selector, bool) {
	if a.StartAddr.BitLen() != b.StartAddr.BitLen() {
		return wire.Selector{}, false
	}
	s := wire.Selector{Protocol: a.Protocol}
	switch {
	case a.Protocol == 0:
		s.Protocol = b.Protocol
	case b.Protocol != 0 && b.Protocol != a.Protocol:
		return s, false
	}
	s.StartPort, s.EndPort = max(a.StartPort, b.StartPort), min(a.EndPort, b.EndPort)
	s.StartAddr, s.EndAddr = a.StartAddr, a.EndAddr
	if b.StartAddr.Compare(s.StartAddr) > 0 {
		s.StartAddr = b.StartAddr
	}
	if b.EndAddr.Compare(s.EndAddr) < 0 {
		s.EndAddr = b.EndAddr
	}
	if s.StartPort > s.EndPort || s.StartAddr.Compare(s.EndAddr) > 0 {
		return s, false
	}
	return s, true
}
