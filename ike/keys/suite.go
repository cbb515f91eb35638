package keys

import (
	"fmt"

	"github.com/keelinit/keel/ike/wire"
)

// Encr describes a negotiated encryption transform: its ID, key length and
// the properties the derivation and the SK payload need.
type Encr struct {
	ID      uint16
	KeyBits uint16 // the Key Length attribute; 0 for ChaCha20-Poly1305
	AEAD    bool
	// KeyLen is the length of the key the derivation takes for it: the
	// cipher key plus, for an AEAD, its salt (RFC 5282 §7.1, RFC 7634 §2).
	KeyLen int
}

// EncrByID returns the encryption transform id with keyBits, or an error.
func EncrByID(id, keyBits uint16) (Encr, error) {
	switch id {
	case wire.ENCR_AES_GCM_16, wire.ENCR_AES_CBC:
		if keyBits != 128 && keyBits != 192 && keyBits != 256 {
			return Encr{}, fmt.Errorf("ike: encryption transform %d with a %d-bit key, want 128, 192 or 256", id, keyBits)
		}
		e := Encr{ID: id, KeyBits: keyBits, KeyLen: int(keyBits) / 8}
		if id == wire.ENCR_AES_GCM_16 {
			e.AEAD, e.KeyLen = true, e.KeyLen+4
		}
		return e, nil
	case wire.ENCR_CHACHA20_POLY1305:
		if keyBits != 0 {
			return Encr{}, fmt.Errorf("ike: ChaCha20-Poly1305 with a Key Length attribute (%d)", keyBits)
		}
		return Encr{ID: id, AEAD: true, KeyLen: 32 + 4}, nil
	}
	return Encr{}, fmt.Errorf("ike: unsupported encryption transform %d", id)
}

// Integ describes a negotiated integrity transform.
type Integ struct {
	ID     uint16
	KeyLen int // the HMAC key length (RFC 4868: the hash's output length)
	ICVLen int // the truncated output length
}

// IntegByID returns the integrity transform id, or an error. AUTH_NONE is
// an Integ of zero lengths, the pairing of an AEAD.
func IntegByID(id uint16) (Integ, error) {
	switch id {
	case wire.AUTH_NONE:
		return Integ{}, nil
	case wire.AUTH_HMAC_SHA2_256_128:
		return Integ{id, 32, 16}, nil
	case wire.AUTH_HMAC_SHA2_384_192:
		return Integ{id, 48, 24}, nil
	case wire.AUTH_HMAC_SHA2_512_256:
		return Integ{id, 64, 32}, nil
	}
	return Integ{}, fmt.Errorf("ike: unsupported integrity transform %d", id)
}

// Suite is the set of transforms of one negotiated SA.
type Suite struct {
	Encr  Encr
	Integ Integ
	PRF   PRF    // IKE SAs only
	DH    uint16 // DH_NONE for a CHILD_SA without PFS
	ESN   bool   // CHILD_SAs only
}

// Check reports an error when an AEAD is paired with an integrity
// transform or a plain cipher without one (RFC 5282 §8).
func (s Suite) Check() error {
	if s.Encr.AEAD && s.Integ.ID != wire.AUTH_NONE {
		return fmt.Errorf("ike: AEAD transform %d combined with integrity transform %d", s.Encr.ID, s.Integ.ID)
	}
	if !s.Encr.AEAD && s.Integ.ID == wire.AUTH_NONE {
		return fmt.Errorf("ike: encryption transform %d needs an integrity transform", s.Encr.ID)
	}
	return nil
}

// FromProposal reads the transforms of a proposal holding one transform of
// each type it uses (a responder's choice), into a Suite.
func FromProposal(p *wire.Proposal) (Suite, error) {
	var s Suite
	seen := map[wire.TransformType]bool{}
	for i := range p.Transforms {
		t := &p.Transforms[i]
		if seen[t.Type] {
			return s, fmt.Errorf("ike: proposal %d has two %s transforms", p.Num, t.Type)
		}
		seen[t.Type] = true
		var err error
		switch t.Type {
		case wire.TransformENCR:
			kl, _ := t.KeyLength()
			s.Encr, err = EncrByID(t.ID, kl)
		case wire.TransformINTEG:
			s.Integ, err = IntegByID(t.ID)
		case wire.TransformPRF:
			s.PRF, err = PRFByID(t.ID)
		case wire.TransformDH:
			if t.ID != wire.DH_NONE && !DHSupported(t.ID) {
				err = fmt.Errorf("ike: unsupported DH group %d", t.ID)
			}
			s.DH = t.ID
		case wire.TransformESN:
			switch t.ID {
			case wire.ESN_NO:
			case wire.ESN_YES:
				s.ESN = true
			default:
				err = fmt.Errorf("ike: ESN transform %d", t.ID)
			}
		default:
			err = fmt.Errorf("ike: transform type %s", t.Type)
		}
		if err != nil {
			return s, fmt.Errorf("proposal %d: %w", p.Num, err)
		}
	}
	if !seen[wire.TransformENCR] {
		return s, fmt.Errorf("ike: proposal %d has no encryption transform", p.Num)
	}
	if p.Protocol == wire.ProtoIKE && (!seen[wire.TransformPRF] || !seen[wire.TransformDH]) {
		return s, fmt.Errorf("ike: IKE proposal %d lacks a PRF or DH transform", p.Num)
	}
	return s, s.Check()
}
