// Command keel-virtio-device is the emulated virtio-crypto device process.
// The virtio crypto provider spawns it with its end of a unix socket as
// file descriptor 3 and sends the shared memory region and the queues'
// eventfds over that socket; the device serves until the socket closes.
// It is not meant to be run by hand.
package main

import "github.com/keelinit/keel/crypto/virtio/device"

func main() { device.Main() }
