//go:build !linux

// Package device is the emulated virtio-crypto device; it needs Linux
// (memfd, eventfd, SCM_RIGHTS).
package device
