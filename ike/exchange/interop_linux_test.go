package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/ike/wire"
	"github.com/keelinit/keel/ipsec"
)

const testPSK = "keel-charon-interop-psk-0123456789"

func charonConf(ikeProposals, espProposals, psk, encap string) string {
	return fmt.Sprintf(`connections {
	keel {
		version = 2
		local_addrs = 10.97.0.2
		remote_addrs = 10.97.0.1
		proposals = %s
		encap = %s
		mobike = no
		local {
			auth = psk
			id = charon.example
		}
		remote {
			auth = psk
			id = keel.example
		}
		children {
			net {
				local_ts = 10.96.2.0/24
				remote_ts = 10.96.1.0/24
				esp_proposals = %s
				mode = tunnel
			}
		}
	}
}
secrets {
	ike-keel {
		id-keel = keel.example
		id-charon = charon.example
		secret = "%s"
	}
}
`, ikeProposals, encap, espProposals, psk)
}

func prefixSelector(s string) wire.Selector {
	p := netip.MustParsePrefix(s)
	start := p.Masked().Addr()
	end := start.As4()
	for i := p.Bits(); i < 32; i++ {
		end[i/8] |= 0x80 >> (i % 8)
	}
	return wire.Selector{StartAddr: start, EndAddr: netip.AddrFrom4(end), EndPort: 0xffff}
}

func testConfig(psk string) Config {
	return Config{
		Local:    netip.MustParseAddrPort("10.97.0.1:500"),
		Remote:   netip.MustParseAddrPort("10.97.0.2:500"),
		LocalID:  Identity{wire.ID_FQDN, []byte("keel.example")},
		RemoteID: Identity{wire.ID_FQDN, []byte("charon.example")},
		PSK:      []byte(psk),
		TSi:      []wire.Selector{prefixSelector("10.96.1.0/24")},
		TSr:      []wire.Selector{prefixSelector("10.96.0.0/16")},
	}
}

// TestCharonPSKInitiator: Keel initiates IKE_SA_INIT and IKE_AUTH with a
// PSK to strongSwan 5.9.8 charon (kernel-libipsec), for each DH group and
// IKE/ESP suite; charon's swanctl --list-sas must show the IKE SA
// ESTABLISHED and the CHILD_SA INSTALLED with Keel's SPIs, and the
// narrowed selectors must be charon's.
func TestCharonPSKInitiator(t *testing.T) {
	requireTool(t, charonBin, "swanctl", "nsenter", "unshare", "ip")
	tests := []struct {
		name       string
		ike, esp   string // charon's proposals
		ikeOffer   []wire.Proposal
		espOffer   []wire.Proposal
		encap      string // charon's encap
		forceEncap bool   // Keel's
	}{
		{name: "x25519-aesgcm256", ike: "aes256gcm16-prfsha256-x25519", esp: "aes256gcm16", encap: "yes"},
		{name: "ecp256-aesgcm128", ike: "aes128gcm16-prfsha384-ecp256", esp: "aes128gcm16", encap: "no", forceEncap: true,
			ikeOffer: []wire.Proposal{{Transforms: []wire.Transform{
				wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, 128),
				{Type: wire.TransformPRF, ID: wire.PRF_HMAC_SHA2_384},
				{Type: wire.TransformDH, ID: wire.DH_X25519}, {Type: wire.TransformDH, ID: wire.DH_ECP256}}}}},
		{name: "modp2048-aescbc-sha256", ike: "aes256-sha256-prfsha512-modp2048", esp: "aes128-sha256", encap: "yes",
			ikeOffer: []wire.Proposal{{Transforms: []wire.Transform{
				wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_CBC, 256),
				{Type: wire.TransformPRF, ID: wire.PRF_HMAC_SHA2_512},
				{Type: wire.TransformINTEG, ID: wire.AUTH_HMAC_SHA2_256_128},
				{Type: wire.TransformDH, ID: wire.DH_MODP2048}}}},
			espOffer: []wire.Proposal{{Transforms: []wire.Transform{
				wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_CBC, 128),
				{Type: wire.TransformINTEG, ID: wire.AUTH_HMAC_SHA2_256_128},
				{Type: wire.TransformESN, ID: wire.ESN_NO}}}}},
		{name: "chacha20poly1305", ike: "chacha20poly1305-prfsha256-x25519", esp: "chacha20poly1305", encap: "yes",
			ikeOffer: []wire.Proposal{{Transforms: []wire.Transform{
				{Type: wire.TransformENCR, ID: wire.ENCR_CHACHA20_POLY1305},
				{Type: wire.TransformPRF, ID: wire.PRF_HMAC_SHA2_256},
				{Type: wire.TransformDH, ID: wire.DH_X25519}}}},
			espOffer: []wire.Proposal{{Transforms: []wire.Transform{
				{Type: wire.TransformENCR, ID: wire.ENCR_CHACHA20_POLY1305},
				{Type: wire.TransformESN, ID: wire.ESN_NO}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetnsPair(t)
			ch := startCharon(t, ns.c, charonConf(tc.ike, tc.esp, testPSK, tc.encap))
			c500, c4500 := listenPair(t, ns.k, netip.MustParseAddr("10.97.0.1"))
			cfg := testConfig(testPSK)
			cfg.IKE, cfg.ESP, cfg.ForceEncap = tc.ikeOffer, tc.espOffer, tc.forceEncap
			var cap capture
			in, err := dialTest(t, cfg, c500, c4500, charonRetransmit, cap.observe)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			ike, child := in.Result()
			defer ike.Zero()
			defer child.Zero()
			t.Logf("%v\n%v", ike, child)
			if !ike.Encap || ike.Remote.Port() != NATTPort || child.Remote.Port() != NATTPort {
				t.Fatalf("no float to 4500: %v", ike)
			}
			out := ch.waitSAs("ESTABLISHED", "INSTALLED",
				ike.SPIi.String()+"_i", ike.SPIr.String()+"_r", "TUNNEL-in-UDP",
				fmt.Sprintf("in  %08x", child.OutSPI), fmt.Sprintf("out %08x", child.InSPI))
			t.Logf("charon: swanctl --list-sas:\n%s", out)
			if !strings.Contains(out, "10.96.2.0/24") || !strings.Contains(out, "10.96.1.0/24") {
				t.Fatalf("charon's CHILD_SA selectors are not 10.96.2.0/24 === 10.96.1.0/24:\n%s", out)
			}
			// Keel proposed TSr 10.96.0.0/16; charon narrowed it to its 10.96.2.0/24.
			if len(child.RemoteTS) != 1 || child.RemoteTS[0] != prefixSelector("10.96.2.0/24") {
				t.Fatalf("narrowed TSr %v, want 10.96.2.0/24", child.RemoteTS)
			}
			if strings.Contains(fmt.Sprintf("%v %+v %#v %v", ike, ike, ike, child), fmt.Sprintf("%x", ike.Keys.SKd[:6])) {
				t.Fatal("SA String shows key material")
			}
			writeCapture(t, tc.name, &cap, in)
			pingThroughEngine(t, ns, ch, child, c4500)
		})
	}
}

// pingThroughEngine installs child in a Keel engine through Engine.Apply
// and pings from charon's protected address 10.96.2.1 to 10.96.1.1 on
// Keel's side: charon's libipsec encrypts, the engine decrypts and
// encrypts the reply, and charon's counters show both directions.
func pingThroughEngine(t *testing.T, ns *netnsPair, ch *charon, child *ChildSA, c4500 *net.UDPConn) {
	t.Helper()
	eng := installChild(t, child)
	echo := startESPEcho(t, c4500, eng, child.Local)
	pingFromCharon(t, ns, ch, echo)
}

// installChild installs child in a new Keel engine through Engine.Apply.
func installChild(t *testing.T, child *ChildSA) *ipsec.Engine {
	t.Helper()
	var prov crypto.Provider = cryptosoft.New()
	if aesni.Supported() {
		prov = aesni.New()
	}
	eng := ipsec.NewEngineWithProvider(prov, ipsec.Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		eng.Close(ctx)
	})
	cfg, err := child.Config(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Apply(context.Background(), cfg); err != nil {
		t.Fatalf("installing the CHILD_SA: %v", err)
	}
	if n := len(eng.SAs()); n != 2 {
		t.Fatalf("engine has %d SAs, want 2", n)
	}
	return eng
}

// pingFromCharon pings 10.96.1.1 from charon's 10.96.2.1 and waits for
// charon's CHILD_SA counters to show the three packets each way.
func pingFromCharon(t *testing.T, ns *netnsPair, ch *charon, echo *espEcho) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns.c, "ping", "-c", "3", "-i", "0.2", "-w", "10", "-I", "10.96.2.1", "10.96.1.1").CombinedOutput()
	if err != nil {
		t.Fatalf("ping through the tunnel: %v (engine replies %d, drops %d, counters %+v)\n%s", err, echo.replies.Load(), echo.drops.Load(), echo.eng.Counters(), out)
	}
	sas := ch.waitSAs(" 3 packets")
	t.Logf("after ping, charon:\n%s", sas)
}

// TestCharonWrongPSK: with a PSK charon does not share, charon refuses
// IKE_AUTH with AUTHENTICATION_FAILED and no SA is up on its side.
func TestCharonWrongPSK(t *testing.T) {
	requireTool(t, charonBin, "swanctl", "nsenter", "unshare", "ip")
	ns := newNetnsPair(t)
	ch := startCharon(t, ns.c, charonConf("aes256gcm16-prfsha256-x25519", "aes256gcm16", testPSK, "yes"))
	c500, c4500 := listenPair(t, ns.k, netip.MustParseAddr("10.97.0.1"))
	_, err := dialTest(t, testConfig("not-the-psk"), c500, c4500, charonRetransmit, nil)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Notify != wire.AUTHENTICATION_FAILED {
		t.Fatalf("Dial: %v, want the peer's AUTHENTICATION_FAILED", err)
	}
	if out, _ := ch.swanctl("--list-sas"); strings.Contains(out, "ESTABLISHED") {
		t.Fatalf("charon has an SA after a wrong PSK:\n%s", out)
	}
}

// writeCapture stores the captured charon messages as seeds of the wire
// fuzzers when KEEL_IKE_WRITE_SEEDS=1: each message as it was on the wire,
// and the IKE_AUTH response with its SK body replaced by its plaintext.
func writeCapture(t *testing.T, name string, c *capture, in *Initiator) {
	ike, _ := in.Result()
	writeSeeds(t, "charon-5.9.8-"+name, "response", c, ike)
}

// writeSeeds writes the messages of c received from charon (requests or
// responses, per kind) when KEEL_IKE_WRITE_SEEDS=1, with the IKE_AUTH
// message also in a form whose SK body is its plaintext, opened with ike.
func writeSeeds(t *testing.T, prefix, kind string, c *capture, ike *IKESA) {
	if os.Getenv("KEEL_IKE_WRITE_SEEDS") != "1" {
		return
	}
	dir := filepath.Join("..", "wire", "testdata", "fuzz", "FuzzDecode")
	put := func(n string, b []byte) {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, n), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range c.msgs {
		if m.out {
			continue
		}
		h, _, err := wire.DecodeHeader(m.b)
		if err != nil {
			t.Fatalf("captured message %d: %v", i, err)
		}
		base := fmt.Sprintf("%s-%s-%s", prefix, strings.ToLower(strings.ReplaceAll(h.Exchange.String(), "_", "-")), kind)
		put(base, m.b)
		if h.Exchange != wire.IKE_AUTH {
			continue
		}
		dec, err := wire.Decode(m.b)
		if err != nil {
			t.Fatal(err)
		}
		opened, err := ike.In.OpenMessage(m.b)
		if err != nil {
			t.Fatalf("re-opening the captured IKE_AUTH message: %v", err)
		}
		first, pt, err := wire.EncodePayloads(opened.Payloads)
		if err != nil {
			t.Fatal(err)
		}
		dec.Payloads = []wire.Payload{&wire.Encrypted{Next: first, Body: pt}}
		b, err := dec.Encode()
		if err != nil {
			t.Fatal(err)
		}
		put(base+"-plaintext", b)
	}
}
