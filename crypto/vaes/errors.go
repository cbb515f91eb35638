package vaes

import (
	"errors"
	"fmt"

	"github.com/keelinit/keel/crypto"
)

// errNoCPU is New's error on a CPU without the instructions.
var errNoCPU = fmt.Errorf("vaes: %w: CPU lacks AVX2, AES-NI, PCLMULQDQ, VAES or VPCLMULQDQ", crypto.ErrUnsupported)

// errOpen is Open's only error: it says nothing about why.
var errOpen = errors.New("vaes: message authentication failed")
