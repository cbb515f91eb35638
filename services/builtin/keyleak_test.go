package builtin

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/services"
)

// The appliance's keys (etc/ipsec.conf) of SA 0x1001 (AES-GCM, 20 bytes)
// and SA 0x1002 (AES-CBC, 16 bytes).
const (
	gcmHex1001 = "0x6b65656c2d64656d6f2d6b65792d30316b65656c"
	cbcHex1002 = "0x6b65656c2d64656d6f2d6b65792d3033"
)

// grams4 returns every 4-byte substring of the keys.
func grams4(keys ...string) []string {
	var out []string
	for _, k := range keys {
		for i := 0; i+4 <= len(k); i++ {
			out = append(out, k[i:i+4])
		}
	}
	return out
}

// safeBuffer is a strings.Builder safe for concurrent writers.
type safeBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func newSafeBuffer() *safeBuffer { return &safeBuffer{} }

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKeyNotInServiceOutputs: an ipsec.conf with a key typed the wrong
// way (without quotes, as in the report, in single quotes, ...) fails
// the start of ipsec, or its reload, with an error that names the key's
// line and column; the key shows in none of what keeld says about it:
// its log, the unit's Reason and log ring (GET /v1/services/ipsec, what
// read-only users see through keelctl status ipsec), the reload responses
// (POST /v1/reload and /v1/services/ipsec/reload), the service list and
// GET /v1/ipsec.
func TestKeyNotInServiceOutputs(t *testing.T) {
	const k20, k16 = "qzvxjwkqvxzqzjwkqzvx", "jwkqzvxqzxvjwqkz" // no 4 of these letters in a row appear in keeld's words
	grams := grams4(k20, k16)
	cases := []struct {
		name, old, new string
		pos            string
	}{
		{"unquoted 20-byte key", gcmHex1001, k20, "the key at line 10, column 16"},
		{"unquoted 16-byte key", cbcHex1002, k16, "the key at line 16, column 18"},
		{"single quotes", gcmHex1001, "'" + k20 + "'", "the key at line 10, column 16"},
		{"key where the algorithm goes", "aes-gcm-16 " + gcmHex1001, k20, "ipsec.conf:10:5: encryption algorithm"},
		{"key tail after a space", cbcHex1002, `"` + k16 + `" ` + k20, "ipsec.conf:16:37: add: expected an option"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, when := range []string{"boot", "reload"} {
				log := newSafeBuffer()
				b := newTestbedLog(t, "syslogd_enable=NO\npktgen_enable=NO\nkld_list=\"\"\n", 2*time.Millisecond, nil, log)
				good := string(b.root["etc/ipsec.conf"].Data)
				if !strings.Contains(good, c.old) {
					t.Fatalf("etc/ipsec.conf has no %s", c.old)
				}
				bad := strings.Replace(good, c.old, c.new, 1)
				var outs []string
				add := func(what string, v any) {
					j, _ := json.Marshal(v)
					outs = append(outs, fmt.Sprintf("%s: %s", what, j))
				}
				if when == "boot" {
					b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(bad)}
				}
				err := b.m.Boot(b.ctx)
				if (err == nil) != (when == "reload") {
					t.Fatalf("boot: %v", err)
				}
				add("boot error", fmt.Sprint(err))
				c0 := b.serve()
				var errs []string
				if when == "reload" {
					b.root["etc/ipsec.conf"] = &fstest.MapFile{Data: []byte(bad)}
					var res services.ReloadResult
					err := c0.Post(b.ctx, "/v1/reload", nil, &res)
					errs = append(errs, fmt.Sprint(err))
					add("POST /v1/reload", fmt.Sprint(err))
					add("reload result", res)
					var d services.Detail
					err = c0.Post(b.ctx, "/v1/services/ipsec/reload", nil, &d)
					errs = append(errs, fmt.Sprint(err))
					add("POST /v1/services/ipsec/reload", fmt.Sprint(err))
				}
				var d services.Detail
				if err := c0.Get(b.ctx, "/v1/services/ipsec?lines=200", nil, &d); err != nil {
					t.Fatal(err)
				}
				add("GET /v1/services/ipsec", d)
				var all []services.Status
				if err := c0.Get(b.ctx, "/v1/services", nil, &all); err != nil {
					t.Fatal(err)
				}
				add("GET /v1/services", all)
				var v IPsec
				if err := c0.Get(b.ctx, "/v1/ipsec", nil, &v); err != nil {
					t.Fatal(err)
				}
				add("GET /v1/ipsec", v)
				b.m.Shutdown(b.ctx)
				outs = append(outs, "keeld log: "+log.String())
				// The errors say where the key is.
				if when == "boot" {
					errs = append(errs, d.Reason)
					if d.State != services.StateFailed {
						t.Errorf("%s: ipsec %s", when, d.State)
					}
				}
				for _, e := range errs {
					if !strings.Contains(e, c.pos) {
						t.Errorf("%s: error %q does not name %q", when, e, c.pos)
					}
				}
				if !strings.Contains(log.String(), c.pos) {
					t.Errorf("%s: keeld's log does not name %q", when, c.pos)
				}
				for _, o := range outs {
					for _, g := range grams {
						if strings.Contains(o, g) {
							t.Fatalf("%s: key text %q in %s", when, g, o)
						}
					}
				}
			}
		})
	}
}
