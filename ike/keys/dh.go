package keys

import (
	"crypto/ecdh"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"math/big"

	"github.com/keelinit/keel/ike/wire"
)

// DH is one side's ephemeral Diffie-Hellman key of a negotiated group.
type DH interface {
	// Group is the transform ID of the group.
	Group() uint16
	// Public is the value sent in the KE payload.
	Public() []byte
	// Shared returns g^ir from the peer's KE data, in the form §2.14 and
	// the group's RFC fix; an invalid peer value is an error.
	Shared(peer []byte) ([]byte, error)
	// Zero wipes the private value; the key is unusable afterwards.
	Zero()
}

// DHSupported reports whether NewDH knows group.
func DHSupported(group uint16) bool {
	switch group {
	case wire.DH_MODP2048, wire.DH_ECP256, wire.DH_X25519:
		return true
	}
	return false
}

// NewDH generates a key of group from rand.
func NewDH(group uint16, rand io.Reader) (DH, error) {
	switch group {
	case wire.DH_ECP256:
		return newECDH(group, ecdh.P256(), rand)
	case wire.DH_X25519:
		return newECDH(group, ecdh.X25519(), rand)
	case wire.DH_MODP2048:
		return newMODP(rand)
	}
	return nil, fmt.Errorf("ike: unsupported DH group %d", group)
}

// ecdhKey is group 19 or 31 on crypto/ecdh, which is constant-time.
type ecdhKey struct {
	group uint16
	curve ecdh.Curve
	priv  *ecdh.PrivateKey
}

func newECDH(group uint16, c ecdh.Curve, rand io.Reader) (*ecdhKey, error) {
	k, err := c.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: %w", group, err)
	}
	return &ecdhKey{group: group, curve: c, priv: k}, nil
}

func (k *ecdhKey) Group() uint16 { return k.group }

// Public returns, for ECP-256, x | y without the 0x04 prefix (RFC 5903 §7).
func (k *ecdhKey) Public() []byte {
	b := k.priv.PublicKey().Bytes()
	if k.group == wire.DH_ECP256 {
		return b[1:]
	}
	return b
}

// Shared returns, for ECP-256, the x coordinate (RFC 5903 §9); for
// Curve25519 the X25519 output, refusing an all-zero one (RFC 8031 §2.3;
// crypto/ecdh checks it).
func (k *ecdhKey) Shared(peer []byte) ([]byte, error) {
	if k.priv == nil {
		return nil, errors.New("ike: DH key used after Zero")
	}
	if k.group == wire.DH_ECP256 {
		if len(peer) != 64 {
			return nil, fmt.Errorf("ike: DH group 19 public value of %d bytes, want 64", len(peer))
		}
		peer = append([]byte{4}, peer...)
	}
	pub, err := k.curve.NewPublicKey(peer)
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: invalid peer public value", k.group)
	}
	s, err := k.priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("ike: DH group %d: invalid peer public value", k.group)
	}
	return s, nil
}

// Zero drops the private key. crypto/ecdh keeps its scalar unexported, so
// dropping the last reference is all that can be done from outside.
func (k *ecdhKey) Zero() { k.priv = nil }

// String prints the group only.
func (k *ecdhKey) String() string { return fmt.Sprintf("DH(group %d)", k.group) }

// modp2048 is the group 14 prime of RFC 3526 §3; the generator is 2.
var modp2048, _ = new(big.Int).SetString(
	"FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD1"+
		"29024E088A67CC74020BBEA63B139B22514A08798E3404DD"+
		"EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245"+
		"E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"+
		"EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3D"+
		"C2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"+
		"83655D23DCA3AD961C62F356208552BB9ED529077096966D"+
		"670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"+
		"E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9"+
		"DE2BCBF6955817183995497CEA956AE515D2261898FA0510"+
		"15728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)

// modpLen is the modulus length in octets: public values and g^ir are
// padded to it (§2.14, RFC 7296 §3.4).
const modpLen = 256

// modpExpBits is the private exponent length: twice the ~112-bit strength
// of MODP-2048 with margin (RFC 3526 §8 asks for at least twice it).
const modpExpBits = 256

// modpKey is group 14 on math/big. math/big's modular exponentiation is
// not constant-time: its running time depends on the private exponent.
// The key is ephemeral, one per exchange, which limits but does not remove
// the timing exposure; groups 19 and 31 (crypto/ecdh, constant-time) are
// the ones to prefer, and come first in the default proposals.
type modpKey struct {
	x   *big.Int
	pub []byte
}

func newMODP(rand io.Reader) (*modpKey, error) {
	b := make([]byte, modpExpBits/8)
	if _, err := io.ReadFull(rand, b); err != nil {
		return nil, fmt.Errorf("ike: DH group 14: %w", err)
	}
	b[0] |= 0x80 // the full exponent length
	x := new(big.Int).SetBytes(b)
	wipe(b)
	y := new(big.Int).Exp(big.NewInt(2), x, modp2048)
	return &modpKey{x: x, pub: y.FillBytes(make([]byte, modpLen))}, nil
}

func (k *modpKey) Group() uint16  { return wire.DH_MODP2048 }
func (k *modpKey) Public() []byte { return append([]byte(nil), k.pub...) }

// Shared checks 1 < y < p-1 (a peer value of 0, 1 or p-1 would confine
// the shared secret to a trivial subgroup) and returns y^x mod p padded.
func (k *modpKey) Shared(peer []byte) ([]byte, error) {
	if k.x == nil {
		return nil, errors.New("ike: DH key used after Zero")
	}
	if len(peer) != modpLen {
		return nil, fmt.Errorf("ike: DH group 14 public value of %d bytes, want %d", len(peer), modpLen)
	}
	y := new(big.Int).SetBytes(peer)
	pm1 := new(big.Int).Sub(modp2048, big.NewInt(1))
	if y.Cmp(big.NewInt(1)) <= 0 || y.Cmp(pm1) >= 0 {
		return nil, errors.New("ike: DH group 14: invalid peer public value")
	}
	z := new(big.Int).Exp(y, k.x, modp2048)
	out := z.FillBytes(make([]byte, modpLen))
	z.SetInt64(0)
	if subtle.ConstantTimeCompare(out, make([]byte, modpLen)) == 1 {
		return nil, errors.New("ike: DH group 14: zero shared secret")
	}
	return out, nil
}

// Zero overwrites the exponent's words.
func (k *modpKey) Zero() {
	if k.x != nil {
		w := k.x.Bits()
		for i := range w {
			w[i] = 0
		}
		k.x = nil
	}
}

// String prints the group only.
func (k *modpKey) String() string { return "DH(group 14)" }
