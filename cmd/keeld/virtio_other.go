//go:build !linux

package main

// runVirtioDevice: the virtio provider is Linux-only.
func runVirtioDevice() {}
