package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SA is the Security Association payload (§3.3): proposals in preference order.
type SA struct {
	Proposals []Proposal
}

// Proposal is one proposal substructure (§3.3.1).
type Proposal struct {
	Num        uint8
	Protocol   ProtocolID
	SPI        []byte // empty, 4 octets (AH, ESP) or 8 (IKE, in a rekey)
	Transforms []Transform
}

// Transform is one transform substructure (§3.3.2).
type Transform struct {
	Type       TransformType
	ID         uint16
	Attributes []Attribute
}

// Attribute is a transform attribute (§3.3.5). A TV attribute (the AF bit
// set) has a two-octet Value; a TLV one any length.
type Attribute struct {
	Type  uint16 // without the AF bit
	TV    bool
	Value []byte
}

// KeyLength returns the value of the Key Length attribute and whether the
// transform has one.
func (t *Transform) KeyLength() (uint16, bool) {
	for _, a := range t.Attributes {
		if a.Type == AttrKeyLength && a.TV {
			return binary.BigEndian.Uint16(a.Value), true
		}
	}
	return 0, false
}

// WithKeyLength returns a transform with ID id of type typ carrying a Key
// Length attribute of bits (omitted when bits is 0).
func WithKeyLength(typ TransformType, id uint16, bits uint16) Transform {
	t := Transform{Type: typ, ID: id}
	if bits != 0 {
		t.Attributes = []Attribute{{Type: AttrKeyLength, TV: true, Value: binary.BigEndian.AppendUint16(nil, bits)}}
	}
	return t
}

// Type returns PayloadSA.
func (*SA) Type() PayloadType { return PayloadSA }

func (s *SA) appendBody(b []byte) ([]byte, error) {
	if len(s.Proposals) == 0 {
		return nil, errors.New("no proposals")
	}
	for i, p := range s.Proposals {
		start := len(b)
		more := uint8(2)
		if i == len(s.Proposals)-1 {
			more = 0
		}
		if len(p.Transforms) > 255 {
			return nil, fmt.Errorf("proposal %d: %d transforms exceed 255", p.Num, len(p.Transforms))
		}
		if len(p.SPI) > 255 {
			return nil, fmt.Errorf("proposal %d: SPI of %d bytes", p.Num, len(p.SPI))
		}
		b = append(b, more, 0, 0, 0, p.Num, uint8(p.Protocol), uint8(len(p.SPI)), uint8(len(p.Transforms)))
		b = append(b, p.SPI...)
		for j, t := range p.Transforms {
			ts := len(b)
			tmore := uint8(3)
			if j == len(p.Transforms)-1 {
				tmore = 0
			}
			b = append(b, tmore, 0, 0, 0, uint8(t.Type), 0, uint8(t.ID>>8), uint8(t.ID))
			for _, a := range t.Attributes {
				if a.TV {
					if len(a.Value) != 2 {
						return nil, fmt.Errorf("proposal %d: TV attribute %d with a %d-byte value", p.Num, a.Type, len(a.Value))
					}
					b = append(b, uint8(a.Type>>8)|0x80, uint8(a.Type), a.Value[0], a.Value[1])
					continue
				}
				if len(a.Value) > 0xffff || a.Type > 0x7fff {
					return nil, fmt.Errorf("proposal %d: attribute %d does not fit", p.Num, a.Type)
				}
				b = append(b, uint8(a.Type>>8), uint8(a.Type), uint8(len(a.Value)>>8), uint8(len(a.Value)))
				b = append(b, a.Value...)
			}
			if len(b)-ts > 0xffff {
				return nil, fmt.Errorf("proposal %d: transform too long", p.Num)
			}
			binary.BigEndian.PutUint16(b[ts+2:], uint16(len(b)-ts))
		}
		if len(b)-start > 0xffff {
			return nil, fmt.Errorf("proposal %d too long", p.Num)
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	return b, nil
}

func parseSA(b []byte) (*SA, error) {
	s := &SA{}
	for off := 0; ; {
		if len(b)-off < 8 {
			return nil, fmt.Errorf("proposal %d: %d bytes left, shorter than a proposal header", len(s.Proposals)+1, len(b)-off)
		}
		more := b[off]
		n := int(binary.BigEndian.Uint16(b[off+2:]))
		if more != 0 && more != 2 {
			return nil, fmt.Errorf("proposal %d: last substruc %d, want 0 or 2", len(s.Proposals)+1, more)
		}
		if n < 8 || n > len(b)-off {
			return nil, fmt.Errorf("proposal %d: length %d, %d bytes left", len(s.Proposals)+1, n, len(b)-off)
		}
		p, err := parseProposal(b[off : off+n])
		if err != nil {
			return nil, fmt.Errorf("proposal %d: %w", len(s.Proposals)+1, err)
		}
		s.Proposals = append(s.Proposals, p)
		off += n
		if more == 0 {
			if off != len(b) {
				return nil, fmt.Errorf("%d bytes after the last proposal", len(b)-off)
			}
			return s, nil
		}
	}
}

func parseProposal(b []byte) (Proposal, error) {
	p := Proposal{Num: b[4], Protocol: ProtocolID(b[5])}
	spiLen, nt := int(b[6]), int(b[7])
	switch {
	case p.Protocol == ProtoIKE && spiLen != 0 && spiLen != 8:
		return p, fmt.Errorf("IKE proposal with a %d-byte SPI, want 0 or 8", spiLen)
	case (p.Protocol == ProtoESP || p.Protocol == ProtoAH) && spiLen != 4:
		return p, fmt.Errorf("%s proposal with a %d-byte SPI, want 4", p.Protocol, spiLen)
	}
	if 8+spiLen > len(b) {
		return p, fmt.Errorf("SPI of %d bytes overruns the proposal", spiLen)
	}
	p.SPI = clone(b[8 : 8+spiLen])
	off := 8 + spiLen
	if nt == 0 {
		return p, errors.New("no transforms")
	}
	for i := 0; i < nt; i++ {
		if len(b)-off < 8 {
			return p, fmt.Errorf("transform %d of %d: %d bytes left", i+1, nt, len(b)-off)
		}
		more := b[off]
		n := int(binary.BigEndian.Uint16(b[off+2:]))
		if n < 8 || n > len(b)-off {
			return p, fmt.Errorf("transform %d: length %d, %d bytes left", i+1, n, len(b)-off)
		}
		last := i == nt-1
		if (last && more != 0) || (!last && more != 3) {
			return p, fmt.Errorf("transform %d of %d: last substruc %d", i+1, nt, more)
		}
		t := Transform{Type: TransformType(b[off+4]), ID: binary.BigEndian.Uint16(b[off+6:])}
		attrs := b[off+8 : off+n]
		for len(attrs) > 0 {
			if len(attrs) < 4 {
				return p, fmt.Errorf("transform %d: %d bytes left, shorter than an attribute", i+1, len(attrs))
			}
			typ := binary.BigEndian.Uint16(attrs)
			if typ&0x8000 != 0 {
				t.Attributes = append(t.Attributes, Attribute{Type: typ & 0x7fff, TV: true, Value: clone(attrs[2:4])})
				attrs = attrs[4:]
				continue
			}
			al := int(binary.BigEndian.Uint16(attrs[2:]))
			if 4+al > len(attrs) {
				return p, fmt.Errorf("transform %d: attribute %d of %d bytes overruns the transform", i+1, typ, al)
			}
			if typ == AttrKeyLength {
				return p, fmt.Errorf("transform %d: Key Length attribute in TLV form", i+1)
			}
			t.Attributes = append(t.Attributes, Attribute{Type: typ, Value: clone(attrs[4 : 4+al])})
			attrs = attrs[4+al:]
		}
		p.Transforms = append(p.Transforms, t)
		off += n
	}
	if off != len(b) {
		return p, fmt.Errorf("%d bytes after the last transform", len(b)-off)
	}
	return p, nil
}
