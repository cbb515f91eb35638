package setkey

import (
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse: the parser never panics; every error is a *ParseError with a
// position in the named file and no run of 12+ hex digits (key material);
// every accepted config formats (with keys) back to text that parses to the
// same operations, and the redacted Format shows no key. The seed corpus is
// in testdata/fuzz/FuzzParse plus the files and tables added here.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("testdata/example.conf"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"flush;", "spdflush;", "flush esp;",
		"add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc " + cbcKey + " -A hmac-sha1 " + sha1Key + ";",
		"add 2001:db8::1[4500] 2001:db8::2 esp-udp 0x1000 -m tunnel -r 8 -u 3 -f esn -lh 10 -ls 5 -E aes-gcm-16 " + gcmKey + ";",
		"spdadd 10.0.0.0/8[any] 10.0.0.0/8[80] tcp -P out ipsec esp/tunnel/1.1.1.1-2.2.2.2/unique:4 esp/transport//use;",
		"spddelete ::/0 ::/0 icmp6 135,0 -P in;",
		"delete 1.2.3.4 1.2.3.5 esp 300;",
		"add 1.2.3.4 1.2.3.5 esp 300 -E aes-cbc \"0123456789abcdef\" -A null;",
		"add 1.2.3.4[0011223344556677] 1.2.3.5 esp-udp 300;",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.conf", strings.NewReader(string(data)))
		if err != nil {
			if cfg != nil {
				t.Fatal("Config returned with an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if pe.File != "fuzz.conf" || pe.Line < 1 || pe.Col < 1 {
				t.Fatalf("bad position in %v", err)
			}
			if hasHexRun(err.Error(), 12) {
				t.Fatalf("error may leak key material: %v", err)
			}
			return
		}
		text := format(cfg, true)
		cfg2, err := Parse("round.conf", strings.NewReader(text))
		if err != nil {
			t.Fatalf("formatted config does not parse: %v\n%s", err, text)
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
				if len(k) >= 8 && strings.Contains(red, hex.EncodeToString(k)) {
					t.Fatalf("Format leaks a key:\n%s", red)
				}
			}
		}
		cfg.Zero()
	})
}
