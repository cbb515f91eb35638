package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Encap is the outer encapsulation.
type Encap uint8

// Encapsulations.
const (
	// EncapUDP: ESP in UDP on port 4500 (RFC 3948). The default.
	EncapUDP Encap = iota
	// EncapESP: ESP directly over IP (protocol 50) through a raw socket.
	EncapESP
)

// String returns "udp" or "esp".
func (e Encap) String() string {
	if e == EncapESP {
		return "esp"
	}
	return "udp"
}

// DefaultMTU is the TUN MTU when ipsec_tun_mtu is not set: 1500 minus the
// worst ESP-in-UDP overhead over IPv4 with AES-CBC+HMAC-SHA-256 (rounded).
const DefaultMTU = 1400

// DefaultPort is the NAT-T port.
const DefaultPort = 4500

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("dataplane: bad configuration")

// Config configures a Gateway. The SAs and policies are not here: they are
// the engine's, applied from the setkey file.
type Config struct {
	// TUN is the inner interface name (rc.conf ipsec_tun), e.g. "ipsec0".
	TUN string
	// MTU of the TUN (ipsec_tun_mtu); 0 means DefaultMTU.
	MTU int
	// Addrs are addresses put on the TUN (ipsec_tun_addr, space-separated
	// prefixes such as "10.98.0.1/24"); may be empty.
	Addrs []netip.Prefix
	// Routes are routed into the TUN (ipsec_routes). When empty, Start
	// routes the destination prefix of every outbound ipsec policy.
	Routes []netip.Prefix
	// Local is this gateway's outer address (ipsec_local): raw ESP binds
	// to it, and inbound ESP-in-UDP is matched to SAs for it.
	Local netip.Addr
	// Peer is a remote gateway (ipsec_peer), optional: the gateway serves
	// every peer its SAs name and sends ESP to the selected SA's
	// destination, so Peer is informational (status output); keeld checks
	// that some SA has it as an endpoint.
	Peer netip.Addr
	// Encap selects ESP-in-UDP or raw ESP (ipsec_encap=udp|esp).
	Encap Encap
	// Port is the local UDP port for EncapUDP (ipsec_natt_port); 0 means
	// DefaultPort.
	Port uint16
	// NoUDPGSO turns UDP segmentation offload off for ESP-in-UDP sends
	// (ipsec_udp_gso=NO; default YES). GSO batches cross a veth
	// unsegmented, so captures there show one datagram per batch.
	NoUDPGSO bool
}

// ConfigFromRC reads the dataplane settings from rc.conf variables through
// get (which returns "" for unset variables): ipsec_tun (required),
// ipsec_local (required), ipsec_peer, ipsec_encap (udp|esp, default udp),
// ipsec_tun_addr, ipsec_tun_mtu, ipsec_routes, ipsec_natt_port,
// ipsec_udp_gso (YES|NO). Errors
// name the variable and wrap ErrConfig.
func ConfigFromRC(get func(string) string) (Config, error) {
	var c Config
	bad := func(v, why string) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s=%q: %s", ErrConfig, v, get(v), why)
	}
	c.TUN = strings.TrimSpace(get("ipsec_tun"))
	if c.TUN == "" {
		return bad("ipsec_tun", "an interface name is required")
	}
	if !validIfName(c.TUN) {
		return bad("ipsec_tun", "not a valid interface name")
	}
	var err error
	if c.Local, err = netip.ParseAddr(strings.TrimSpace(get("ipsec_local"))); err != nil {
		return bad("ipsec_local", "an IP address is required")
	}
	if v := strings.TrimSpace(get("ipsec_peer")); v != "" {
		if c.Peer, err = netip.ParseAddr(v); err != nil {
			return bad("ipsec_peer", "not an IP address")
		}
		if c.Peer.Is4() != c.Local.Is4() {
			return bad("ipsec_peer", "address family differs from ipsec_local")
		}
	}
	switch strings.ToLower(strings.TrimSpace(get("ipsec_encap"))) {
	case "", "udp", "esp-udp":
		c.Encap = EncapUDP
	case "esp":
		c.Encap = EncapESP
	default:
		return bad("ipsec_encap", "want udp or esp")
	}
	if v := strings.TrimSpace(get("ipsec_tun_mtu")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 576 || n > 65000 {
			return bad("ipsec_tun_mtu", "want a number from 576 to 65000")
		}
		c.MTU = n
	}
	if v := strings.TrimSpace(get("ipsec_natt_port")); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return bad("ipsec_natt_port", "want a port from 1 to 65535")
		}
		c.Port = uint16(n)
	}
	switch strings.ToUpper(strings.TrimSpace(get("ipsec_udp_gso"))) {
	case "", "YES", "TRUE", "ON", "1":
	case "NO", "FALSE", "OFF", "0":
		c.NoUDPGSO = true
	default:
		return bad("ipsec_udp_gso", "want YES or NO")
	}
	for _, f := range strings.Fields(get("ipsec_tun_addr")) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return bad("ipsec_tun_addr", fmt.Sprintf("%q is not a prefix like 10.98.0.1/24", f))
		}
		c.Addrs = append(c.Addrs, p)
	}
	for _, f := range strings.Fields(get("ipsec_routes")) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return bad("ipsec_routes", fmt.Sprintf("%q is not a prefix", f))
		}
		c.Routes = append(c.Routes, p.Masked())
	}
	return c, nil
}

func (c *Config) defaults() {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
}

// validIfName mirrors Linux's dev_valid_name: 1 to 15 bytes (IFNAMSIZ-1),
// not "." or "..", and no '/', ':', NUL or white space.
func validIfName(name string) bool {
	if name == "" || len(name) > 15 || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '/', c == ':', c == 0, c == ' ', c >= '\t' && c <= '\r':
			return false
		}
	}
	return true
}
