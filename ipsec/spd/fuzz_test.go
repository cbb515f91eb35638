package spd

import (
	"net/netip"
	"testing"
)

// byteSource hands out fuzz bytes, then zeros.
type byteSource struct{ b []byte }

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *byteSource) addr(v6 bool) netip.Addr {
	c := s.next()
	if v6 {
		b := netip.MustParseAddr("2001:db8::").As16()
		b[14] = c >> 4
		b[15] = c & 0xf
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{10, 0, c >> 5, c & 0x1f})
}

func (s *byteSource) prefix(v6 bool) netip.Prefix {
	c := s.next()
	if c == 255 {
		return netip.Prefix{}
	}
	a := s.addr(v6)
	return netip.PrefixFrom(a, int(c)%(a.BitLen()+1))
}

func (s *byteSource) flow() Flow {
	c := s.next()
	f := Flow{Src: s.addr(c&1 != 0), Dst: s.addr(c&2 != 0)}
	if c&4 != 0 {
		f.Proto = []uint8{1, 6, 17, 58}[c>>3&3]
	}
	f.SrcPort = uint16(c >> 5 & 3)
	f.DstPort = uint16(s.next() & 3)
	return f
}

// FuzzLookupMatchesLinear decodes a policy list, a sequence of edits and
// flows from the input and checks that Lookup and Classify agree with the
// linear first-match scan at every step.
func FuzzLookupMatchesLinear(f *testing.F) {
	f.Add([]byte{3, 0, 24, 1, 24, 2, 0, 0, 6, 7, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{8, 1, 255, 255, 0, 0, 0, 0, 32, 9, 32, 9, 6, 1, 1, 0, 128, 3, 64, 3, 0, 0, 0})
	f.Add([]byte("\x10 the quick brown fox jumps over the lazy dog 0123456789"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		n := int(src.next() % 64)
		var ps []Policy
		for range n {
			c := src.next()
			p := Policy{Dir: Dir(c % 3), Action: Action(c >> 2 % 2)}
			v6 := c&0x10 != 0
			p.Sel.Src = src.prefix(v6)
			p.Sel.Dst = src.prefix(v6)
			m := src.next()
			if m&1 != 0 {
				p.Sel.Proto = []uint8{1, 6, 17, 58}[m>>1&3]
			}
			p.Sel.SrcPort = uint16(m >> 3 & 3)
			p.Sel.DstPort = uint16(m >> 5 & 3)
			ps = append(ps, p)
		}
		s := New(WithCacheEntries(int(src.next()%4) * 4))
		if err := s.Replace(ps); err != nil {
			// duplicates are legal input for the fuzzer; drop them
			ps = dedupe(ps)
			if err := s.Replace(ps); err != nil {
				t.Fatal(err)
			}
		}
		for len(src.b) > 0 {
			c := src.next()
			switch c % 8 {
			case 0:
				if l := s.Len(); l > 0 {
					p := s.Policies()[int(src.next())%l]
					if err := s.Delete(p.Dir, p.Sel); err != nil {
						t.Fatal(err)
					}
				}
			case 1:
				_ = s.Add(Policy{Dir: Dir(c >> 3 % 3), Action: None, Sel: Selector{Src: src.prefix(false), Dst: src.prefix(false)}})
			default:
				fl := src.flow()
				d := Dir(c >> 3 % 3)
				lp, lok := s.LookupLinear(d, fl)
				for range 2 {
					p, ok := s.Lookup(d, fl)
					cp, cok := s.Classify(d, fl)
					if ok != lok || cok != lok || ok && (p != lp || cp != lp) {
						t.Fatalf("flow %+v dir %v: Lookup %v,%v Classify %v,%v linear %v,%v", fl, d, p, ok, cp, cok, lp, lok)
					}
				}
			}
		}
	})
}

func dedupe(ps []Policy) []Policy {
	type key struct {
		d Dir
		s Selector
	}
	seen := map[key]bool{}
	out := ps[:0]
	for _, p := range ps {
		k := key{p.Dir, p.Sel.canonical()}
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}
