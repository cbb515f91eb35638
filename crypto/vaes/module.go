package vaes

import (
	"context"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/modules"
)

// ModuleVersion is the vaes module's MODULE_VERSION.
const ModuleVersion = 1

func init() {
	if !Supported() {
		return
	}
	modules.Register(crypto.ProviderModule(Name, ModuleVersion,
		"AES-GCM with VAES/VPCLMULQDQ on 256-bit registers (amd64 assembly)",
		func(context.Context) (crypto.Provider, error) { return New() }))
}
