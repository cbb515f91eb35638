// Package setkey parses FreeBSD/NetBSD setkey(8) configuration files into
// SA and policy operations for Keel's IPsec engine.
//
// Supported statements (each ends with ';', may span lines; '#' starts a
// comment that runs to the end of the line):
//
//	flush;
//	spdflush;
//	add [-46n] src dst esp|esp-udp spi [-m transport|tunnel|any] [-r bytes]
//	    [-u reqid] [-f esn|nocyclic-seq] [-lh|-ls seconds] [-bh|-bs bytes]
//	    -E ealg [key] [-A aalg [key]];
//	delete [-46n] src dst esp|esp-udp spi;
//	spdadd [-46n] src[/plen][[port|any]] dst[/plen][[port|any]] upperspec
//	    -P in|out|fwd discard|none|ipsec esp/mode/[A-B]/level ...;
//	spddelete [-46n] src[/plen][[port]] dst[/plen][[port]] upperspec -P dir [policy];
//
// Addresses are numeric IPv4 or IPv6 (Keel never resolves names, so -n is
// implied; zones and IPv4-mapped IPv6 addresses are rejected). Selector
// prefixes with host bits set are masked, as the kernel does. An SA address may carry "[port]" only for esp-udp (RFC 3948
// NAT-T), whose ports default to 4500. SPIs are decimal or 0x-hex and must be
// at least 256 (RFC 4303 reserves 1-255; 0 is invalid). Keys are "ascii" or
// 0xHEX and are validated per algorithm:
//
//	-E rijndael-cbc | aes-cbc           16, 24 or 32 bytes
//	-E aes-gcm-16                        20, 28 or 36 bytes (key || 4-byte salt)
//	-E chacha20-poly1305                 36 bytes (key || 4-byte salt)
//	-E null                              no key (or "")
//	-A hmac-sha1                         20 bytes (HMAC-SHA1-96)
//	-A hmac-sha2-256 | hmac-sha256       32 bytes (HMAC-SHA-256-128)
//	-A hmac-sha2-384 | hmac-sha384       48 bytes (HMAC-SHA-384-192)
//	-A hmac-sha2-512 | hmac-sha512       64 bytes (HMAC-SHA-512-256)
//	-A null                              no key (or "")
//
// A non-AEAD -E needs a non-null -A; an AEAD takes no -A (or -A null).
// Any token after the algorithm other than an option or ';' is its key:
// an unquoted word there is an error. An error about a key names it by
// position ("the key at line 9, column 22") and never shows any of it;
// in an add statement after the SPI, where a misplaced key can land,
// errors quote only words of the grammar and describe others by length.
//
// Replay window: "-r" is in bytes as in setkey, so the window is bytes*8
// packets, at most 4096 packets (-r 512). "-r 0" disables replay checking.
// Deliberate deviation from setkey: when -r is absent the window is 64
// packets (DefaultReplayWindow), because RFC 4303 section 3.4.3 recommends
// replay protection, and a manual-keyed SA without it is almost always a
// configuration mistake.
//
// Keel extensions: "-f esn" enables 64-bit extended sequence numbers (RFC
// 4303 section 2.2.1); "-f nocyclic-seq" is accepted for compatibility and is
// a no-op because Keel never lets a sequence number cycle. ICMP selectors
// "icmp type,code" / "icmp6 type,code" store type and code in the selector's
// SrcPort and DstPort (the KAME convention).
//
// Parsing is all-or-nothing: Parse returns a Config only if every statement
// is valid; otherwise it returns the first *ParseError and no Config.
package setkey

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/spd"
)

// DefaultReplayWindow is the replay window, in packets, of an SA whose
// "add" has no -r option.
const DefaultReplayWindow = 64

// MaxReplayWindow is the largest replay window in packets (-r 512).
const MaxReplayWindow = 4096

// NATTPort is the default UDP port of esp-udp SAs (RFC 3948).
const NATTPort = 4500

// Pos is a position in a configuration file. Line and Col are 1-based;
// Col counts bytes.
type Pos struct {
	File string
	Line int
	Col  int
}

// String returns "file:line:col".
func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// OpKind is the kind of a setkey statement.
type OpKind uint8

// Operation kinds, one per statement.
const (
	OpFlush     OpKind = iota + 1 // flush;        remove all SAs
	OpSPDFlush                    // spdflush;     remove all policies
	OpAdd                         // add ...;      install Op.SA
	OpDelete                      // delete ...;   remove the SA (Src, Dst, Proto, SPI) of Op.SA
	OpSPDAdd                      // spdadd ...;   append Op.Policy
	OpSPDDelete                   // spddelete ...; remove the policy with Op.Policy's Dir and Sel
)

// String returns the setkey keyword.
func (k OpKind) String() string {
	switch k {
	case OpFlush:
		return "flush"
	case OpSPDFlush:
		return "spdflush"
	case OpAdd:
		return "add"
	case OpDelete:
		return "delete"
	case OpSPDAdd:
		return "spdadd"
	case OpSPDDelete:
		return "spddelete"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one statement. SA is set for OpAdd and OpDelete (for OpDelete only
// Src, Dst, Proto and SPI are meaningful), Policy for OpSPDAdd and
// OpSPDDelete (for OpSPDDelete only Dir and Sel are meaningful).
type Op struct {
	Kind   OpKind
	SA     *SA
	Policy *spd.Policy
	Pos    Pos
}

// Config is a parsed file: its statements in file order. It owns key
// material through its SAs; call Zero when done with it.
type Config struct {
	Ops []Op
}

// Zero wipes the keys of every SA in c.
func (c *Config) Zero() {
	if c == nil {
		return
	}
	for i := range c.Ops {
		c.Ops[i].SA.Zero()
	}
}

// Proto is the IPsec protocol of an SA.
type Proto uint8

// Protocols.
const (
	ProtoESP    Proto = iota + 1 // ESP (IP protocol 50)
	ProtoESPUDP                  // ESP in UDP (RFC 3948 NAT-T)
)

// String returns "esp" or "esp-udp".
func (p Proto) String() string {
	switch p {
	case ProtoESP:
		return "esp"
	case ProtoESPUDP:
		return "esp-udp"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// SA is a manually keyed security association from an "add" statement.
// String and Format never print key material; Zero wipes it.
type SA struct {
	// Src and Dst are the SA endpoints. Ports are set only for esp-udp
	// (default 4500).
	Src, Dst netip.AddrPort
	Proto    Proto
	SPI      uint32
	Mode     spd.Mode
	// ReplayWindow is the anti-replay window in packets; 0 disables the
	// replay check.
	ReplayWindow int
	ReqID        uint32
	ESN          bool
	Alg          crypto.Algorithm
	// EncKey is the cipher key (for AEADs: key || 4-byte salt); AuthKey
	// the HMAC key (nil for AEADs and null).
	EncKey, AuthKey []byte
	// Lifetimes; 0 means unlimited.
	SoftBytes, HardBytes uint64
	SoftTime, HardTime   time.Duration
	Pos                  Pos
}

// Zero overwrites the keys with zeros and drops them. Safe on nil.
func (sa *SA) Zero() {
	if sa == nil {
		return
	}
	clear(sa.EncKey)
	clear(sa.AuthKey)
	sa.EncKey, sa.AuthKey = nil, nil
}

// SessionParams returns the crypto session parameters of the SA. The
// returned keys alias the SA's; NewSession copies them.
func (sa *SA) SessionParams() crypto.SessionParams {
	return crypto.SessionParams{Alg: sa.Alg, CipherKey: sa.EncKey, AuthKey: sa.AuthKey}
}

// String renders the SA in setkey "add" syntax with keys redacted, e.g.
// `192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -E aes-gcm-16 [redacted 20 bytes]`.
func (sa SA) String() string {
	var b strings.Builder
	formatSA(&b, &sa, false, true)
	return b.String()
}

// GoString is String, so that %#v cannot print keys either.
func (sa SA) GoString() string { return sa.String() }

// MarshalText returns String, so that encoders (encoding/json, slog's JSON
// and text handlers, YAML/TOML libraries) print the redacted form of an SA,
// never its key bytes. There is deliberately no UnmarshalText: key
// material enters only through Parse.
func (sa SA) MarshalText() ([]byte, error) { return []byte(sa.String()), nil }

// Format implements fmt.Formatter so that every verb (%v, %+v, %d, %x, ...)
// prints the redacted String form and never the key bytes, including when
// an SA is nested in an Op or Config being printed.
func (sa SA) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, sa.String()) }

// Error is the category of a ParseError, for errors.Is.
var (
	// ErrSyntax marks every *ParseError.
	ErrSyntax = errors.New("setkey: syntax error")
)

// ParseError is a parse or validation error at a position. Its message
// never contains key material.
type ParseError struct {
	File      string
	Line, Col int
	// Field names what was being parsed, e.g. "SPI", "encryption key".
	Field string
	// Msg is e.g. "expected hex digits, got 'zz'".
	Msg string
}

// Error returns "file:line:col: field: msg".
func (e *ParseError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Col, e.Field, e.Msg)
}

// Is reports true for ErrSyntax.
func (e *ParseError) Is(target error) bool { return target == ErrSyntax }

// Pos returns the error position.
func (e *ParseError) Pos() Pos { return Pos{File: e.File, Line: e.Line, Col: e.Col} }
