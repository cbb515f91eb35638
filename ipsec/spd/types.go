// Package spd is Keel's IPsec Security Policy Database.
//
// An SPD holds an ordered list of policies per direction; the first policy
// (lowest Index) whose selector matches a flow wins, exactly as a linear
// first-match scan would decide. Lookups go through a hashed per-flow cache
// in the style of the FreeBSD SPD cache (D15050): lock-free seqlock reads,
// invalidated wholesale by a generation counter whenever the SPD changes. A
// cache miss does not fall back to a linear scan: the policy list is
// compiled into a tuple-space classifier (one hash table per distinct
// combination of prefix lengths and wildcarded proto/port fields, searched
// in order of each table's best priority with early termination).
//
// Address matching follows net/netip semantics: an IPv4 flow address never
// matches an IPv6 prefix and vice versa (IPv4-mapped IPv6 addresses are IPv6;
// unmap them before lookup if that is not wanted). IPv6 zones are ignored.
// A zero (invalid) netip.Prefix in a selector is a wildcard matching any
// address of any family.
//
// ICMP follows the KAME convention: a flow's SrcPort carries the ICMP type
// and DstPort the ICMP code, so an icmp/icmp6 selector with "type,code"
// stores them in SrcPort/DstPort. As with ports, 0 means any (so ICMP type 0
// cannot be selected on its own).
package spd

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Dir is the direction a policy applies to.
type Dir uint8

// Directions.
const (
	DirIn  Dir = iota // inbound traffic (after decapsulation, or plaintext arriving)
	DirOut            // outbound traffic
	DirFwd            // forwarded traffic (Linux-style "fwd"; setkey "-P fwd")

	numDirs = 3
)

// String returns "in", "out" or "fwd".
func (d Dir) String() string {
	switch d {
	case DirIn:
		return "in"
	case DirOut:
		return "out"
	case DirFwd:
		return "fwd"
	}
	return fmt.Sprintf("dir(%d)", uint8(d))
}

// Action is what a matching policy does with a packet.
type Action uint8

// Actions. The zero value is Discard, the safe default.
const (
	Discard Action = iota // drop the packet
	None                  // pass the packet without IPsec (bypass)
	IPsec                 // apply the policy's IPsecRequests
)

// String returns the setkey keyword: "discard", "none" or "ipsec".
func (a Action) String() string {
	switch a {
	case Discard:
		return "discard"
	case None:
		return "none"
	case IPsec:
		return "ipsec"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Level is the setkey level of an IPsec request.
type Level uint8

// Levels, as in ipsec_set_policy(3).
const (
	LevelDefault Level = iota // use the system default
	LevelUse                  // use an SA if one is available, else pass in clear
	LevelRequire              // an SA is required
	LevelUnique               // an SA is required and bound to this policy (ReqID)
)

// String returns the setkey keyword.
func (l Level) String() string {
	switch l {
	case LevelDefault:
		return "default"
	case LevelUse:
		return "use"
	case LevelRequire:
		return "require"
	case LevelUnique:
		return "unique"
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// Mode is the IPsec mode of an SA or request.
type Mode uint8

// Modes. ModeAny is the setkey default for SAs ("-m any").
const (
	ModeAny Mode = iota
	ModeTransport
	ModeTunnel
)

// String returns the setkey keyword.
func (m Mode) String() string {
	switch m {
	case ModeAny:
		return "any"
	case ModeTransport:
		return "transport"
	case ModeTunnel:
		return "tunnel"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// IPsecRequest is one "esp/mode/src-dst/level" element of an ipsec policy.
// Only ESP is supported.
type IPsecRequest struct {
	Mode Mode
	// Src and Dst are the tunnel endpoints; invalid (zero) for transport.
	Src, Dst netip.Addr
	Level    Level
	// ReqID binds the request to SAs with the same reqid ("unique:N");
	// 0 means none.
	ReqID uint32
}

// String renders the request in setkey syntax, e.g.
// "esp/tunnel/192.0.2.1-192.0.2.2/unique:7".
func (r IPsecRequest) String() string {
	var b strings.Builder
	b.WriteString("esp/")
	b.WriteString(r.Mode.String())
	b.WriteByte('/')
	if r.Src.IsValid() || r.Dst.IsValid() {
		b.WriteString(r.Src.String())
		b.WriteByte('-')
		b.WriteString(r.Dst.String())
	}
	b.WriteByte('/')
	b.WriteString(r.Level.String())
	if r.Level == LevelUnique && r.ReqID != 0 {
		fmt.Fprintf(&b, ":%d", r.ReqID)
	}
	return b.String()
}

// Selector is the traffic a policy applies to. Zero fields are wildcards:
// an invalid Prefix matches any address, Proto 0 any protocol, port 0 any
// port. Selector is comparable.
type Selector struct {
	Src, Dst netip.Prefix
	Proto    uint8
	// SrcPort and DstPort; for ICMP/ICMPv6 they hold type and code.
	SrcPort, DstPort uint16
}

// Matches reports whether f is selected. This is the reference semantics
// used by LookupLinear; the classifier and cache reproduce it exactly.
func (s Selector) Matches(f Flow) bool {
	return matchPrefix(s.Src, f.Src) && matchPrefix(s.Dst, f.Dst) &&
		(s.Proto == 0 || s.Proto == f.Proto) &&
		(s.SrcPort == 0 || s.SrcPort == f.SrcPort) &&
		(s.DstPort == 0 || s.DstPort == f.DstPort)
}

func matchPrefix(p netip.Prefix, a netip.Addr) bool {
	if !p.IsValid() {
		return true
	}
	return p.Contains(a.WithZone(""))
}

// Validate rejects prefixes that are neither valid nor the zero wildcard
// (for example an address with an out-of-range length).
func (s Selector) Validate() error {
	if s.Src != (netip.Prefix{}) && !s.Src.IsValid() {
		return fmt.Errorf("%w: source prefix %v", ErrInvalid, s.Src)
	}
	if s.Dst != (netip.Prefix{}) && !s.Dst.IsValid() {
		return fmt.Errorf("%w: destination prefix %v", ErrInvalid, s.Dst)
	}
	return nil
}

// canonical returns s with masked prefixes, the form stored in an SPD.
func (s Selector) canonical() Selector {
	if s.Src.IsValid() {
		s.Src = s.Src.Masked()
	}
	if s.Dst.IsValid() {
		s.Dst = s.Dst.Masked()
	}
	return s
}

// String renders the selector in setkey syntax, e.g.
// "10.0.0.0/24[any] 10.0.1.0/24[80] tcp".
func (s Selector) String() string {
	var b strings.Builder
	icmp := s.Proto == 1 || s.Proto == 58
	writeEnd := func(p netip.Prefix, port uint16) {
		if p.IsValid() {
			b.WriteString(p.String())
		} else {
			b.WriteString("any")
		}
		if !icmp {
			if port == 0 {
				b.WriteString("[any]")
			} else {
				fmt.Fprintf(&b, "[%d]", port)
			}
		}
	}
	writeEnd(s.Src, s.SrcPort)
	b.WriteByte(' ')
	writeEnd(s.Dst, s.DstPort)
	b.WriteByte(' ')
	b.WriteString(ProtoName(s.Proto))
	if icmp && (s.SrcPort != 0 || s.DstPort != 0) {
		fmt.Fprintf(&b, " %d,%d", s.SrcPort, s.DstPort)
	}
	return b.String()
}

// ProtoName returns the setkey upperspec name of an IP protocol number
// ("any" for 0, the decimal number for unnamed protocols).
func ProtoName(p uint8) string {
	switch p {
	case 0:
		return "any"
	case 1:
		return "icmp"
	case 4:
		return "ip4"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 47:
		return "gre"
	case 58:
		return "icmp6"
	case 132:
		return "sctp"
	}
	return fmt.Sprintf("%d", p)
}

// Policy is one SPD entry. Policies returned by Lookup point into an
// immutable snapshot and must not be modified.
type Policy struct {
	// Index is the position in the SPD (first match wins). Replace and
	// Add assign it; values passed in are ignored.
	Index    int
	Dir      Dir
	Sel      Selector
	Action   Action
	Requests []IPsecRequest
	// Pos is the origin for diagnostics, e.g. "ipsec.conf:12".
	Pos string
}

// String renders the policy in setkey spdadd syntax (without the leading
// "spdadd" and trailing ';').
func (p *Policy) String() string {
	var b strings.Builder
	b.WriteString(p.Sel.String())
	b.WriteString(" -P ")
	b.WriteString(p.Dir.String())
	b.WriteByte(' ')
	b.WriteString(p.Action.String())
	for _, r := range p.Requests {
		b.WriteByte(' ')
		b.WriteString(r.String())
	}
	return b.String()
}

// Validate checks the policy's fields for consistency: a known direction and
// action, valid prefixes, requests only for IPsec (and at least one), tunnel
// requests with same-family endpoints and transport requests without.
func (p *Policy) Validate() error {
	if p.Dir >= numDirs {
		return fmt.Errorf("%w: direction %v", ErrInvalid, p.Dir)
	}
	if err := p.Sel.Validate(); err != nil {
		return err
	}
	switch p.Action {
	case Discard, None:
		if len(p.Requests) != 0 {
			return fmt.Errorf("%w: %v policy with IPsec requests", ErrInvalid, p.Action)
		}
	case IPsec:
		if len(p.Requests) == 0 {
			return fmt.Errorf("%w: ipsec policy without requests", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: action %v", ErrInvalid, p.Action)
	}
	for i, r := range p.Requests {
		switch r.Mode {
		case ModeTunnel:
			if !r.Src.IsValid() || !r.Dst.IsValid() || r.Src.Is4() != r.Dst.Is4() {
				return fmt.Errorf("%w: request %d: tunnel needs two endpoints of one family", ErrInvalid, i+1)
			}
		case ModeTransport:
			if r.Src.IsValid() || r.Dst.IsValid() {
				return fmt.Errorf("%w: request %d: transport takes no endpoints", ErrInvalid, i+1)
			}
		default:
			return fmt.Errorf("%w: request %d: mode %v", ErrInvalid, i+1, r.Mode)
		}
		if r.Level > LevelUnique {
			return fmt.Errorf("%w: request %d: level %v", ErrInvalid, i+1, r.Level)
		}
	}
	return nil
}

// clone returns a deep copy.
func (p *Policy) clone() Policy {
	c := *p
	if p.Requests != nil {
		c.Requests = append([]IPsecRequest(nil), p.Requests...)
	}
	return c
}

// Flow is the header tuple of a packet being classified. For ICMP, SrcPort
// is the type and DstPort the code; for protocols without ports both are 0.
type Flow struct {
	Src, Dst netip.Addr
	Proto    uint8
	SrcPort  uint16
	DstPort  uint16
}

// Sentinel errors; check with errors.Is.
var (
	ErrExists   = errors.New("spd: policy exists")
	ErrNotFound = errors.New("spd: no such policy")
	ErrInvalid  = errors.New("spd: invalid policy")
)
