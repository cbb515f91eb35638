// Package providers registers, with the modules package, every crypto
// provider module keeld ships: aesni (where the CPU has AES-NI),
// cryptosoft, glxsb, vaes (where the CPU has VAES and VPCLMULQDQ) and, on
// Linux, virtio. keeld imports it to load them
// by kld_list and cryptodev_modules; keelctl check imports it so that it
// validates module names against the same registry.
package providers

import (
	_ "github.com/keelinit/keel/crypto/aesni"
	_ "github.com/keelinit/keel/crypto/cryptosoft"
	_ "github.com/keelinit/keel/crypto/glxsb"
	_ "github.com/keelinit/keel/crypto/vaes"
	_ "github.com/keelinit/keel/crypto/virtio"
)
