// Package aesni is Keel's CPU-accelerated crypto provider: the Go standard
// library's AES (AES-NI/PCLMULQDQ on amd64, the ARMv8 crypto extensions
// on arm64), crypto/hmac with crypto/sha*, and
// golang.org/x/crypto/chacha20poly1305, run through cpuprov.
//
// Like FreeBSD's aesni(4) probe, the package registers its module only
// when the CPU has the instructions (see Supported); loading the module
// registers the provider with the framework found in the load context.
package aesni

import (
	"crypto/aes"
	"crypto/cipher"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/sys/cpu"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

// Name is the provider and module name.
const Name = "aesni"

// Priority is aesni's static priority hint (ties only).
const Priority = 100

// Supported reports whether the CPU has hardware AES and carry-less
// multiplication: AES-NI and PCLMULQDQ on amd64, AES and PMULL on arm64.
func Supported() bool {
	return (cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ) || (cpu.ARM64.HasAES && cpu.ARM64.HasPMULL)
}

// New returns a new aesni provider. It does not check Supported (on a CPU
// without the instructions the stdlib falls back to its generic code, which
// still passes the self-tests but is not constant-time). Safe for
// concurrent use.
func New() crypto.Provider {
	return cpuprov.New(crypto.ProviderInfo{
		Name:     Name,
		Kind:     crypto.KindAccelerated,
		Priority: Priority,
		Params:   map[string]string{"isa": isa()},
	}, cpuprov.Primitives{
		NewAES: aes.NewCipher,
		NewGCM: func(key []byte) (cipher.AEAD, error) {
			b, err := aes.NewCipher(key)
			if err != nil {
				return nil, err
			}
			return cipher.NewGCM(b)
		},
		NewChaCha20Poly1305: chacha20poly1305.New,
	})
}

func isa() string {
	switch {
	case cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ:
		return "amd64 aes-ni+pclmulqdq"
	case cpu.ARM64.HasAES && cpu.ARM64.HasPMULL:
		return "arm64 aes+pmull"
	}
	return "none"
}
