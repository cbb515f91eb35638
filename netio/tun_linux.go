package netio

import (
	"fmt"

	"golang.zx2c4.com/wireguard/tun"
)

// nativeTUN wraps wireguard-go's Linux TUN device.
type nativeTUN struct {
	tun.Device
}

// OpenTUN creates (or attaches to) the TUN interface name with the given
// MTU, with IFF_VNET_HDR offloads (TSO/GSO on read, GRO on write) when the
// kernel supports them. The interface is left down and unaddressed: use
// ConfigureInterface.
func OpenTUN(name string, mtu int) (TUN, error) {
	d, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("netio: tun %s: %w", name, err)
	}
	// The device reports link events on a small buffered channel; drain it
	// so its listener goroutines never block. It is closed by Close.
	go func() {
		for range d.Events() {
		}
	}()
	return &nativeTUN{Device: d}, nil
}
