// Package e2e holds Keel's root end-to-end tests: two network namespaces
// joined by a veth pair, a Keel IPsec gateway (cmd/keel-gw, the dataplane
// keeld hosts) in each with mirrored SAs, and real traffic through the
// tunnel, checked on the wire with tcpdump and tshark.
//
// Run as root:
//
//	go test ./e2e/ -v -count=1
//
// Without root, or without ip, tcpdump, tshark or ping, the tests skip. They
// need the Debian packages iproute2, iputils-ping, tcpdump and tshark, and
// preferably ethtool: a UDP GSO batch crosses a veth unsegmented, so the
// tests turn tx-udp-segmentation off on the veths (the kernel then segments
// the gateways' GSO sends in software and the capture shows every ESP
// packet); without ethtool, or with KEEL_E2E_UDP_GSO=NO, the gateways run
// with ipsec_udp_gso=NO instead. The tests build cmd/keel-gw with the go tool
// on PATH, remove their namespaces and processes even when they fail, and
// bound every step (about 25 s in all here).
package e2e
