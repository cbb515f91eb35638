package keys

import (
	"fmt"

	"github.com/keelinit/keel/ike/wire"
)

// IKEKeys are the seven keys of an IKE SA (§2.14).
type IKEKeys struct {
	SKd, SKai, SKar, SKei, SKer, SKpi, SKpr []byte
}

// DeriveIKE computes SKEYSEED = prf(Ni | Nr, g^ir) and splits
// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr) into the SK_* keys of suite
// (§2.14). SKEYSEED is wiped before it returns.
func DeriveIKE(s Suite, ni, nr, gir []byte, spii, spir wire.SPI) (*IKEKeys, error) {
	skeyseed := s.PRF.Sum(concat(ni, nr), gir)
	defer wipe(skeyseed)
	return expandIKE(s, skeyseed, ni, nr, spii, spir)
}

// DeriveIKERekey computes the keys of a new IKE SA from the old SA's SK_d
// (§2.18): SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr), with the old
// SA's PRF prfOld.
func DeriveIKERekey(prfOld PRF, skdOld []byte, s Suite, gir, ni, nr []byte, spii, spir wire.SPI) (*IKEKeys, error) {
	skeyseed := prfOld.Sum(skdOld, gir, ni, nr)
	defer wipe(skeyseed)
	return expandIKE(s, skeyseed, ni, nr, spii, spir)
}

func expandIKE(s Suite, skeyseed, ni, nr []byte, spii, spir wire.SPI) (*IKEKeys, error) {
	p, a, e := s.PRF.Size(), s.Integ.KeyLen, s.Encr.KeyLen
	seed := concat(ni, nr, spii[:], spir[:])
	km, err := s.PRF.Plus(skeyseed, seed, p+2*a+2*e+2*p)
	if err != nil {
		return nil, err
	}
	k := &IKEKeys{}
	for _, f := range []struct {
		dst *[]byte
		n   int
	}{{&k.SKd, p}, {&k.SKai, a}, {&k.SKar, a}, {&k.SKei, e}, {&k.SKer, e}, {&k.SKpi, p}, {&k.SKpr, p}} {
		*f.dst = km[:f.n:f.n]
		km = km[f.n:]
	}
	return k, nil
}

// Zero overwrites every key.
func (k *IKEKeys) Zero() {
	if k == nil {
		return
	}
	for _, b := range [][]byte{k.SKd, k.SKai, k.SKar, k.SKei, k.SKer, k.SKpi, k.SKpr} {
		wipe(b)
	}
}

// String prints the key lengths only.
func (k *IKEKeys) String() string {
	return fmt.Sprintf("IKEKeys{SK_d:%d SK_a:%d SK_e:%d SK_p:%d bytes, redacted}", len(k.SKd), len(k.SKai), len(k.SKei), len(k.SKpi))
}

// GoString is String, so %#v does not print the keys either.
func (k *IKEKeys) GoString() string { return k.String() }

// ChildKeys is the KEYMAT of a CHILD_SA split per direction (§2.17): the
// initiator-to-responder SA's keys first, then the other direction's.
// EncrI and EncrR include the AEAD salt at their end.
type ChildKeys struct {
	EncrI, IntegI, EncrR, IntegR []byte
}

// DeriveChild computes KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr) for a
// CHILD_SA of suite (gir nil without PFS) and splits it (§2.17).
func DeriveChild(p PRF, skd []byte, s Suite, gir, ni, nr []byte) (*ChildKeys, error) {
	e, a := s.Encr.KeyLen, s.Integ.KeyLen
	km, err := p.Plus(skd, concat(gir, ni, nr), 2*(e+a))
	if err != nil {
		return nil, err
	}
	return &ChildKeys{EncrI: km[:e:e], IntegI: km[e : e+a : e+a], EncrR: km[e+a : 2*e+a : 2*e+a], IntegR: km[2*e+a:]}, nil
}

// Zero overwrites every key.
func (k *ChildKeys) Zero() {
	if k == nil {
		return
	}
	for _, b := range [][]byte{k.EncrI, k.IntegI, k.EncrR, k.IntegR} {
		wipe(b)
	}
}

// String prints the key lengths only.
func (k *ChildKeys) String() string {
	return fmt.Sprintf("ChildKeys{encr:%d integ:%d bytes per direction, redacted}", len(k.EncrI), len(k.IntegI))
}

// GoString is String.
func (k *ChildKeys) GoString() string { return k.String() }

func concat(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
