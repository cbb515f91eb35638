package keys

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"

	"github.com/keelinit/keel/ike/wire"
)

// PRF is a negotiated pseudorandom function (transform type 2).
type PRF struct {
	ID   uint16
	newH func() hash.Hash
	size int
}

// PRFByID returns the PRF with transform ID id, or an error naming it.
func PRFByID(id uint16) (PRF, error) {
	switch id {
	case wire.PRF_HMAC_SHA2_256:
		return PRF{id, sha256.New, 32}, nil
	case wire.PRF_HMAC_SHA2_384:
		return PRF{id, sha512.New384, 48}, nil
	case wire.PRF_HMAC_SHA2_512:
		return PRF{id, sha512.New, 64}, nil
	}
	return PRF{}, fmt.Errorf("ike: unsupported PRF transform %d", id)
}

// Size is the PRF's output length, also its preferred key length (RFC 4868
// §2.1.2): the length of SK_d, SK_pi and SK_pr.
func (p PRF) Size() int { return p.size }

// Sum returns prf(key, data...) (HMAC of the concatenated data).
func (p PRF) Sum(key []byte, data ...[]byte) []byte {
	m := hmac.New(p.newH, key)
	for _, d := range data {
		m.Write(d)
	}
	return m.Sum(nil)
}

// errPRFPlusTooLong is returned when prf+ is asked for more than 255 blocks.
var errPRFPlusTooLong = errors.New("ike: prf+ output longer than 255 blocks")

// Plus returns the first n octets of prf+(key, seed) (§2.13):
// T1 = prf(K, S | 0x01), Ti = prf(K, Ti-1 | S | i), for i up to 255.
func (p PRF) Plus(key, seed []byte, n int) ([]byte, error) {
	if n > 255*p.size {
		return nil, errPRFPlusTooLong
	}
	out := make([]byte, 0, n+p.size)
	m := hmac.New(p.newH, key)
	var t []byte
	for i := 1; len(out) < n; i++ {
		m.Reset()
		m.Write(t)
		m.Write(seed)
		m.Write([]byte{byte(i)})
		t = m.Sum(t[:0])
		out = append(out, t...)
	}
	wipe(t)
	wipe(out[n:cap(out)])
	return out[:n:n], nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
