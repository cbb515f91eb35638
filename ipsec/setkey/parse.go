package setkey

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/spd"
)

// MaxFileSize bounds the size of a configuration file.
const MaxFileSize = 16 << 20

// ParseFile reads and parses the setkey file at path. Errors are
// *ParseError positioned in path, or the I/O error wrapped with path.
func ParseFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError already names the file
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse parses a setkey configuration read from r; name is used in
// positions. It returns a Config only if every statement is valid. The
// internal copy of the input is zeroed before returning; the caller owns
// (and should zero) any copy of its own.
func Parse(name string, r io.Reader) (*Config, error) {
	src, err := readAllWiped(io.LimitReader(r, MaxFileSize+1))
	defer clear(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(src) > MaxFileSize {
		return nil, &ParseError{File: name, Line: 1, Col: 1, Msg: fmt.Sprintf("file larger than %d bytes", MaxFileSize)}
	}
	return parseBytes(name, src)
}

// readAllWiped is io.ReadAll, except that every buffer it outgrows is
// zeroed before it is dropped: the input holds keys, and io.ReadAll would
// leave partial copies of them in garbage. The caller zeroes the result.
func readAllWiped(r io.Reader) ([]byte, error) {
	b := make([]byte, 0, 4096)
	for {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), 2*cap(b))
			copy(nb, b)
			clear(b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

func parseBytes(name string, src []byte) (*Config, error) {
	p := &parser{file: name, src: src, lx: newLexer(name, src)}
	p.cur = p.lx.next()
	cfg := &Config{}
	for p.peek().kind != tokEOF {
		op, err := p.statement()
		if err != nil {
			cfg.Zero()
			return nil, p.firstError(err)
		}
		cfg.Ops = append(cfg.Ops, op)
	}
	return cfg, nil
}

// firstError returns whichever of a parse error and the lexer's error (if
// any) comes first in the file: a parse error caused by the error token is
// reported as the lexical error it stands for.
func (p *parser) firstError(err error) error {
	le := p.lx.err
	pe, ok := err.(*ParseError)
	if le == nil || !ok {
		return err
	}
	if le.Line < pe.Line || le.Line == pe.Line && le.Col <= pe.Col {
		return le
	}
	return pe
}

type parser struct {
	file string
	src  []byte
	lx   *lexer
	cur  token // next token (peeked)
	prev token // last token returned by next
}

func (p *parser) peek() token { return p.cur }

func (p *parser) next() token {
	t := p.cur
	if t.kind != tokEOF && t.kind != tokErr {
		p.cur = p.lx.next()
	}
	p.prev = t
	return t
}

// text returns a word's text. Never call it on a token that may be a key
// except to compare it.
func (p *parser) text(t token) string { return string(p.src[t.off:t.end]) }

func (p *parser) pos(t token) Pos { return Pos{File: p.file, Line: t.line, Col: t.col} }

func (p *parser) errAt(t token, colOff int, field, format string, args ...any) *ParseError {
	return &ParseError{File: p.file, Line: t.line, Col: t.col + colOff, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) err(t token, field, format string, args ...any) *ParseError {
	return p.errAt(t, 0, field, format, args...)
}

// expected builds "expected X, got Y".
// algorithm reads the algorithm name that follows -E or -A and looks it up
// in table. field names it in errors ("encryption algorithm"); known lists
// the accepted names but the last, which is last. A name setkey knows but
// Keel does not implement gets its own message.
func algorithm[T any](p *parser, field string, table map[string]T, known, last string) (T, token, error) {
	var zero T
	v := p.next()
	if v.kind == tokWord {
		if a, ok := table[p.text(v)]; ok {
			return a, v, nil
		}
		if unsupportedAlgs[p.text(v)] {
			return zero, v, p.err(v, field, "%s is not supported, expected %s or %s", p.text(v), known, last)
		}
	}
	return zero, v, p.expectedHidden(v, field, "an "+field+" ("+known+", "+last+")")
}

func (p *parser) expected(t token, field, what string) *ParseError {
	return p.err(t, field, "expected %s, got %s", what, p.describe(t))
}

// expectedHidden is expected for the positions of an "add" after its
// SPI, where a key typed in the wrong place (or the tail of a key typed
// with a space) can land: only words of the grammar are quoted there
// (see describeHidden).
func (p *parser) expectedHidden(t token, field, what string) *ParseError {
	return p.err(t, field, "expected %s, got %s", what, p.describeHidden(t))
}

// describeHidden is describe for positions where key material may stand:
// a word is quoted only if it is a word of the grammar (vocabulary);
// any other word is described by its length only.
func (p *parser) describeHidden(t token) string {
	if t.kind != tokWord {
		return p.describe(t)
	}
	w := p.src[t.off:t.end]
	if vocabulary[string(w)] {
		return strconv.Quote(string(w))
	}
	return fmt.Sprintf("a %d-character word (not shown)", len(w))
}

// vocabulary holds every word of the setkey grammar that can follow an
// SPI: statement keywords, options, algorithm names (supported or not),
// modes and flags. describeHidden quotes only these.
var vocabulary = func() map[string]bool {
	v := map[string]bool{}
	for _, w := range []string{"flush", "spdflush", "add", "delete", "spdadd", "spddelete", "deleteall", "get", "dump",
		"spddump", "spdupdate", "update", "exit", "quit", "transport", "tunnel", "any", "esn", "nocyclic-seq",
		"zero-pad", "random-pad", "seq-pad"} {
		v[w] = true
	}
	for w := range addOptions {
		v[w] = true
	}
	for w := range encAlgs {
		v[w] = true
	}
	for w := range authAlgs {
		v[w] = true
	}
	for w := range unsupportedAlgs {
		v[w] = true
	}
	return v
}()

// addOptions are the options of "add".
var addOptions = map[string]bool{"-m": true, "-r": true, "-u": true, "-f": true, "-lh": true, "-ls": true, "-bh": true, "-bs": true, "-E": true, "-A": true}

// describe names a token for an error message without ever echoing
// anything that could be key material: quoted strings, long hex strings and
// long words are described, not quoted.
func (p *parser) describe(t token) string {
	switch t.kind {
	case tokEOF:
		return "end of file"
	case tokSemi:
		return "';'"
	case tokString:
		return "a quoted string"
	case tokErr:
		return "an invalid token"
	}
	return safeQuote(p.src[t.off:t.end])
}

// safeQuote quotes w for an error message unless it could be key material
// (a 0x string longer than an SPI, a run of 12 or more hex digits, or more
// than 40 bytes), in which case it only describes it.
func safeQuote[T string | []byte](w T) string {
	if len(w) > 10 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X') {
		return fmt.Sprintf("a hex string of %d digits", len(w)-2)
	}
	q := strconv.Quote(string(w))
	if len(w) > 40 || hasHexRun(string(w), 12) || hasHexRun(q, 12) {
		return fmt.Sprintf("a %d-character word", len(w))
	}
	return q
}

// hasHexRun reports whether s contains n or more consecutive hex digits.
func hasHexRun(s string, n int) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if isHex(s[i]) {
			run++
			if run >= n {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (p *parser) isWord(t token, s string) bool {
	return t.kind == tokWord && string(p.src[t.off:t.end]) == s
}

func (p *parser) expectSemi(field string) error {
	t := p.next()
	if t.kind != tokSemi {
		return p.expected(t, field, "';'")
	}
	return nil
}

func (p *parser) statement() (Op, error) {
	t := p.next()
	op := Op{Pos: p.pos(t)}
	if t.kind != tokWord {
		return op, p.expected(t, "command", "a command (flush, spdflush, add, delete, spdadd, spddelete)")
	}
	var err error
	switch p.text(t) {
	case "flush":
		op.Kind = OpFlush
		if n := p.peek(); p.isWord(n, "esp") || p.isWord(n, "esp-udp") {
			p.next() // only ESP exists, so "flush esp;" flushes everything
		}
		err = p.expectSemi("flush")
	case "spdflush":
		op.Kind = OpSPDFlush
		err = p.expectSemi("spdflush")
	case "add":
		op.Kind = OpAdd
		op.SA, err = p.add(op.Pos)
	case "delete":
		op.Kind = OpDelete
		op.SA, err = p.del(op.Pos)
	case "spdadd":
		op.Kind = OpSPDAdd
		op.Policy, err = p.spd(op.Pos, true)
	case "spddelete":
		op.Kind = OpSPDDelete
		op.Policy, err = p.spd(op.Pos, false)
	case "deleteall", "get", "dump", "spddump", "spdupdate", "update", "exit", "quit":
		return op, p.err(t, "command", "%s is not supported in a configuration file", safeQuote(p.text(t)))
	default:
		return op, p.expected(t, "command", "a command (flush, spdflush, add, delete, spdadd, spddelete)")
	}
	if err != nil {
		op.SA.Zero()
	}
	return op, err
}

// family is the -4/-6 restriction; 0 means either.
type family uint8

const (
	famAny family = iota
	famV4
	famV6
)

// flags parses [-46n] options.
func (p *parser) flags() (family, error) {
	fam := famAny
	for {
		t := p.peek()
		if t.kind != tokWord {
			return fam, nil
		}
		w := p.src[t.off:t.end]
		if len(w) < 2 || w[0] != '-' || strings.Trim(string(w[1:]), "46n") != "" {
			return fam, nil
		}
		p.next()
		for _, c := range w[1:] {
			var f family
			switch c {
			case '4':
				f = famV4
			case '6':
				f = famV6
			default:
				continue
			}
			if fam != famAny && fam != f {
				return fam, p.err(t, "address family", "conflicting -4 and -6")
			}
			fam = f
		}
	}
}

// endpoint is a parsed "addr[/plen][[port]]".
type endpoint struct {
	addr    netip.Addr
	bits    int // -1 when absent
	port    int // -1 when absent, 0 for "any"
	portCol int // column offset of the port inside the word
	tok     token
}

func (p *parser) endpoint(field string) (endpoint, error) {
	t := p.next()
	e := endpoint{bits: -1, port: -1, tok: t}
	if t.kind != tokWord {
		return e, p.expected(t, field, "an IP address")
	}
	w := p.text(t)
	addr := w
	if i := strings.IndexByte(w, '['); i >= 0 {
		if !strings.HasSuffix(w, "]") {
			return e, p.errAt(t, len(w), field, "expected ']' after port")
		}
		addr = w[:i]
		ps := w[i+1 : len(w)-1]
		e.portCol = i + 1
		if ps == "any" || ps == "*" {
			e.port = 0
		} else {
			n, err := strconv.ParseUint(ps, 10, 16)
			if err != nil {
				return e, p.errAt(t, i+1, field+" port", "expected a port 0-65535 or any, got %s", safeQuote(ps))
			}
			e.port = int(n)
		}
	}
	if i := strings.IndexByte(addr, '/'); i >= 0 {
		bs := addr[i+1:]
		addr = addr[:i]
		n, err := strconv.ParseUint(bs, 10, 8)
		if err != nil {
			return e, p.errAt(t, i+1, field+" prefix length", "expected a prefix length, got %s", safeQuote(bs))
		}
		e.bits = int(n)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		return e, p.expected(t, field, "a numeric IPv4 or IPv6 address")
	}
	if a.Is4In6() {
		return e, p.err(t, field, "IPv4-mapped IPv6 address %s: write the IPv4 address %s", a, a.Unmap())
	}
	e.addr = a
	if e.bits > a.BitLen() {
		return e, p.errAt(t, len(addr)+1, field+" prefix length", "expected a prefix length 0-%d, got %d", a.BitLen(), e.bits)
	}
	return e, nil
}

// endpoints parses "[-46n] src dst", the opening shared by add, delete,
// spdadd and spddelete; what ("address" or "range") names the fields in
// errors.
func (p *parser) endpoints(what string) (src, dst endpoint, err error) {
	fam, err := p.flags()
	if err != nil {
		return src, dst, err
	}
	if src, err = p.endpoint("source " + what); err != nil {
		return src, dst, err
	}
	if dst, err = p.endpoint("destination " + what); err != nil {
		return src, dst, err
	}
	return src, dst, p.checkFamily(fam, src, dst, what)
}

func (p *parser) checkFamily(fam family, src, dst endpoint, what string) error {
	if src.addr.Is4() != dst.addr.Is4() {
		return p.err(dst.tok, "destination "+what, "address family differs from source %s", what)
	}
	if fam == famV4 && !src.addr.Is4() || fam == famV6 && src.addr.Is4() {
		return p.err(src.tok, "source "+what, "address family conflicts with -4/-6")
	}
	return nil
}

// saHeader parses "[-46n] src dst esp|esp-udp spi" shared by add and delete.
func (p *parser) saHeader(pos Pos) (*SA, error) {
	src, dst, err := p.endpoints("address")
	if err != nil {
		return nil, err
	}
	for _, e := range []struct {
		ep    endpoint
		field string
	}{{src, "source address"}, {dst, "destination address"}} {
		if e.ep.bits >= 0 && e.ep.bits != e.ep.addr.BitLen() {
			return nil, p.err(e.ep.tok, e.field, "an SA address takes no prefix length")
		}
	}
	sa := &SA{Pos: pos}
	t := p.next()
	switch {
	case p.isWord(t, "esp"):
		sa.Proto = ProtoESP
		for _, e := range []struct {
			ep    endpoint
			field string
		}{{src, "source address"}, {dst, "destination address"}} {
			if e.ep.port >= 0 {
				return nil, p.errAt(e.ep.tok, e.ep.portCol, e.field+" port", "a port is only valid for esp-udp")
			}
		}
		sa.Src = netip.AddrPortFrom(src.addr, 0)
		sa.Dst = netip.AddrPortFrom(dst.addr, 0)
	case p.isWord(t, "esp-udp"):
		sa.Proto = ProtoESPUDP
		for _, e := range []struct {
			ep    endpoint
			field string
		}{{src, "source address"}, {dst, "destination address"}} {
			if e.ep.port == 0 {
				return nil, p.errAt(e.ep.tok, e.ep.portCol, e.field+" port", "expected a UDP port 1-65535 (omit it for %d)", NATTPort)
			}
		}
		sp, dp := src.port, dst.port
		if sp < 0 {
			sp = NATTPort
		}
		if dp < 0 {
			dp = NATTPort
		}
		sa.Src = netip.AddrPortFrom(src.addr, uint16(sp))
		sa.Dst = netip.AddrPortFrom(dst.addr, uint16(dp))
	case p.isWord(t, "ah") || p.isWord(t, "ipcomp") || p.isWord(t, "tcp"):
		return nil, p.err(t, "protocol", "%s is not supported, expected esp or esp-udp", p.text(t))
	default:
		return nil, p.expected(t, "protocol", "esp or esp-udp")
	}
	t = p.next()
	if t.kind != tokWord {
		return nil, p.expected(t, "SPI", "an SPI (decimal or 0x hex)")
	}
	spi, err := parseUint(p.text(t), 32)
	if err != nil {
		return nil, p.expected(t, "SPI", "an SPI (decimal or 0x hex, 256-4294967295)")
	}
	if spi < 256 {
		return nil, p.err(t, "SPI", "SPI %d is reserved (RFC 4303), expected 256-4294967295", spi)
	}
	sa.SPI = uint32(spi)
	return sa, nil
}

// parseUint parses decimal or 0x-prefixed hex.
func parseUint(s string, bitSize int) (uint64, error) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return strconv.ParseUint(s[2:], 16, bitSize)
	}
	return strconv.ParseUint(s, 10, bitSize)
}

func (p *parser) del(pos Pos) (*SA, error) {
	sa, err := p.saHeader(pos)
	if err != nil {
		return nil, err
	}
	return sa, p.expectSemi("delete")
}

// encAlg describes an -E algorithm.
type encAlg struct {
	cipher crypto.Cipher
	lens   []int // valid key lengths in bytes (salt included)
	names  string
}

var encAlgs = map[string]encAlg{
	"rijndael-cbc":      {crypto.CipherAESCBC, []int{16, 24, 32}, "16, 24 or 32"},
	"aes-cbc":           {crypto.CipherAESCBC, []int{16, 24, 32}, "16, 24 or 32"},
	"aes-gcm-16":        {crypto.CipherAESGCM, []int{20, 28, 36}, "20, 28 or 36 (key and 4-byte salt)"},
	"chacha20-poly1305": {crypto.CipherChaCha20Poly1305, []int{36}, "36 (key and 4-byte salt)"},
	"null":              {crypto.CipherNull, []int{0}, "0"},
}

var authAlgs = map[string]crypto.Auth{
	"hmac-sha1":     crypto.AuthHMACSHA1_96,
	"hmac-sha2-256": crypto.AuthHMACSHA256_128,
	"hmac-sha256":   crypto.AuthHMACSHA256_128,
	"hmac-sha2-384": crypto.AuthHMACSHA384_192,
	"hmac-sha384":   crypto.AuthHMACSHA384_192,
	"hmac-sha2-512": crypto.AuthHMACSHA512_256,
	"hmac-sha512":   crypto.AuthHMACSHA512_256,
	"null":          crypto.AuthNone,
}

var unsupportedAlgs = map[string]bool{
	"des-cbc": true, "3des-cbc": true, "blowfish-cbc": true, "cast128-cbc": true,
	"des-deriv": true, "des-32iv": true, "aes-ctr": true, "camellia-cbc": true,
	"twofish-cbc": true, "aes-gcm-8": true, "aes-gcm-12": true, "aes-gmac": true,
	"hmac-md5": true, "keyed-md5": true, "keyed-sha1": true, "hmac-ripemd160": true,
	"aes-xcbc-mac": true, "tcp-md5": true,
}

// key parses the key that may follow an algorithm. It returns (nil, tok,
// false) when none follows: the next token is an option of "add", ';' or
// the end. Any other token stands in the key's position and is taken as
// the key: a quoted string, 0xHEX, or an error for anything else (an
// unquoted word). Errors about a key name it by position ("the key at
// line 9, column 22", see keyErr) and never show any of its text.
func (p *parser) key(field string) ([]byte, token, bool, error) {
	t := p.peek()
	switch t.kind {
	case tokString:
		p.next()
		return bytes.Clone(p.src[t.off:t.end]), t, true, nil
	case tokWord:
		w := p.src[t.off:t.end]
		if addOptions[string(w)] {
			return nil, t, false, nil
		}
		p.next()
		if len(w) < 2 || w[0] != '0' || (w[1] != 'x' && w[1] != 'X') {
			return nil, t, true, p.keyErr(t, 0, field, " is neither \"ascii\" nor 0xHEX (quote an ASCII key; the key is not shown)")
		}
		h := w[2:]
		for i, c := range h {
			if !isHex(c) {
				return nil, t, true, p.keyErr(t, 2+i, field, " has a non-hex character at column %d", t.col+2+i)
			}
		}
		if len(h)%2 != 0 {
			return nil, t, true, p.keyErr(t, 0, field, " has an odd number of hex digits (%d)", len(h))
		}
		k := make([]byte, len(h)/2)
		if _, err := hex.Decode(k, h); err != nil {
			clear(k)
			return nil, t, true, p.keyErr(t, 0, field, " is not valid hex")
		}
		return k, t, true, nil
	}
	return nil, t, false, nil
}

// keyErr reports an error about the key token t, at column offset colOff
// inside it: "the key at line L, column C" followed by the message (which
// starts with " is ..." or ": ..."). The arguments must not come from the
// key's text.
func (p *parser) keyErr(t token, colOff int, field, format string, args ...any) *ParseError {
	return p.errAt(t, colOff, field, "the key at line %d, column %d%s", t.line, t.col, fmt.Sprintf(format, args...))
}

func (p *parser) add(pos Pos) (sa *SA, err error) {
	sa, err = p.saHeader(pos)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sa.Zero()
			sa = nil
		}
	}()
	sa.ReplayWindow = DefaultReplayWindow
	seen := map[string]bool{}
	var encTok, authTok token
	var enc *encAlg
	auth := crypto.AuthNone
	haveAuth := false
	for {
		t := p.next()
		if t.kind == tokSemi {
			break
		}
		if t.kind != tokWord {
			return sa, p.expectedHidden(t, "add", "an option (-m, -r, -u, -f, -lh, -ls, -bh, -bs, -E, -A) or ';'")
		}
		opt := p.text(t)
		if !addOptions[opt] {
			return sa, p.expectedHidden(t, "add", "an option (-m, -r, -u, -f, -lh, -ls, -bh, -bs, -E, -A) or ';'")
		}
		if seen[opt] && opt != "-f" {
			return sa, p.err(t, opt, "duplicate option %s", opt)
		}
		seen[opt] = true
		switch opt {
		case "-m":
			v := p.next()
			switch {
			case p.isWord(v, "transport"):
				sa.Mode = spd.ModeTransport
			case p.isWord(v, "tunnel"):
				sa.Mode = spd.ModeTunnel
			case p.isWord(v, "any"):
				sa.Mode = spd.ModeAny
			default:
				return sa, p.expectedHidden(v, "mode", "transport, tunnel or any")
			}
		case "-r":
			v := p.next()
			n, e := p.number(v, 32)
			if e != nil {
				return sa, p.expectedHidden(v, "replay window", "a window size in bytes")
			}
			if n*8 > MaxReplayWindow {
				return sa, p.err(v, "replay window", "%d bytes is %d packets, expected at most %d bytes (%d packets)", n, n*8, MaxReplayWindow/8, MaxReplayWindow)
			}
			sa.ReplayWindow = int(n * 8)
		case "-u":
			v := p.next()
			n, e := p.number(v, 32)
			if e != nil {
				return sa, p.expectedHidden(v, "reqid", "a reqid 0-4294967295")
			}
			sa.ReqID = uint32(n)
		case "-f":
			v := p.next()
			switch {
			case p.isWord(v, "esn"):
				sa.ESN = true
			case p.isWord(v, "nocyclic-seq"):
				// Keel never cycles sequence numbers; accepted for compatibility.
			case p.isWord(v, "zero-pad") || p.isWord(v, "random-pad") || p.isWord(v, "seq-pad"):
				return sa, p.err(v, "flag", "%s is not supported (Keel always pads per RFC 4303), expected esn or nocyclic-seq", p.text(v))
			default:
				return sa, p.expectedHidden(v, "flag", "esn or nocyclic-seq")
			}
		case "-lh", "-ls":
			v := p.next()
			n, e := p.number(v, 64)
			if e != nil || n > uint64(math.MaxInt64/int64(time.Second)) {
				return sa, p.expectedHidden(v, "lifetime", "a time in seconds")
			}
			if opt == "-lh" {
				sa.HardTime = time.Duration(n) * time.Second
			} else {
				sa.SoftTime = time.Duration(n) * time.Second
			}
		case "-bh", "-bs":
			v := p.next()
			n, e := p.number(v, 64)
			if e != nil {
				return sa, p.expectedHidden(v, "lifetime", "a byte count")
			}
			if opt == "-bh" {
				sa.HardBytes = n
			} else {
				sa.SoftBytes = n
			}
		case "-E":
			a, v, err := algorithm(p, "encryption algorithm", encAlgs, "rijndael-cbc, aes-cbc, aes-gcm-16, chacha20-poly1305", "null")
			if err != nil {
				return sa, err
			}
			enc, encTok = &a, v
			k, kt, present, e := p.key("encryption key")
			if e != nil {
				return sa, e
			}
			if !present && a.cipher != crypto.CipherNull {
				return sa, p.expectedHidden(kt, "encryption key", "a key (\"ascii\" or 0xHEX) after "+p.text(v))
			}
			if !validLen(len(k), a.lens) {
				clear(k)
				return sa, p.keyErr(kt, 0, "encryption key", ": %s key must be %s bytes, got %d", p.text(v), a.names, len(k))
			}
			sa.EncKey = k
			if a.cipher == crypto.CipherNull {
				sa.EncKey = nil
			}
		case "-A":
			a, v, err := algorithm(p, "authentication algorithm", authAlgs, "hmac-sha1, hmac-sha2-256, hmac-sha2-384, hmac-sha2-512", "null")
			if err != nil {
				return sa, err
			}
			auth, authTok, haveAuth = a, v, true
			k, kt, present, e := p.key("authentication key")
			if e != nil {
				return sa, e
			}
			if !present && a != crypto.AuthNone {
				return sa, p.expectedHidden(kt, "authentication key", "a key (\"ascii\" or 0xHEX) after "+p.text(v))
			}
			if len(k) != a.KeyLen() {
				clear(k)
				return sa, p.keyErr(kt, 0, "authentication key", ": %s key must be %d bytes, got %d", p.text(v), a.KeyLen(), len(k))
			}
			sa.AuthKey = k
			if a == crypto.AuthNone {
				sa.AuthKey = nil
			}
		}
	}
	end := p.prev // the ';'
	if enc == nil {
		return sa, p.err(end, "encryption algorithm", "expected -E before ';' (ESP needs an encryption algorithm; use -E null for integrity only)")
	}
	alg := crypto.Algorithm{Cipher: enc.cipher}
	switch enc.cipher {
	case crypto.CipherAESCBC:
		alg.KeyBits = len(sa.EncKey) * 8
	case crypto.CipherAESGCM, crypto.CipherChaCha20Poly1305:
		alg.KeyBits = (len(sa.EncKey) - 4) * 8
	}
	aead := enc.cipher == crypto.CipherAESGCM || enc.cipher == crypto.CipherChaCha20Poly1305
	switch {
	case aead && auth != crypto.AuthNone:
		return sa, p.err(authTok, "authentication algorithm", "%s is an AEAD and takes no -A", p.text(encTok))
	case !aead && !haveAuth:
		return sa, p.err(end, "authentication algorithm", "expected -A before ';' (%s needs an authentication algorithm)", p.text(encTok))
	case !aead && auth == crypto.AuthNone:
		return sa, p.err(authTok, "authentication algorithm", "expected a non-null authentication algorithm with -E %s", p.text(encTok))
	}
	alg.Auth = auth
	sa.Alg = alg
	if err := sa.SessionParams().CheckParams(); err != nil {
		return sa, p.err(encTok, "algorithm", "%v", err)
	}
	if sa.SoftTime != 0 && sa.HardTime != 0 && sa.SoftTime > sa.HardTime {
		return sa, p.err(end, "lifetime", "soft time lifetime (-ls %d) exceeds hard (-lh %d)", int64(sa.SoftTime/time.Second), int64(sa.HardTime/time.Second))
	}
	if sa.SoftBytes != 0 && sa.HardBytes != 0 && sa.SoftBytes > sa.HardBytes {
		return sa, p.err(end, "lifetime", "soft byte lifetime (-bs %d) exceeds hard (-bh %d)", sa.SoftBytes, sa.HardBytes)
	}
	return sa, nil
}

func validLen(n int, lens []int) bool {
	for _, l := range lens {
		if n == l {
			return true
		}
	}
	return false
}

// number parses a decimal (or 0x hex) unsigned word.
func (p *parser) number(t token, bitSize int) (uint64, error) {
	if t.kind != tokWord {
		return 0, strconv.ErrSyntax
	}
	return parseUint(p.text(t), bitSize)
}

var upperSpecs = map[string]uint8{
	"any": 0, "icmp": 1, "ip4": 4, "ipv4": 4, "tcp": 6, "udp": 17, "gre": 47,
	"icmp6": 58, "ipv6-icmp": 58, "sctp": 132,
}

// spd parses spdadd (full=true) or spddelete (policy optional, ignored).
func (p *parser) spd(pos Pos, full bool) (*spd.Policy, error) {
	src, dst, err := p.endpoints("range")
	if err != nil {
		return nil, err
	}
	pol := &spd.Policy{Pos: fmt.Sprintf("%s:%d", pos.File, pos.Line)}
	pfx := func(e endpoint) netip.Prefix {
		b := e.bits
		if b < 0 {
			b = e.addr.BitLen()
		}
		return netip.PrefixFrom(e.addr, b).Masked()
	}
	pol.Sel.Src, pol.Sel.Dst = pfx(src), pfx(dst)
	if src.port > 0 {
		pol.Sel.SrcPort = uint16(src.port)
	}
	if dst.port > 0 {
		pol.Sel.DstPort = uint16(dst.port)
	}
	t := p.next()
	if t.kind != tokWord {
		return nil, p.expected(t, "upper-layer protocol", "an upper-layer protocol (any, icmp, icmp6, tcp, udp, sctp, gre or 1-254)")
	}
	proto, ok := upperSpecs[p.text(t)]
	if !ok {
		n, e := strconv.ParseUint(p.text(t), 10, 8)
		if e != nil || n == 0 || n == 255 {
			return nil, p.expected(t, "upper-layer protocol", "an upper-layer protocol (any, icmp, icmp6, tcp, udp, sctp, gre or 1-254)")
		}
		proto = uint8(n)
	}
	pol.Sel.Proto = proto
	if proto == 1 || proto == 58 {
		for _, e := range []endpoint{src, dst} {
			if e.port > 0 {
				return nil, p.errAt(e.tok, e.portCol, "port", "icmp selectors take no ports; use \"%s type,code\"", p.text(t))
			}
		}
		if n := p.peek(); n.kind == tokWord && n.end > n.off && p.src[n.off] >= '0' && p.src[n.off] <= '9' {
			p.next()
			w := p.text(n)
			ty, code, hasCode := strings.Cut(w, ",")
			a, e1 := strconv.ParseUint(ty, 10, 8)
			var b uint64
			var e2 error
			if hasCode {
				b, e2 = strconv.ParseUint(code, 10, 8)
			}
			if e1 != nil || e2 != nil {
				return nil, p.expected(n, "icmp type", "an ICMP type[,code] (0-255)")
			}
			pol.Sel.SrcPort, pol.Sel.DstPort = uint16(a), uint16(b)
		}
	}
	t = p.next()
	if !p.isWord(t, "-P") {
		return nil, p.expected(t, "policy", "-P")
	}
	t = p.next()
	switch {
	case p.isWord(t, "in"):
		pol.Dir = spd.DirIn
	case p.isWord(t, "out"):
		pol.Dir = spd.DirOut
	case p.isWord(t, "fwd"):
		pol.Dir = spd.DirFwd
	default:
		return nil, p.expected(t, "direction", "in, out or fwd")
	}
	if !full && p.peek().kind == tokSemi {
		p.next()
		return pol, nil
	}
	t = p.next()
	switch {
	case p.isWord(t, "discard"):
		pol.Action = spd.Discard
	case p.isWord(t, "none"):
		pol.Action = spd.None
	case p.isWord(t, "ipsec"):
		pol.Action = spd.IPsec
	default:
		return nil, p.expected(t, "action", "discard, none or ipsec")
	}
	for {
		t := p.next()
		if t.kind == tokSemi {
			if pol.Action == spd.IPsec && len(pol.Requests) == 0 {
				return nil, p.expected(t, "request", "an IPsec request (esp/mode/src-dst/level)")
			}
			break
		}
		if pol.Action != spd.IPsec {
			return nil, p.expected(t, "policy", "';'")
		}
		r, err := p.request(t)
		if err != nil {
			return nil, err
		}
		pol.Requests = append(pol.Requests, r)
	}
	if err := pol.Validate(); err != nil {
		return nil, p.err(t, "policy", "%v", err)
	}
	if !full {
		return &spd.Policy{Dir: pol.Dir, Sel: pol.Sel, Pos: pol.Pos}, nil
	}
	return pol, nil
}

// request parses "esp/mode/[src-dst]/[level[:id]]".
func (p *parser) request(t token) (spd.IPsecRequest, error) {
	var r spd.IPsecRequest
	if t.kind != tokWord {
		return r, p.expected(t, "request", "an IPsec request (esp/mode/src-dst/level) or ';'")
	}
	w := p.text(t)
	parts := strings.Split(w, "/")
	cols := make([]int, len(parts))
	for i, c := 1, 0; i < len(parts); i++ {
		c += len(parts[i-1]) + 1
		cols[i] = c
	}
	if len(parts) < 3 || len(parts) > 4 {
		return r, p.err(t, "request", "expected protocol/mode/src-dst/level, got %d fields", len(parts))
	}
	switch parts[0] {
	case "esp":
	case "ah", "ipcomp", "tcp":
		return r, p.err(t, "request protocol", "%s is not supported, expected esp", parts[0])
	default:
		return r, p.err(t, "request protocol", "expected esp, got %s", safeQuote(parts[0]))
	}
	switch parts[1] {
	case "transport":
		r.Mode = spd.ModeTransport
	case "tunnel":
		r.Mode = spd.ModeTunnel
	default:
		return r, p.errAt(t, cols[1], "request mode", "expected transport or tunnel, got %s", safeQuote(parts[1]))
	}
	if parts[2] != "" {
		if r.Mode == spd.ModeTransport {
			return r, p.errAt(t, cols[2], "request endpoints", "transport mode takes no endpoints")
		}
		a, b, ok := strings.Cut(parts[2], "-")
		src, e1 := netip.ParseAddr(a)
		dst, e2 := netip.ParseAddr(b)
		if !ok || e1 != nil || e2 != nil || src.Zone() != "" || dst.Zone() != "" {
			return r, p.errAt(t, cols[2], "request endpoints", "expected two numeric addresses A-B")
		}
		if src.Is4In6() || dst.Is4In6() {
			return r, p.errAt(t, cols[2], "request endpoints", "IPv4-mapped IPv6 address: write the IPv4 address")
		}
		if src.Is4() != dst.Is4() {
			return r, p.errAt(t, cols[2], "request endpoints", "tunnel endpoints differ in address family")
		}
		r.Src, r.Dst = src, dst
	} else if r.Mode == spd.ModeTunnel {
		return r, p.errAt(t, cols[2], "request endpoints", "expected tunnel endpoints A-B")
	}
	if len(parts) == 4 {
		lv, id, hasID := strings.Cut(parts[3], ":")
		switch lv {
		case "", "default":
			r.Level = spd.LevelDefault
		case "use":
			r.Level = spd.LevelUse
		case "require":
			r.Level = spd.LevelRequire
		case "unique":
			r.Level = spd.LevelUnique
		default:
			return r, p.errAt(t, cols[3], "request level", "expected default, use, require or unique[:id], got %s", safeQuote(parts[3]))
		}
		if hasID {
			if r.Level != spd.LevelUnique {
				return r, p.errAt(t, cols[3], "request level", "only unique takes an :id")
			}
			n, err := strconv.ParseUint(id, 10, 32)
			if err != nil || n == 0 || n > MaxManualReqID {
				return r, p.errAt(t, cols[3]+len(lv)+1, "request reqid", "expected a reqid 1-%d, got %s", MaxManualReqID, safeQuote(id))
			}
			r.ReqID = uint32(n)
		}
	}
	return r, nil
}

// MaxManualReqID is the largest reqid accepted in "unique:id", as in FreeBSD
// (IPSEC_MANUAL_REQID_MAX).
const MaxManualReqID = 0x3fff
