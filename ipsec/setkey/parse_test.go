package setkey

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/spd"
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func ap(s string) netip.AddrPort {
	if strings.Contains(s, "]:") || strings.Count(s, ":") == 1 {
		return netip.MustParseAddrPort(s)
	}
	return netip.AddrPortFrom(netip.MustParseAddr(s), 0)
}

func a(s string) netip.Addr   { return netip.MustParseAddr(s) }
func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func pos(l, c int) Pos        { return Pos{File: "testdata/example.conf", Line: l, Col: c} }
func polPos(l int) string     { return "testdata/example.conf:" + strconv.Itoa(l) }

func TestParseExample(t *testing.T) {
	cfg, err := ParseFile("testdata/example.conf")
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Zero()
	k16 := mustHex("00112233445566778899aabbccddeeff")
	sha1k := mustHex("000102030405060708090a0b0c0d0e0f10111213")
	k32 := mustHex("000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f")
	want := []Op{
		{Kind: OpFlush, Pos: pos(4, 1)},
		{Kind: OpSPDFlush, Pos: pos(5, 1)},
		{Kind: OpAdd, Pos: pos(8, 1), SA: &SA{Src: ap("192.0.2.1"), Dst: ap("192.0.2.2"), Proto: ProtoESP, SPI: 0x1000, Mode: spd.ModeTunnel,
			ReplayWindow: 256, ReqID: 7, Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96},
			EncKey: k16, AuthKey: sha1k, Pos: pos(8, 1)}},
		{Kind: OpAdd, Pos: pos(11, 1), SA: &SA{Src: ap("192.0.2.2"), Dst: ap("192.0.2.1"), Proto: ProtoESP, SPI: 4097, Mode: spd.ModeTunnel,
			ReplayWindow: DefaultReplayWindow, Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA256_128},
			EncKey: []byte("0123456789abcdef0123456789abcdef"), AuthKey: k32,
			HardTime: time.Hour, SoftTime: 3000 * time.Second, HardBytes: 1e9, SoftBytes: 9e8, Pos: pos(11, 1)}},
		{Kind: OpAdd, Pos: pos(16, 1), SA: &SA{Src: ap("2001:db8::1"), Dst: ap("2001:db8::2"), Proto: ProtoESP, SPI: 0x2000, Mode: spd.ModeTransport,
			ReplayWindow: 0, ESN: true, Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128},
			EncKey: mustHex("000102030405060708090a0b0c0d0e0fcafebabe"), Pos: pos(16, 1)}},
		{Kind: OpAdd, Pos: pos(19, 1), SA: &SA{Src: ap("198.51.100.1:4501"), Dst: ap("198.51.100.2:4500"), Proto: ProtoESPUDP, SPI: 0x3000,
			ReplayWindow: DefaultReplayWindow, Alg: crypto.Algorithm{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256},
			EncKey: mustHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00000000"), Pos: pos(19, 1)}},
		{Kind: OpAdd, Pos: pos(22, 1), SA: &SA{Src: ap("192.0.2.1"), Dst: ap("192.0.2.3"), Proto: ProtoESP, SPI: 0x4000,
			ReplayWindow: DefaultReplayWindow, Alg: crypto.Algorithm{Cipher: crypto.CipherNull, Auth: crypto.AuthHMACSHA512_256},
			AuthKey: mustHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"), Pos: pos(22, 1)}},
		{Kind: OpSPDAdd, Pos: pos(25, 1), Policy: &spd.Policy{Dir: spd.DirOut, Sel: spd.Selector{Src: p("10.0.0.0/24"), Dst: p("10.0.1.0/24")}, Action: spd.IPsec,
			Requests: []spd.IPsecRequest{{Mode: spd.ModeTunnel, Src: a("192.0.2.1"), Dst: a("192.0.2.2"), Level: spd.LevelRequire}}, Pos: polPos(25)}},
		{Kind: OpSPDAdd, Pos: pos(27, 1), Policy: &spd.Policy{Dir: spd.DirIn, Sel: spd.Selector{Src: p("10.0.1.0/24"), Dst: p("10.0.0.0/24")}, Action: spd.IPsec,
			Requests: []spd.IPsecRequest{{Mode: spd.ModeTunnel, Src: a("192.0.2.2"), Dst: a("192.0.2.1"), Level: spd.LevelUnique, ReqID: 7}}, Pos: polPos(27)}},
		{Kind: OpSPDAdd, Pos: pos(28, 1), Policy: &spd.Policy{Dir: spd.DirOut, Sel: spd.Selector{Src: p("2001:db8::1/128"), Dst: p("2001:db8::2/128"), Proto: 6, DstPort: 22}, Action: spd.IPsec,
			Requests: []spd.IPsecRequest{{Mode: spd.ModeTransport, Level: spd.LevelUse}}, Pos: polPos(28)}},
		{Kind: OpSPDAdd, Pos: pos(29, 1), Policy: &spd.Policy{Dir: spd.DirOut, Sel: spd.Selector{Src: p("::/0"), Dst: p("::/0"), Proto: 58, SrcPort: 135}, Action: spd.None, Pos: polPos(29)}},
		{Kind: OpSPDAdd, Pos: pos(30, 1), Policy: &spd.Policy{Dir: spd.DirFwd, Sel: spd.Selector{Src: p("0.0.0.0/0"), Dst: p("0.0.0.0/0"), Proto: 50}, Action: spd.Discard, Pos: polPos(30)}},
		{Kind: OpDelete, Pos: pos(32, 1), SA: &SA{Src: ap("192.0.2.1"), Dst: ap("192.0.2.3"), Proto: ProtoESP, SPI: 0x4000, Pos: pos(32, 1)}},
		{Kind: OpSPDDelete, Pos: pos(33, 1), Policy: &spd.Policy{Dir: spd.DirOut, Sel: spd.Selector{Src: p("::/0"), Dst: p("::/0"), Proto: 58, SrcPort: 135}, Pos: polPos(33)}},
	}
	if len(cfg.Ops) != len(want) {
		t.Fatalf("got %d ops, want %d:\n%s", len(cfg.Ops), len(want), Format(cfg))
	}
	for i := range want {
		if !reflect.DeepEqual(cfg.Ops[i], want[i]) {
			t.Errorf("op %d:\n got  %+v %+v %+v\n want %+v %+v %+v", i, cfg.Ops[i], cfg.Ops[i].SA, cfg.Ops[i].Policy, want[i], want[i].SA, want[i].Policy)
		}
	}
	for _, op := range cfg.Ops {
		if op.SA != nil && op.Kind == OpAdd {
			if err := op.SA.SessionParams().CheckParams(); err != nil {
				t.Errorf("%v: %v", op.Pos, err)
			}
		}
	}
}

// parseOne parses src and returns its single op.
func parseOne(t *testing.T, src string) Op {
	t.Helper()
	cfg, err := Parse("t.conf", strings.NewReader(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	if len(cfg.Ops) != 1 {
		t.Fatalf("Parse(%q): %d ops", src, len(cfg.Ops))
	}
	return cfg.Ops[0]
}

const (
	cbcKey  = "0x00112233445566778899aabbccddeeff"
	sha1Key = "0x000102030405060708090a0b0c0d0e0f10111213"
	gcmKey  = "0x000102030405060708090a0b0c0d0e0fcafebabe"
)

func TestParseForms(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, op Op)
	}{
		{"BOM and CRLF", "\ufeff\r\nflush\r\n;", func(t *testing.T, op Op) {
			if op.Kind != OpFlush || op.Pos.Line != 2 || op.Pos.Col != 1 {
				t.Fatalf("%+v", op)
			}
		}},
		{"flush esp", "flush esp;", func(t *testing.T, op Op) {
			if op.Kind != OpFlush {
				t.Fatal(op.Kind)
			}
		}},
		{"multi-line with comments", "add # comment ; not a terminator\n 192.0.2.1\n\t192.0.2.2 esp 256 # spi\n -E aes-gcm-16 " + gcmKey + "\n;", func(t *testing.T, op Op) {
			if op.SA.SPI != 256 || op.SA.Alg.Cipher != crypto.CipherAESGCM || op.Pos.Line != 1 || op.Pos.Col != 1 {
				t.Fatalf("%+v", op.SA)
			}
		}},
		{"decimal and hex spi", "add 192.0.2.1 192.0.2.2 esp 0XFFFFFFFF -E aes-gcm-16 " + gcmKey + ";", func(t *testing.T, op Op) {
			if op.SA.SPI != 0xffffffff {
				t.Fatal(op.SA.SPI)
			}
		}},
		{"-6 flag", "add -6 2001:db8::1 2001:db8::2 esp 300 -E aes-gcm-16 " + gcmKey + ";", func(t *testing.T, op Op) {
			if !op.SA.Src.Addr().Is6() {
				t.Fatal(op.SA.Src)
			}
		}},
		{"separate -4 -n flags", "add -4 -n 192.0.2.1 192.0.2.2 esp 300 -E aes-gcm-16 " + gcmKey + ";", nil},
		{"options after algorithms", "add 192.0.2.1 192.0.2.2 esp 300 -E aes-gcm-16 " + gcmKey + " -m tunnel -r 512;", func(t *testing.T, op Op) {
			if op.SA.Mode != spd.ModeTunnel || op.SA.ReplayWindow != MaxReplayWindow {
				t.Fatalf("%+v", op.SA)
			}
		}},
		{"-A before -E", "add 192.0.2.1 192.0.2.2 esp 300 -A hmac-sha1 " + sha1Key + " -E aes-cbc " + cbcKey + ";", func(t *testing.T, op Op) {
			if op.SA.Alg != (crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96}) {
				t.Fatal(op.SA.Alg)
			}
		}},
		{"mode any explicit", "add 192.0.2.1 192.0.2.2 esp 300 -m any -E aes-gcm-16 " + gcmKey + ";", func(t *testing.T, op Op) {
			if op.SA.Mode != spd.ModeAny {
				t.Fatal(op.SA.Mode)
			}
		}},
		{"nocyclic-seq and esn", "add 192.0.2.1 192.0.2.2 esp 300 -f nocyclic-seq -f esn -E aes-gcm-16 " + gcmKey + ";", func(t *testing.T, op Op) {
			if !op.SA.ESN {
				t.Fatal("esn")
			}
		}},
		{"AEAD with -A null", "add 192.0.2.1 192.0.2.2 esp 300 -E aes-gcm-16 " + gcmKey + " -A null;", func(t *testing.T, op Op) {
			if op.SA.Alg.Auth != crypto.AuthNone || op.SA.AuthKey != nil {
				t.Fatal(op.SA.Alg)
			}
		}},
		{"null with empty key", `add 192.0.2.1 192.0.2.2 esp 300 -E null "" -A hmac-sha1 ` + sha1Key + ";", nil},
		{"esp-udp v6 ports", "add 2001:db8::1[1234] 2001:db8::2 esp-udp 300 -E aes-gcm-16 " + gcmKey + ";", func(t *testing.T, op Op) {
			if op.SA.Src.Port() != 1234 || op.SA.Dst.Port() != NATTPort {
				t.Fatal(op.SA.Src, op.SA.Dst)
			}
		}},
		{"netbsd auth alias", "add 192.0.2.1 192.0.2.2 esp 300 -E rijndael-cbc " + cbcKey + " -A hmac-sha384 0x" + strings.Repeat("ab", 48) + ";", func(t *testing.T, op Op) {
			if op.SA.Alg.Auth != crypto.AuthHMACSHA384_192 {
				t.Fatal(op.SA.Alg)
			}
		}},
		{"delete esp-udp", "delete 192.0.2.1 192.0.2.2[4600] esp-udp 0x1234;", func(t *testing.T, op Op) {
			if op.Kind != OpDelete || op.SA.Dst.Port() != 4600 || op.SA.Src.Port() != 4500 {
				t.Fatalf("%+v", op.SA)
			}
		}},
		{"spdadd host bits masked", "spdadd 10.0.0.1/8[80] 10.0.0.2 tcp -P out none;", func(t *testing.T, op Op) {
			want := spd.Selector{Src: p("10.0.0.0/8"), Dst: p("10.0.0.2/32"), Proto: 6, SrcPort: 80}
			if op.Policy.Sel != want {
				t.Fatal(op.Policy.Sel)
			}
		}},
		{"spdadd multiple requests and default level", "spdadd 10.0.0.0/8 10.0.0.0/8 udp -P in ipsec esp/transport/ esp/tunnel/192.0.2.1-192.0.2.2/default;", func(t *testing.T, op Op) {
			if len(op.Policy.Requests) != 2 || op.Policy.Requests[0].Level != spd.LevelDefault {
				t.Fatalf("%+v", op.Policy.Requests)
			}
		}},
		{"icmp type only", "spdadd 0.0.0.0/0 0.0.0.0/0 icmp 8 -P out none;", func(t *testing.T, op Op) {
			if op.Policy.Sel.SrcPort != 8 || op.Policy.Sel.DstPort != 0 {
				t.Fatal(op.Policy.Sel)
			}
		}},
		{"numeric proto", "spdadd 0.0.0.0/0 0.0.0.0/0 132 -P out none;", func(t *testing.T, op Op) {
			if op.Policy.Sel.Proto != 132 {
				t.Fatal(op.Policy.Sel)
			}
		}},
		{"unique without id", "spdadd 0.0.0.0/0 0.0.0.0/0 any -P out ipsec esp/transport//unique;", func(t *testing.T, op Op) {
			if op.Policy.Requests[0].Level != spd.LevelUnique || op.Policy.Requests[0].ReqID != 0 {
				t.Fatal(op.Policy.Requests)
			}
		}},
		{"spddelete with policy", "spddelete 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport//require;", func(t *testing.T, op Op) {
			if op.Kind != OpSPDDelete || op.Policy.Action != spd.Discard || op.Policy.Requests != nil {
				t.Fatalf("%+v", op.Policy)
			}
		}},
		{"lowercase hex key uppercase", "add 192.0.2.1 192.0.2.2 esp 300 -E aes-gcm-16 0X000102030405060708090A0B0C0D0E0FCAFEBABE;", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := parseOne(t, tc.src)
			if tc.check != nil {
				tc.check(t, op)
			}
		})
	}
}

// parseErrorSecret is a key of the error table parseErrorTests.
const parseErrorSecret = "0x5ec4e75ec4e75ec4e75ec4e75ec4e75e"

// parseErrorTests is one statement for every error path of the parser,
// with where the error is and what it says.
var parseErrorTests = func() []parseErrorTest {
	const secret = parseErrorSecret
	return []parseErrorTest{
		{"unknown command", "frobnicate;", 1, 1, "command", `expected a command (flush, spdflush, add, delete, spdadd, spddelete), got "frobnicate"`},
		{"unsupported command", "\n  dump;", 2, 3, "command", `"dump" is not supported`},
		{"stray semicolon", ";", 1, 1, "command", "got ';'"},
		{"missing semicolon at EOF", "flush", 1, 6, "flush", "expected ';', got end of file"},
		{"flush junk", "flush ah;", 1, 7, "flush", `expected ';', got "ah"`},
		{"unterminated string", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc \"abc\n;", 1, 40, "string", "unterminated quoted string"},
		{"control char", "flush;\x01", 1, 7, "", "unexpected control character 0x01"},
		{"parse error before lex error", "frobnicate \x01;", 1, 1, "command", `got "frobnicate"`},
		{"lex error inside statement", "flush;\nadd 1.2.3.4 \x7f", 2, 13, "", "unexpected control character 0x7f"},
		{"bad address", "add 1.2.3 1.2.3.5 esp 300;", 1, 5, "source address", `expected a numeric IPv4 or IPv6 address, got "1.2.3"`},
		{"hostname", "add 1.2.3.4 gw.example esp 300;", 1, 13, "destination address", "numeric"},
		{"zone", "add fe80::1%eth0 fe80::2 esp 300;", 1, 5, "source address", "numeric"},
		{"v4-mapped", "add ::ffff:1.2.3.4 1.2.3.5 esp 300;", 1, 5, "source address", "IPv4-mapped IPv6 address ::ffff:1.2.3.4: write the IPv4 address 1.2.3.4"},
		{"v4-mapped tunnel", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/tunnel/::ffff:1.2.3.4-::1/require;", 1, 58, "request endpoints", "IPv4-mapped"},
		{"family mismatch", "add 1.2.3.4 ::1 esp 300;", 1, 13, "destination address", "address family differs"},
		{"-6 with v4", "add -6 1.2.3.4 1.2.3.5 esp 300;", 1, 8, "source address", "conflicts with -4/-6"},
		{"-4 and -6", "add -46 1.2.3.4 1.2.3.5 esp 300;", 1, 5, "address family", "conflicting -4 and -6"},
		{"prefix on SA", "add 1.2.3.4/24 1.2.3.5 esp 300;", 1, 5, "source address", "no prefix length"},
		{"port on esp", "add 1.2.3.4 1.2.3.5[4500] esp 300;", 1, 21, "destination address port", "only valid for esp-udp"},
		{"bad port", "add 1.2.3.4[x] 1.2.3.5 esp-udp 300;", 1, 13, "source address port", `expected a port 0-65535 or any, got "x"`},
		{"port too big", "add 1.2.3.4[65536] 1.2.3.5 esp-udp 300;", 1, 13, "source address port", "65536"},
		{"esp-udp port any", "add 1.2.3.4 1.2.3.5[any] esp-udp 300;", 1, 21, "destination address port", "expected a UDP port 1-65535 (omit it for 4500)"},
		{"unclosed port", "add 1.2.3.4[45 1.2.3.5 esp-udp 300;", 1, 15, "source address", "expected ']'"},
		{"ah", "add 1.2.3.4 1.2.3.5 ah 300;", 1, 21, "protocol", "ah is not supported, expected esp or esp-udp"},
		{"bad proto", "add 1.2.3.4 1.2.3.5 gre 300;", 1, 21, "protocol", `expected esp or esp-udp, got "gre"`},
		{"spi 255", "add 1.2.3.4 1.2.3.5 esp 255 -E null;", 1, 25, "SPI", "SPI 255 is reserved"},
		{"spi 0", "add 1.2.3.4 1.2.3.5 esp 0x0;", 1, 25, "SPI", "SPI 0 is reserved"},
		{"spi overflow", "add 1.2.3.4 1.2.3.5 esp 0x100000000;", 1, 25, "SPI", "expected an SPI"},
		{"spi missing", "add 1.2.3.4 1.2.3.5 esp;", 1, 24, "SPI", "got ';'"},
		{"unknown option", "add 1.2.3.4 1.2.3.5 esp 300 -x;", 1, 29, "add", `expected an option`},
		{"duplicate option", "add 1.2.3.4 1.2.3.5 esp 300 -m tunnel -m transport;", 1, 39, "-m", "duplicate option -m"},
		{"bad mode", "add 1.2.3.4 1.2.3.5 esp 300 -m bogus;", 1, 32, "mode", `expected transport, tunnel or any, got a 5-character word (not shown)`},
		{"replay not number", "add 1.2.3.4 1.2.3.5 esp 300 -r many;", 1, 32, "replay window", "expected a window size in bytes"},
		{"replay too big", "add 1.2.3.4 1.2.3.5 esp 300 -r 513;", 1, 32, "replay window", "at most 512 bytes (4096 packets)"},
		{"reqid", "add 1.2.3.4 1.2.3.5 esp 300 -u -1;", 1, 32, "reqid", "expected a reqid"},
		{"bad flag", "add 1.2.3.4 1.2.3.5 esp 300 -f random-pad;", 1, 32, "flag", "random-pad is not supported"},
		{"lifetime", "add 1.2.3.4 1.2.3.5 esp 300 -lh 1h;", 1, 33, "lifetime", "expected a time in seconds"},
		{"soft > hard", "add 1.2.3.4 1.2.3.5 esp 300 -lh 10 -ls 20 -E aes-gcm-16 " + gcmKey + ";", 1, 99, "lifetime", "soft time lifetime (-ls 20) exceeds hard (-lh 10)"},
		{"soft bytes > hard", "add 1.2.3.4 1.2.3.5 esp 300 -bh 10 -bs 20 -E aes-gcm-16 " + gcmKey + ";", 1, 99, "lifetime", "soft byte lifetime"},
		{"no -E", "add 1.2.3.4 1.2.3.5 esp 300 -m tunnel;", 1, 38, "encryption algorithm", "expected -E"},
		{"unknown ealg", "add 1.2.3.4 1.2.3.5 esp 300 -E rot13 " + secret + ";", 1, 32, "encryption algorithm", `got a 5-character word (not shown)`},
		{"unsupported ealg", "add 1.2.3.4 1.2.3.5 esp 300 -E 3des-cbc " + secret + ";", 1, 32, "encryption algorithm", "3des-cbc is not supported"},
		{"missing key", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc -A hmac-sha1 " + sha1Key + ";", 1, 40, "encryption key", `expected a key ("ascii" or 0xHEX) after aes-cbc, got "-A"`},
		{"key without 0x", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc 5ec4e75ec4e75ec4e75ec4e75ec4e75e;", 1, 40, "encryption key", "the key at line 1, column 40 is neither \"ascii\" nor 0xHEX"},
		{"odd hex", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc 0x5ec4e75ec4e75ec4e75ec4e75ec4e75;", 1, 40, "encryption key", "the key at line 1, column 40 has an odd number of hex digits (31)"},
		{"non-hex", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc 0x5ec4e75ec4e75ec4e75ec4e75ec4e7zz;", 1, 72, "encryption key", "the key at line 1, column 40 has a non-hex character at column 72"},
		{"cbc key 17", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc \"0123456789abcdefX\" -A hmac-sha1 " + sha1Key + ";", 1, 40, "encryption key", "aes-cbc key must be 16, 24 or 32 bytes, got 17"},
		{"gcm without salt", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-gcm-16 " + secret + ";", 1, 43, "encryption key", "aes-gcm-16 key must be 20, 28 or 36 (key and 4-byte salt) bytes, got 16"},
		{"null with key", "add 1.2.3.4 1.2.3.5 esp 300 -E null " + secret + " -A hmac-sha1 " + sha1Key + ";", 1, 37, "encryption key", "null key must be 0 bytes, got 16"},
		{"cbc without -A", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc " + secret + ";", 1, 74, "authentication algorithm", "expected -A before ';' (aes-cbc needs an authentication algorithm)"},
		{"cbc with -A null", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc " + secret + " -A null;", 1, 78, "authentication algorithm", "expected a non-null authentication algorithm with -E aes-cbc"},
		{"null null", "add 1.2.3.4 1.2.3.5 esp 300 -E null -A null;", 1, 40, "authentication algorithm", "non-null"},
		{"gcm with -A", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-gcm-16 " + gcmKey + " -A hmac-sha1 " + sha1Key + ";", 1, 89, "authentication algorithm", "aes-gcm-16 is an AEAD and takes no -A"},
		{"sha1 key short", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc " + cbcKey + " -A hmac-sha1 " + secret + ";", 1, 88, "authentication key", "hmac-sha1 key must be 20 bytes, got 16"},
		{"unsupported aalg", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc " + cbcKey + " -A hmac-md5 " + secret + ";", 1, 78, "authentication algorithm", "hmac-md5 is not supported"},
		{"key as algorithm", "add 1.2.3.4 1.2.3.5 esp 300 -E " + secret + ";", 1, 32, "encryption algorithm", "got a 34-character word (not shown)"},
		{"quoted key as option", "add 1.2.3.4 1.2.3.5 esp 300 \"5ec4e75ec4e75ec4\";", 1, 29, "add", "got a quoted string"},
		{"missing final semicolon", "add 1.2.3.4 1.2.3.5 esp 300 -E aes-gcm-16 " + gcmKey, 1, 85, "add", "got end of file"},
		{"error on later line", "flush;\nspdflush;\n\nspdadd 10.0.0.0/33 10.0.0.0/8 any -P out none;", 4, 17, "source range prefix length", "expected a prefix length 0-32, got 33"},
		{"bad plen", "spdadd 10.0.0.0/x 10.0.0.0/8 any -P out none;", 1, 17, "source range prefix length", `got "x"`},
		{"v6 plen", "spdadd ::/129 ::/0 any -P out none;", 1, 11, "source range prefix length", "0-128, got 129"},
		{"spd family mismatch", "spdadd 10.0.0.0/8 ::/0 any -P out none;", 1, 19, "destination range", "address family differs"},
		{"bad upperspec", "spdadd 10.0.0.0/8 10.0.0.0/8 foo -P out none;", 1, 30, "upper-layer protocol", `got "foo"`},
		{"upperspec 255", "spdadd 10.0.0.0/8 10.0.0.0/8 255 -P out none;", 1, 30, "upper-layer protocol", `got "255"`},
		{"icmp with port", "spdadd 10.0.0.0/8[80] 10.0.0.0/8 icmp -P out none;", 1, 19, "port", "icmp selectors take no ports"},
		{"icmp bad type", "spdadd 10.0.0.0/8 10.0.0.0/8 icmp 300,0 -P out none;", 1, 35, "icmp type", `got "300,0"`},
		{"missing -P", "spdadd 10.0.0.0/8 10.0.0.0/8 any out none;", 1, 34, "policy", `expected -P, got "out"`},
		{"bad dir", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P sideways none;", 1, 37, "direction", `expected in, out or fwd, got "sideways"`},
		{"bad action", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out entrust;", 1, 41, "action", `expected discard, none or ipsec, got "entrust"`},
		{"ipsec without request", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec;", 1, 46, "request", "expected an IPsec request"},
		{"none with request", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out none esp/transport//require;", 1, 46, "policy", "expected ';'"},
		{"request ah", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec ah/transport//require;", 1, 47, "request protocol", "ah is not supported, expected esp"},
		{"request fields", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport;", 1, 47, "request", "expected protocol/mode/src-dst/level, got 2 fields"},
		{"request mode", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/beet//require;", 1, 51, "request mode", `expected transport or tunnel, got "beet"`},
		{"tunnel without endpoints", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/tunnel//require;", 1, 58, "request endpoints", "expected tunnel endpoints A-B"},
		{"tunnel bad endpoints", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/tunnel/1.2.3.4/require;", 1, 58, "request endpoints", "expected two numeric addresses A-B"},
		{"tunnel mixed family", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/tunnel/1.2.3.4-::1/require;", 1, 58, "request endpoints", "differ in address family"},
		{"transport endpoints", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport/1.2.3.4-1.2.3.5/require;", 1, 61, "request endpoints", "transport mode takes no endpoints"},
		{"bad level", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport//always;", 1, 62, "request level", `got "always"`},
		{"require with id", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport//require:5;", 1, 62, "request level", "only unique takes an :id"},
		{"unique id 0", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport//unique:0;", 1, 69, "request reqid", `expected a reqid 1-16383, got "0"`},
		{"unique id too big", "spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/transport//unique:16384;", 1, 69, "request reqid", "16384"},
		{"spddelete missing dir", "spddelete 10.0.0.0/8 10.0.0.0/8 any -P;", 1, 39, "direction", "got ';'"},
		{"delete extra", "delete 1.2.3.4 1.2.3.5 esp 300 -m tunnel;", 1, 32, "delete", `expected ';', got "-m"`},
	}
}()

type parseErrorTest struct {
	name      string
	src       string
	line, col int
	field     string
	msg       string
}

func TestParseErrors(t *testing.T) {
	const secret = parseErrorSecret
	for _, tc := range parseErrorTests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("t.conf", strings.NewReader(tc.src))
			if cfg != nil {
				t.Fatalf("got a Config with an error: %v", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Fatal("errors.Is(err, ErrSyntax) is false")
			}
			if pe.File != "t.conf" || pe.Line != tc.line || pe.Col != tc.col || pe.Field != tc.field || !strings.Contains(pe.Msg, tc.msg) {
				t.Fatalf("got  %s (field %q)\nwant t.conf:%d:%d: %s: ...%s...", err, pe.Field, tc.line, tc.col, tc.field, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("t.conf:%d:%d: ", tc.line, tc.col)) {
				t.Fatalf("Error() = %q lacks position prefix", err)
			}
			for _, k := range []string{secret[2:], "5ec4e75ec4e7", "0123456789abcdef", sha1Key[2:], cbcKey[2:], gcmKey[2:]} {
				if strings.Contains(err.Error(), k) {
					t.Fatalf("error leaks key material: %s", err)
				}
			}
		})
	}
}

// TestKeyLengths checks every algorithm against every key length 0..70.
func TestKeyLengths(t *testing.T) {
	enc := []struct {
		name  string
		valid map[int]int // key bytes -> KeyBits
	}{
		{"rijndael-cbc", map[int]int{16: 128, 24: 192, 32: 256}},
		{"aes-cbc", map[int]int{16: 128, 24: 192, 32: 256}},
		{"aes-gcm-16", map[int]int{20: 128, 28: 192, 36: 256}},
		{"chacha20-poly1305", map[int]int{36: 256}},
	}
	for _, e := range enc {
		for n := 1; n <= 70; n++ {
			src := "add 1.2.3.4 1.2.3.5 esp 300 -E " + e.name + " 0x" + strings.Repeat("a5", n)
			if !strings.Contains(e.name, "gcm") && !strings.Contains(e.name, "chacha") {
				src += " -A hmac-sha1 " + sha1Key
			}
			cfg, err := Parse("k.conf", strings.NewReader(src+";"))
			bits, ok := e.valid[n]
			if ok != (err == nil) {
				t.Errorf("%s with %d-byte key: err = %v, want valid=%v", e.name, n, err, ok)
				continue
			}
			if ok && cfg.Ops[0].SA.Alg.KeyBits != bits {
				t.Errorf("%s %d bytes: KeyBits %d, want %d", e.name, n, cfg.Ops[0].SA.Alg.KeyBits, bits)
			}
			if !ok && !strings.Contains(err.Error(), "key must be") {
				t.Errorf("%s %d bytes: %v", e.name, n, err)
			}
		}
	}
	auth := map[string]int{"hmac-sha1": 20, "hmac-sha2-256": 32, "hmac-sha256": 32, "hmac-sha2-384": 48, "hmac-sha384": 48, "hmac-sha2-512": 64, "hmac-sha512": 64}
	for name, want := range auth {
		for n := 1; n <= 70; n++ {
			src := "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc " + cbcKey + " -A " + name + " 0x" + strings.Repeat("5a", n) + ";"
			_, err := Parse("k.conf", strings.NewReader(src))
			if (n == want) != (err == nil) {
				t.Errorf("%s with %d-byte key: err = %v", name, n, err)
			}
		}
	}
}

// TestFormatRoundTrip: parse -> format with keys -> parse gives the same
// operations (positions aside), and Format/String never show keys.
func TestFormatRoundTrip(t *testing.T) {
	cfg, err := ParseFile("testdata/example.conf")
	if err != nil {
		t.Fatal(err)
	}
	text := format(cfg, true)
	cfg2, err := Parse("round.conf", strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !equalOps(cfg, cfg2) {
		t.Fatalf("round trip differs:\n%s\n---\n%s", text, format(cfg2, true))
	}
	red := Format(cfg)
	for _, op := range cfg.Ops {
		if op.SA == nil {
			continue
		}
		for _, k := range [][]byte{op.SA.EncKey, op.SA.AuthKey} {
			if len(k) == 0 {
				continue
			}
			for _, s := range []string{red, op.SA.String()} {
				if strings.Contains(s, hex.EncodeToString(k)) || strings.Contains(s, string(k)) {
					t.Fatalf("key leaked in %q", s)
				}
			}
		}
	}
	want := "add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -r 32 -u 7 -E rijndael-cbc [redacted 16 bytes] -A hmac-sha1 [redacted 20 bytes];"
	if !strings.Contains(red, want) {
		t.Errorf("Format output lacks %q:\n%s", want, red)
	}
}

func equalOps(a, b *Config) bool {
	if len(a.Ops) != len(b.Ops) {
		return false
	}
	for i := range a.Ops {
		x, y := a.Ops[i], b.Ops[i]
		if x.Kind != y.Kind || (x.SA == nil) != (y.SA == nil) || (x.Policy == nil) != (y.Policy == nil) {
			return false
		}
		if x.SA != nil {
			sx, sy := *x.SA, *y.SA
			sx.Pos, sy.Pos = Pos{}, Pos{}
			if !bytes.Equal(sx.EncKey, sy.EncKey) || !bytes.Equal(sx.AuthKey, sy.AuthKey) {
				return false
			}
			sx.EncKey, sy.EncKey, sx.AuthKey, sy.AuthKey = nil, nil, nil, nil
			if !reflect.DeepEqual(sx, sy) {
				return false
			}
		}
		if x.Policy != nil {
			px, py := *x.Policy, *y.Policy
			px.Pos, py.Pos = "", ""
			if !reflect.DeepEqual(px, py) {
				return false
			}
		}
	}
	return true
}

func TestZero(t *testing.T) {
	cfg := parseOne(t, "add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc "+cbcKey+" -A hmac-sha1 "+sha1Key+";")
	enc, auth := cfg.SA.EncKey, cfg.SA.AuthKey
	c := &Config{Ops: []Op{cfg}}
	c.Zero()
	if cfg.SA.EncKey != nil || cfg.SA.AuthKey != nil {
		t.Fatal("Zero kept key slices")
	}
	if !bytes.Equal(enc, make([]byte, len(enc))) || !bytes.Equal(auth, make([]byte, len(auth))) {
		t.Fatal("Zero did not wipe key bytes")
	}
	var nilSA *SA
	nilSA.Zero()
	(*Config)(nil).Zero()
}

func TestParseFileErrors(t *testing.T) {
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	big := bytes.Repeat([]byte("flush;\n"), MaxFileSize/7+1)
	_, err := Parse("big.conf", bytes.NewReader(big))
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "larger than") {
		t.Fatalf("oversized file: %v", err)
	}
}

// TestPrintingNeverShowsKeys prints SAs and configs with every common verb.
func TestPrintingNeverShowsKeys(t *testing.T) {
	cfg, err := ParseFile("testdata/example.conf")
	if err != nil {
		t.Fatal(err)
	}
	sa := cfg.Ops[2].SA
	keys := []string{"00112233445566778899aabbccddeeff", "000102030405060708090a0b0c0d0e0f10111213"}
	dec := fmt.Sprint(sa.EncKey) // "[0 17 34 ...]"
	for _, v := range []any{sa, *sa, cfg, *cfg, cfg.Ops[2], cfg.Ops} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%d", "%q"} {
			out := fmt.Sprintf(verb, v)
			for _, k := range append(keys, dec, strings.ToUpper(keys[0]), dec[1:len(dec)-1]) {
				if strings.Contains(out, k) {
					t.Fatalf("Sprintf(%q, %T) leaks key: %s", verb, v, out)
				}
			}
		}
	}
	if got := sa.String(); !strings.Contains(got, "[redacted 16 bytes]") || !strings.HasPrefix(got, "192.0.2.1 192.0.2.2 esp 0x1000") {
		t.Errorf("String() = %q", got)
	}
}
