package exchange

import "github.com/keelinit/keel/ike/wire"

// within reports whether selector s lies inside one of the selectors of
// set: a responder may narrow what was proposed, never widen it (§2.9).
func within(s wire.Selector, set []wire.Selector) bool {
	for _, o := range set {
		if (o.Protocol == 0 || o.Protocol == s.Protocol) &&
			o.StartPort <= s.StartPort && s.EndPort <= o.EndPort && s.StartPort <= s.EndPort &&
			s.StartAddr.BitLen() == o.StartAddr.BitLen() &&
			o.StartAddr.Compare(s.StartAddr) <= 0 && s.EndAddr.Compare(o.EndAddr) <= 0 &&
			s.StartAddr.Compare(s.EndAddr) <= 0 {
			return true
		}
	}
	return false
}

// allWithin reports whether every selector of got lies within offered.
func allWithin(got, offered []wire.Selector) bool {
	if len(got) == 0 {
		return false
	}
	for _, s := range got {
		if !within(s, offered) {
			return false
		}
	}
	return true
}
