package exchange

import (
	"crypto/hmac"

	"github.com/keelinit/keel/ike/keys"
)

// keyPad is the constant of the shared-key AUTH computation (§2.15).
var keyPad = []byte("Key Pad for IKEv2")

// pskAuth returns the AUTH data of §2.15 for a shared key:
// prf(prf(Shared Secret, "Key Pad for IKEv2"), <SignedOctets>) with
// SignedOctets = RealMessage | Nonce of the peer | prf(SK_p, IDBody).
func pskAuth(p keys.PRF, psk, realMessage, peerNonce, skp, idBody []byte) []byte {
	k := p.Sum(psk, keyPad)
	maced := p.Sum(skp, idBody)
	out := p.Sum(k, realMessage, peerNonce, maced)
	clear(k)
	return out
}

// authEqual compares AUTH data in constant time.
func authEqual(a, b []byte) bool { return hmac.Equal(a, b) }
