package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// TS is a Traffic Selector payload (§3.13): TSi, or TSr when Responder.
type TS struct {
	Responder bool
	Selectors []Selector
}

// Selector is one traffic selector (§3.13.1): a protocol, a port range and
// an address range of one family. Protocol 0 and ports 0-65535 mean any.
type Selector struct {
	Protocol           uint8
	StartPort, EndPort uint16
	StartAddr, EndAddr netip.Addr
}

// Type returns PayloadTSi or PayloadTSr.
func (t *TS) Type() PayloadType {
	if t.Responder {
		return PayloadTSr
	}
	return PayloadTSi
}

// String returns the selectors in strongSwan's notation (10.0.0.0/24[tcp/80]).
func (s Selector) String() string {
	proto := ""
	if s.Protocol != 0 || s.StartPort != 0 || s.EndPort != 0xffff {
		proto = fmt.Sprintf("[%d/%d-%d]", s.Protocol, s.StartPort, s.EndPort)
	}
	return s.StartAddr.String() + ".." + s.EndAddr.String() + proto
}

func (t *TS) appendBody(b []byte) ([]byte, error) {
	if len(t.Selectors) == 0 || len(t.Selectors) > 255 {
		return nil, fmt.Errorf("%d selectors, want 1 to 255", len(t.Selectors))
	}
	b = append(b, uint8(len(t.Selectors)), 0, 0, 0)
	for i, s := range t.Selectors {
		var typ TSType
		var n uint16
		switch {
		case s.StartAddr.Is4() && s.EndAddr.Is4():
			typ, n = TS_IPV4_ADDR_RANGE, 16
		case s.StartAddr.Is6() && s.EndAddr.Is6():
			typ, n = TS_IPV6_ADDR_RANGE, 40
		default:
			return nil, fmt.Errorf("selector %d: addresses %v and %v are not of one family", i+1, s.StartAddr, s.EndAddr)
		}
		b = append(b, uint8(typ), s.Protocol, uint8(n>>8), uint8(n))
		b = binary.BigEndian.AppendUint16(b, s.StartPort)
		b = binary.BigEndian.AppendUint16(b, s.EndPort)
		b = append(b, s.StartAddr.AsSlice()...)
		b = append(b, s.EndAddr.AsSlice()...)
	}
	return b, nil
}

func parseTS(b []byte, responder bool) (*TS, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes, shorter than the selector count", len(b))
	}
	n := int(b[0])
	if n == 0 {
		return nil, errors.New("no traffic selectors")
	}
	t := &TS{Responder: responder}
	off := 4
	for i := 0; i < n; i++ {
		if len(b)-off < 8 {
			return nil, fmt.Errorf("selector %d of %d: %d bytes left", i+1, n, len(b)-off)
		}
		typ := TSType(b[off])
		sl := int(binary.BigEndian.Uint16(b[off+2:]))
		var alen int
		switch typ {
		case TS_IPV4_ADDR_RANGE:
			alen = 4
		case TS_IPV6_ADDR_RANGE:
			alen = 16
		default:
			// §3.13.1 defines no way to skip an unknown type safely; the
			// exchange answers TS_UNACCEPTABLE, the codec refuses it.
			return nil, fmt.Errorf("selector %d: unsupported TS type %d", i+1, typ)
		}
		if sl != 8+2*alen || sl > len(b)-off {
			return nil, fmt.Errorf("selector %d: length %d, want %d with %d bytes left", i+1, sl, 8+2*alen, len(b)-off)
		}
		s := Selector{Protocol: b[off+1], StartPort: binary.BigEndian.Uint16(b[off+4:]), EndPort: binary.BigEndian.Uint16(b[off+6:])}
		s.StartAddr, _ = netip.AddrFromSlice(b[off+8 : off+8+alen])
		s.EndAddr, _ = netip.AddrFromSlice(b[off+8+alen : off+8+2*alen])
		t.Selectors = append(t.Selectors, s)
		off += sl
	}
	if off != len(b) {
		return nil, fmt.Errorf("%d bytes after the last selector", len(b)-off)
	}
	return t, nil
}
