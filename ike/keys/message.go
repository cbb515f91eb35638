package keys

import (
	"errors"
	"fmt"

	"github.com/keelinit/keel/ike/wire"
)

// SealMessage encodes payloads as the protected content of a message with
// header h, whose only payload is then the SK payload (§3.14).
func (p *Protector) SealMessage(h wire.Header, payloads []wire.Payload) ([]byte, error) {
	first, pt, err := wire.EncodePayloads(payloads)
	if err != nil {
		return nil, err
	}
	defer wipe(pt)
	prefix, err := wire.SKPrefix(h, first, p.BodyLen(len(pt)))
	if err != nil {
		return nil, err
	}
	out, err := p.Seal(prefix, pt)
	if err != nil {
		return nil, err
	}
	if len(out) != len(prefix)+p.BodyLen(len(pt)) {
		return nil, errors.New("ike: SK body length differs from BodyLen")
	}
	return out, nil
}

// OpenMessage decodes raw, a protected message whose only payload is an SK
// payload, checks and decrypts it, and returns the header with the inner
// payloads. ErrIntegrity means drop silently.
func (p *Protector) OpenMessage(raw []byte) (*wire.Message, error) {
	m, err := wire.Decode(raw)
	if err != nil {
		return nil, err
	}
	if len(m.Payloads) != 1 {
		return nil, fmt.Errorf("ike: protected %s message with %d payloads, want only SK", m.Exchange, len(m.Payloads))
	}
	sk, ok := m.Payloads[0].(*wire.Encrypted)
	if !ok {
		return nil, fmt.Errorf("ike: %s message without an SK payload", m.Exchange)
	}
	pt, err := p.Open(raw, sk.Body)
	if err != nil {
		return nil, err
	}
	ps, err := wire.DecodePayloads(sk.Next, pt)
	wipe(pt)
	if err != nil {
		return nil, err
	}
	m.Payloads = ps
	return m, nil
}
