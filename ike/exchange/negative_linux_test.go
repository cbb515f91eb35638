package exchange

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/ike/wire"
)

// TestCharonNegative: each refusal is a clear error on Keel's side, the
// notification charon sent, and no CHILD_SA on charon's.
func TestCharonNegative(t *testing.T) {
	requireTool(t, charonBin, "swanctl", "nsenter", "unshare", "ip")
	tests := []struct {
		name   string
		ike    string // charon's IKE proposals
		edit   func(*Config)
		notify wire.NotifyType
		ikeUp  bool // charon keeps the IKE SA (only the CHILD_SA failed)
	}{
		{"no common IKE proposal", "aes128-sha256-modp3072", nil, wire.NO_PROPOSAL_CHOSEN, false},
		{"no common ESP proposal", "aes256gcm16-prfsha256-x25519", func(c *Config) {
			c.ESP = []wire.Proposal{{Transforms: []wire.Transform{{Type: wire.TransformENCR, ID: wire.ENCR_CHACHA20_POLY1305}, {Type: wire.TransformESN, ID: wire.ESN_NO}}}}
		}, wire.NO_PROPOSAL_CHOSEN, true},
		{"unacceptable traffic selectors", "aes256gcm16-prfsha256-x25519", func(c *Config) {
			c.TSr = []wire.Selector{prefixSelector("10.55.0.0/16")}
		}, wire.TS_UNACCEPTABLE, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetnsPair(t)
			ch := startCharon(t, ns.c, charonConf(tc.ike, "aes256gcm16", testPSK, "yes"))
			c500, c4500 := listenPair(t, ns.k, netip.MustParseAddr("10.97.0.1"))
			cfg := testConfig(testPSK)
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			_, err := dialTest(t, cfg, c500, c4500, charonRetransmit, nil)
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Notify != tc.notify || pe.IKEEstablished != tc.ikeUp {
				t.Fatalf("Dial: %v, want %v from the peer (IKE SA up: %v)", err, tc.notify, tc.ikeUp)
			}
			if !strings.Contains(err.Error(), tc.notify.String()) {
				t.Fatalf("error %q does not name %v", err, tc.notify)
			}
			out, _ := ch.swanctl("--list-sas")
			if strings.Contains(out, "INSTALLED") {
				t.Fatalf("charon installed a CHILD_SA:\n%s", out)
			}
			if !tc.ikeUp && strings.Contains(out, "ESTABLISHED") {
				t.Fatalf("charon has an IKE SA:\n%s", out)
			}
			// When only the CHILD_SA failed, Keel deletes the IKE SA it will
			// not use: charon's goes away too.
			deadline := time.Now().Add(10 * time.Second)
			for strings.Contains(out, "ESTABLISHED") {
				if time.Now().After(deadline) {
					t.Fatalf("charon keeps the IKE SA Keel deleted:\n%s", out)
				}
				time.Sleep(100 * time.Millisecond)
				out, _ = ch.swanctl("--list-sas")
			}
		})
	}
}
