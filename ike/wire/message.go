package wire

import "fmt"

// Message is an IKE message: its header and its payloads, in order. When
// the message is protected, its last payload is an *Encrypted.
type Message struct {
	Header
	Payloads []Payload
}

// Encode returns the message's wire form. It fails if a payload's body
// exceeds its length field, if an *Encrypted is not the last payload, or if
// the message exceeds MaxMessageLen.
func (m *Message) Encode() ([]byte, error) {
	b := make([]byte, HeaderLen, 512)
	first, b, err := appendChain(b, m.Payloads)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxMessageLen {
		return nil, fmt.Errorf("ike: message of %d bytes exceeds %d", len(b), MaxMessageLen)
	}
	m.Header.put(b, first, len(b))
	return b, nil
}

// Decode parses one IKE message. See the package documentation for the
// checks it makes; a failure is an *Error.
func Decode(b []byte) (*Message, error) {
	if len(b) > MaxMessageLen {
		return nil, syntaxErr(0, PayloadNone, "%d bytes exceeds %d", len(b), MaxMessageLen)
	}
	h, first, err := DecodeHeader(b)
	if err != nil {
		return nil, err
	}
	ps, err := decodeChain(first, b, HeaderLen, true)
	if err != nil {
		return nil, err
	}
	return &Message{Header: h, Payloads: ps}, nil
}

// EncodePayloads returns the wire form of a payload chain that is not a
// whole message (the plaintext inside an SK payload) and the type of its
// first payload, the value of the SK payload's Next Payload field.
func EncodePayloads(ps []Payload) (PayloadType, []byte, error) {
	first, b, err := appendChain(nil, ps)
	return first, b, err
}

// DecodePayloads parses a payload chain that starts with a payload of type
// first and fills b exactly (the decrypted content of an SK payload). An
// SK payload inside is an error.
func DecodePayloads(first PayloadType, b []byte) ([]Payload, error) {
	return decodeChain(first, b, 0, false)
}

// Find returns the first payload of type t in ps, or nil.
func Find(ps []Payload, t PayloadType) Payload {
	for _, p := range ps {
		if p.Type() == t {
			return p
		}
	}
	return nil
}

// Notifies returns the Notify payloads of ps of type n.
func Notifies(ps []Payload, n NotifyType) []*Notify {
	var out []*Notify
	for _, p := range ps {
		if x, ok := p.(*Notify); ok && x.Code == n {
			out = append(out, x)
		}
	}
	return out
}

// SKPrefix returns the IKE header and the SK payload header of a message
// whose only payload is an SK payload with a body of bodyLen bytes whose
// first inner payload is of type first: the octets an SK payload's
// protection appends to (and, for an AEAD, authenticates as AAD).
func SKPrefix(h Header, first PayloadType, bodyLen int) ([]byte, error) {
	n := HeaderLen + genericLen + bodyLen
	if bodyLen <= 0 || n > MaxMessageLen {
		return nil, fmt.Errorf("ike: SK body of %d bytes does not fit a message", bodyLen)
	}
	b := make([]byte, HeaderLen+genericLen, n)
	h.put(b, PayloadSK, n)
	b[HeaderLen] = uint8(first)
	b[HeaderLen+2], b[HeaderLen+3] = uint8((genericLen+bodyLen)>>8), uint8(genericLen+bodyLen)
	return b, nil
}
