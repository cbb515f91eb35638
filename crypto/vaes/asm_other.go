//go:build !amd64

package vaes

import (
	"crypto/cipher"
	"fmt"

	"github.com/keelinit/keel/crypto"
)

// hasAsm: the assembly exists only for amd64.
const hasAsm = false

func cpuid7ecx() uint32 { return 0 }

func newGCM([]byte) (cipher.AEAD, error) {
	return nil, fmt.Errorf("vaes: %w: no VAES code for this architecture", crypto.ErrUnsupported)
}
