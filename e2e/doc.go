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
// need the Debian packages iproute2, iputils-ping, tcpdump and tshark, build
// cmd/keel-gw with the go tool on PATH, remove their namespaces and processes
// even when they fail, and bound every step (about a minute in all).
package e2e
