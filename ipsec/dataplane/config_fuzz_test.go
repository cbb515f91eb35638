package dataplane

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// rcVars are the rc.conf variables ConfigFromRC reads, in the order of
// FuzzConfigFromRC's arguments.
var rcVars = []string{
	"ipsec_tun", "ipsec_local", "ipsec_peer", "ipsec_encap", "ipsec_tun_addr",
	"ipsec_tun_mtu", "ipsec_routes", "ipsec_natt_port", "ipsec_udp_gso",
}

// rcValid is a complete valid configuration: the fuzz target puts a
// rejected variable's value into it to check that the error is the
// value's fault.
var rcValid = map[string]string{
	"ipsec_tun": "keel0", "ipsec_local": "10.99.0.1", "ipsec_peer": "10.99.0.2",
	"ipsec_encap": "udp", "ipsec_tun_addr": "10.98.0.1/24", "ipsec_tun_mtu": "1400",
	"ipsec_routes": "10.2.0.0/16", "ipsec_natt_port": "4500", "ipsec_udp_gso": "YES",
}

// configFromMap runs ConfigFromRC on vars and fails t if it asks for a
// variable it does not document.
func configFromMap(t *testing.T, vars map[string]string) (Config, error) {
	return ConfigFromRC(func(k string) string {
		if _, ok := rcValid[k]; !ok {
			t.Fatalf("ConfigFromRC read the undocumented variable %q", k)
		}
		return vars[k]
	})
}

// namedVar returns the variable an error names ("ipsec_x=..." after the
// ErrConfig prefix), or "".
func namedVar(err error) string {
	rest, ok := strings.CutPrefix(err.Error(), ErrConfig.Error()+": ")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, "=")
	if !ok {
		return ""
	}
	return name
}

// FuzzConfigFromRC feeds arbitrary rc.conf values (operator input, and
// whatever an rc.conf include or a keelctl set writes) to ConfigFromRC.
// Nothing may panic. A rejection wraps ErrConfig and names one of the
// variables with its value, and that value alone is enough to make a
// valid configuration fail on the same variable. An accepted Config is
// in range (TUN 1..15 bytes, MTU 0 or 576..65000, Local valid, Peer
// unset or of Local's family, masked routes) and reads back unchanged
// from rc.conf values formatted from it.
func FuzzConfigFromRC(f *testing.F) {
	f.Add("keel0", "10.99.0.1", "10.99.0.2", "", "", "", "", "", "")
	f.Add("ipsec0", "2001:db8::1", "2001:db8::2", "esp", "fd00::1/64 10.98.0.1/24", "1420", "10.2.0.7/24 ::/0", "4501", "NO")
	f.Add("keel0", "10.99.0.1", "2001:db8::2", "udp", "", "", "", "", "")
	f.Add("abcdefghijklmnop", "10.99.0.1", "", "", "", "", "", "", "")
	f.Add("k", " 10.99.0.1\t", "", "ESP-UDP", "", "+576", "", "65535", "off")
	f.Add("keel0", "fe80::1%eth0", "", "", "", "65001", "", "0", "")
	f.Add("keel0", "10.99.0.1", "", "", "10.98.0.1", "", "", "", "")
	f.Add("keel0", "10.99.0.1", "", "", "", "", "x/8", "65536", "maybe")
	f.Add("keel0", "::ffff:10.99.0.1", "10.99.0.2", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, tun, local, peer, encap, tunAddr, mtu, routes, nattPort, udpGSO string) {
		vars := map[string]string{}
		for i, v := range []string{tun, local, peer, encap, tunAddr, mtu, routes, nattPort, udpGSO} {
			vars[rcVars[i]] = v
		}
		c, err := configFromMap(t, vars)
		if err != nil {
			if !reflect.DeepEqual(c, Config{}) {
				t.Fatalf("error %v with a non-zero config %+v", err, c)
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			name := namedVar(err)
			if _, ok := rcValid[name]; !ok {
				t.Fatalf("error %q names no ipsec_ variable", err)
			}
			if !strings.Contains(err.Error(), name+"="+strconv.Quote(vars[name])) {
				t.Fatalf("error %q does not quote %s's value %q", err, name, vars[name])
			}
			// The named value fails a valid configuration on the same
			// variable (ipsec_peer is judged against ipsec_local, so it
			// keeps the fuzzed ipsec_local when that one is valid).
			alone := map[string]string{}
			for k, v := range rcValid {
				alone[k] = v
			}
			alone[name] = vars[name]
			if name == "ipsec_peer" {
				alone["ipsec_local"] = vars["ipsec_local"]
			}
			_, err2 := configFromMap(t, alone)
			if err2 == nil || namedVar(err2) != name {
				t.Fatalf("error %q blames %s, but in a valid configuration its value gives %v", err, name, err2)
			}
			return
		}
		switch {
		case c.TUN == "" || len(c.TUN) > 15:
			t.Fatalf("accepted interface name %q", c.TUN)
		case c.MTU != 0 && (c.MTU < 576 || c.MTU > 65000):
			t.Fatalf("accepted MTU %d", c.MTU)
		case !c.Local.IsValid():
			t.Fatalf("accepted invalid local address %v", c.Local)
		case c.Peer.IsValid() && c.Peer.Is4() != c.Local.Is4():
			t.Fatalf("accepted peer %v for local %v", c.Peer, c.Local)
		case c.Encap != EncapUDP && c.Encap != EncapESP:
			t.Fatalf("accepted encapsulation %d", c.Encap)
		}
		for _, r := range c.Routes {
			if !r.IsValid() || r != r.Masked() {
				t.Fatalf("route %v is not a masked prefix", r)
			}
		}
		for _, a := range c.Addrs {
			if !a.IsValid() {
				t.Fatalf("invalid TUN address %v", a)
			}
		}
		// Format the Config back into rc.conf values: it must read back
		// the same.
		back := map[string]string{"ipsec_tun": c.TUN, "ipsec_local": c.Local.String(), "ipsec_encap": c.Encap.String()}
		if c.Peer.IsValid() {
			back["ipsec_peer"] = c.Peer.String()
		}
		if c.MTU != 0 {
			back["ipsec_tun_mtu"] = strconv.Itoa(c.MTU)
		}
		if c.Port != 0 {
			back["ipsec_natt_port"] = strconv.Itoa(int(c.Port))
		}
		if c.NoUDPGSO {
			back["ipsec_udp_gso"] = "NO"
		}
		var addrs, rts []string
		for _, a := range c.Addrs {
			addrs = append(addrs, a.String())
		}
		for _, r := range c.Routes {
			rts = append(rts, r.String())
		}
		back["ipsec_tun_addr"], back["ipsec_routes"] = strings.Join(addrs, " "), strings.Join(rts, " ")
		c2, err := configFromMap(t, back)
		if err != nil {
			t.Fatalf("config %+v formatted as %q does not read back: %v", c, back, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("config %+v reads back as %+v", c, c2)
		}
	})
}
