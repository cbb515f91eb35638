package main

import (
	// The virtio crypto provider (an emulated virtio-crypto device in a
	// separate process), loaded by kld_list or keelctl kldload virtio.
	"github.com/keelinit/keel/crypto/virtio"
)

// runVirtioDevice turns this process into the virtio device when keeld
// was re-executed as one (the provider's fallback when no
// keel-virtio-device binary sits next to keeld); otherwise it returns.
func runVirtioDevice() { virtio.RunDeviceIfRequested() }
