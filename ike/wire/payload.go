package wire

import (
	"encoding/binary"
	"fmt"
)

// Payload is one payload of a message. Its generic header (§3.2) is
// written by the chain encoder; appendBody appends the rest.
type Payload interface {
	// Type is the payload's type code.
	Type() PayloadType
	appendBody(b []byte) ([]byte, error)
}

// genericLen is the length of the generic payload header.
const genericLen = 4

// critical is the critical bit of the generic payload header.
const critical = 0x80

func appendChain(b []byte, ps []Payload) (PayloadType, []byte, error) {
	if len(ps) == 0 {
		return PayloadNone, b, nil
	}
	for i, p := range ps {
		start := len(b)
		b = append(b, 0, 0, 0, 0)
		var next PayloadType
		switch sk := p.(type) {
		case *Encrypted:
			if i != len(ps)-1 {
				return 0, nil, fmt.Errorf("ike: SK payload at %d of %d: it must be last", i+1, len(ps))
			}
			next = sk.Next
		default:
			if i+1 < len(ps) {
				next = ps[i+1].Type()
			}
		}
		flags := uint8(0)
		if u, ok := p.(*Unknown); ok && u.Critical {
			flags = critical
		}
		var err error
		if b, err = p.appendBody(b); err != nil {
			return 0, nil, fmt.Errorf("ike: %s payload: %w", p.Type(), err)
		}
		n := len(b) - start
		if n > 0xffff {
			return 0, nil, fmt.Errorf("ike: %s payload of %d bytes exceeds 65535", p.Type(), n)
		}
		b[start] = uint8(next)
		b[start+1] = flags
		binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	}
	return ps[0].Type(), b, nil
}

// decodeChain parses the payloads of b[off:], the first of type next.
// inMessage allows an SK payload, which must then end the message.
func decodeChain(next PayloadType, b []byte, off int, inMessage bool) ([]Payload, error) {
	var ps []Payload
	for next != PayloadNone {
		if len(b)-off < genericLen {
			return nil, syntaxErr(off, next, "%d bytes left, shorter than a payload header", len(b)-off)
		}
		hdrNext := PayloadType(b[off])
		crit := b[off+1]&critical != 0
		n := int(binary.BigEndian.Uint16(b[off+2:]))
		if n < genericLen || n > len(b)-off {
			return nil, syntaxErr(off+2, next, "payload length %d, %d bytes left", n, len(b)-off)
		}
		body := b[off+genericLen : off+n]
		var p Payload
		var err error
		switch next {
		case PayloadSK:
			if !inMessage {
				return nil, syntaxErr(off, next, "SK payload inside an SK payload")
			}
			if off+n != len(b) {
				return nil, syntaxErr(off, next, "%d bytes follow the SK payload, which must be last", len(b)-off-n)
			}
			if len(body) == 0 {
				return nil, syntaxErr(off, next, "empty body")
			}
			p = &Encrypted{Next: hdrNext, Body: clone(body)}
			hdrNext = PayloadNone
		default:
			parse, known := parsers[next]
			if !known {
				if crit {
					return nil, &Error{Offset: off, Payload: next, Notify: UNSUPPORTED_CRITICAL_PAYLOAD,
						Data: []byte{uint8(next)}, Reason: "unsupported payload type with the critical bit set"}
				}
				p = &Unknown{T: next, Data: clone(body)}
				break
			}
			p, err = parse(body)
			if err != nil {
				return nil, syntaxErr(off+genericLen, next, "%v", err)
			}
		}
		ps = append(ps, p)
		off += n
		next = hdrNext
	}
	if off != len(b) {
		return nil, syntaxErr(off, PayloadNone, "%d bytes after the last payload", len(b)-off)
	}
	return ps, nil
}

// parsers maps each known payload type (except SK) to its body parser.
var parsers = map[PayloadType]func([]byte) (Payload, error){
	PayloadSA:      func(b []byte) (Payload, error) { return parseSA(b) },
	PayloadKE:      func(b []byte) (Payload, error) { return parseKE(b) },
	PayloadIDi:     func(b []byte) (Payload, error) { return parseID(b, false) },
	PayloadIDr:     func(b []byte) (Payload, error) { return parseID(b, true) },
	PayloadCERT:    func(b []byte) (Payload, error) { return parseCert(b, false) },
	PayloadCERTREQ: func(b []byte) (Payload, error) { return parseCert(b, true) },
	PayloadAUTH:    func(b []byte) (Payload, error) { return parseAuth(b) },
	PayloadNonce:   func(b []byte) (Payload, error) { return parseNonce(b) },
	PayloadN:       func(b []byte) (Payload, error) { return parseNotify(b) },
	PayloadD:       func(b []byte) (Payload, error) { return parseDelete(b) },
	PayloadV:       func(b []byte) (Payload, error) { return &VendorID{Data: clone(b)}, nil },
	PayloadTSi:     func(b []byte) (Payload, error) { return parseTS(b, false) },
	PayloadTSr:     func(b []byte) (Payload, error) { return parseTS(b, true) },
}

// ParseBody parses the body (after the generic header) of a payload of
// type t. It is what Decode runs for each payload; exported for the fuzz
// targets and for callers that handle one payload alone.
func ParseBody(t PayloadType, body []byte) (Payload, error) {
	parse, ok := parsers[t]
	if !ok {
		return nil, fmt.Errorf("ike: no parser for payload type %s", t)
	}
	return parse(body)
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// Unknown is a payload of a type this codec does not parse, received with
// its critical bit clear and kept so that it can be logged or forwarded.
type Unknown struct {
	T        PayloadType
	Critical bool // set only for payloads built to be sent
	Data     []byte
}

// Type returns the payload's type code.
func (u *Unknown) Type() PayloadType { return u.T }

func (u *Unknown) appendBody(b []byte) ([]byte, error) { return append(b, u.Data...), nil }

// Encrypted is the SK payload (§3.14): Next is the type of the first
// payload inside, Body is IV, ciphertext and integrity checksum data, as
// ike/keys produces and opens them.
type Encrypted struct {
	Next PayloadType
	Body []byte
}

// Type returns PayloadSK.
func (e *Encrypted) Type() PayloadType { return PayloadSK }

func (e *Encrypted) appendBody(b []byte) ([]byte, error) { return append(b, e.Body...), nil }
