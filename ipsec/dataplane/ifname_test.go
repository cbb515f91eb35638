package dataplane

import (
	"errors"
	"strings"
	"testing"
)

// TestConfigRejectsBadInterfaceNames checks ipsec_tun against the rules of
// Linux's dev_valid_name, which the kernel would otherwise enforce late
// (or, for an embedded NUL, silently truncate).
func TestConfigRejectsBadInterfaceNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"keel0", true},
		{"ipsec-tun_1.v4", true},
		{"abcdefghijklmno", true}, // 15 bytes
		{"abcdefghijklmnop", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a:1", false},
		{"a\x00b", false},
		{"a b", false},
		{"a\nb", false},
		{"a\vb", false},
	} {
		rc := map[string]string{"ipsec_tun": tc.name, "ipsec_local": "10.99.0.1", "ipsec_peer": "10.99.0.2"}
		_, err := ConfigFromRC(func(k string) string { return rc[k] })
		if tc.ok && err != nil {
			t.Errorf("%q: unexpected error %v", tc.name, err)
		}
		if !tc.ok {
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ipsec_tun") {
				t.Errorf("%q: got %v, want an ErrConfig naming ipsec_tun", tc.name, err)
			}
		}
	}
}
