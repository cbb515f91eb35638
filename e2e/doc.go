// Package e2e holds Keel's root end-to-end tests: two network namespaces
// joined by a veth pair (or, for TestManyPeers, a hub namespace with a
// bridge and three peer namespaces on veths to it), a keeld in each (on a
// temporary root: the embedded appliance's rc.d, an rc.conf with ipsec_tun,
// ipsec_local, ipsec_peer and ipsec_encap, and an ipsec.conf with mirrored
// SAs), real traffic through
// the tunnel, checked on the wire with tcpdump and tshark, and keelctl
// driving the keelds (kldload for the hot rebind, crypto --json for the
// virtio device's PID, ipsec --json for the counters).
//
// Run as root:
//
//	go test ./e2e/ -v -count=1
//
// Without root they skip; without ip, tcpdump, tshark or ping they skip, and
// under CI=true they fail (internal/testenv: CI must not skip silently). They
// need the Debian packages iproute2, iputils-ping, tcpdump and tshark, and
// preferably ethtool: a UDP GSO batch crosses a veth unsegmented, so the
// tests turn tx-udp-segmentation off on the veths (the kernel then segments
// the gateways' GSO sends in software and the capture shows every ESP
// packet); without ethtool, or with KEEL_E2E_UDP_GSO=NO, the gateways run
// with ipsec_udp_gso=NO instead. The tests build cmd/keeld and cmd/keelctl
// with the go tool on PATH, remove their namespaces and processes even when
// they fail (a failed test logs both keelds' logs), and bound every step.
package e2e
