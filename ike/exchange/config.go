package exchange

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/keelinit/keel/ike/keys"
	"github.com/keelinit/keel/ike/wire"
)

// Identity is an IKE identity (the ID payload's type and data).
type Identity struct {
	Type wire.IDType
	Data []byte
}

// String returns the identity as strongSwan prints it.
func (id Identity) String() string {
	switch id.Type {
	case wire.ID_IPV4_ADDR, wire.ID_IPV6_ADDR:
		if a, ok := netip.AddrFromSlice(id.Data); ok {
			return a.String()
		}
	case wire.ID_FQDN, wire.ID_RFC822_ADDR:
		return string(id.Data)
	}
	return fmt.Sprintf("ID(type %d, %d bytes)", id.Type, len(id.Data))
}

// ParseIdentity reads an identity as swanctl.conf writes one: an IP
// address, an RFC 822 address (user@host), or an FQDN.
func ParseIdentity(s string) (Identity, error) {
	if s == "" {
		return Identity{}, errors.New("ike: empty identity")
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() {
			return Identity{wire.ID_IPV4_ADDR, a.AsSlice()}, nil
		}
		return Identity{wire.ID_IPV6_ADDR, a.AsSlice()}, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '@' && i > 0 {
			return Identity{wire.ID_RFC822_ADDR, []byte(s)}, nil
		}
	}
	if s[0] == '@' {
		s = s[1:]
	}
	return Identity{wire.ID_FQDN, []byte(s)}, nil
}

// Config is what the initiator of one connection needs.
type Config struct {
	// Local and Remote are the IKE endpoints (port 500 normally).
	Local, Remote netip.AddrPort
	LocalID       Identity
	// RemoteID, if its Type is set, is checked against the responder's IDr
	// and sent as IDr.
	RemoteID Identity
	// PSK is the pre-shared key; the Initiator copies it and Zero wipes it.
	PSK []byte
	// IKE and ESP are the proposals offered, in preference order; each is
	// a set of transforms (the Proposal's Num, Protocol and SPI are set by
	// the Initiator).
	IKE, ESP []wire.Proposal
	// TSi and TSr are the traffic selectors proposed (§2.9).
	TSi, TSr []wire.Selector
	// Transport requests transport mode (USE_TRANSPORT_MODE) instead of tunnel.
	Transport bool
	// ForceEncap sends a NAT_DETECTION_SOURCE_IP that cannot match, so both
	// sides encapsulate ESP in UDP even without a NAT (swanctl encap=yes).
	ForceEncap bool
	// Rand is the randomness source (nil: crypto/rand).
	Rand io.Reader
}

func (c *Config) rand() io.Reader {
	if c.Rand == nil {
		return rand.Reader
	}
	return c.Rand
}

// DefaultIKE is the default IKE proposal: AES-GCM-16-256 with
// PRF-HMAC-SHA2-256 over Curve25519, ECP-256 or MODP-2048 in that order.
func DefaultIKE() []wire.Proposal {
	return []wire.Proposal{{Transforms: []wire.Transform{
		wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, 256),
		wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, 128),
		{Type: wire.TransformPRF, ID: wire.PRF_HMAC_SHA2_256},
		{Type: wire.TransformDH, ID: wire.DH_X25519},
		{Type: wire.TransformDH, ID: wire.DH_ECP256},
		{Type: wire.TransformDH, ID: wire.DH_MODP2048},
	}}}
}

// DefaultESP is the default ESP proposal: AES-GCM-16-256 or -128, no ESN.
func DefaultESP() []wire.Proposal {
	return []wire.Proposal{{Transforms: []wire.Transform{
		wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, 256),
		wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, 128),
		{Type: wire.TransformESN, ID: wire.ESN_NO},
	}}}
}

// firstDH returns the first DH group of the proposals that keys supports.
func firstDH(ps []wire.Proposal) (uint16, error) {
	for _, p := range ps {
		for _, t := range p.Transforms {
			if t.Type == wire.TransformDH && keys.DHSupported(t.ID) {
				return t.ID, nil
			}
		}
	}
	return 0, errors.New("ike: no supported DH group in the IKE proposals")
}

// offered reports whether the proposal chosen (one transform per type) is
// a choice from the proposals offered: same protocol and each chosen
// transform (with its attributes) among those of one offered proposal.
func offered(chosen *wire.Proposal, offers []wire.Proposal) bool {
	for _, o := range offers {
		if o.Protocol != chosen.Protocol || (chosen.Num != 0 && o.Num != chosen.Num) {
			continue
		}
		ok := true
		for _, c := range chosen.Transforms {
			found := false
			for _, t := range o.Transforms {
				if sameTransform(t, c) {
					found = true
					break
				}
			}
			if !found {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func sameTransform(a, b wire.Transform) bool {
	if a.Type != b.Type || a.ID != b.ID || len(a.Attributes) != len(b.Attributes) {
		return false
	}
	ka, _ := a.KeyLength()
	kb, _ := b.KeyLength()
	return ka == kb
}
