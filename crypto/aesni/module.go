package aesni

import (
	"context"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/modules"
)

// ModuleVersion is the aesni module's MODULE_VERSION.
const ModuleVersion = 1

func init() {
	if !Supported() {
		return
	}
	modules.Register(crypto.ProviderModule(Name, ModuleVersion,
		"AES-NI/PCLMULQDQ accelerated crypto provider (Go stdlib)",
		func(context.Context) (crypto.Provider, error) { return New(), nil }))
}
