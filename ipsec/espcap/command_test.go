package espcap

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keelinit/keel/ipsec/setkey"
)

// TestCommand runs "esp encrypt" then "esp decrypt" through cobra on a
// capture (IPv4, Ethernet) and checks the round trip, the report and the
// error paths.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	c := interopCases[0]
	plain := filepath.Join(dir, "plain.pcap")
	writePlain(t, plain, hostA, hostB)
	out := filepath.Join(dir, "out.conf")
	in := filepath.Join(dir, "in.conf")
	if err := os.WriteFile(out, []byte(c.config("out")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte(c.config("in")), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := NewCommand()
		var b bytes.Buffer
		cmd.SetOut(&b)
		cmd.SetErr(&b)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(context.Background())
		return b.String(), err
	}
	enc := filepath.Join(dir, "enc.pcap")
	o, err := run("encrypt", "-f", out, "-i", plain, "-o", enc)
	if err != nil {
		t.Fatalf("encrypt: %v\n%s", err, o)
	}
	if !strings.Contains(o, "forwarded 8") || !strings.Contains(o, "spi 0x00001001") || !strings.Contains(o, "provider=aesni") {
		t.Errorf("encrypt report:\n%s", o)
	}
	dec := filepath.Join(dir, "dec.pcap")
	o, err = run("decrypt", "-f", in, "-i", enc, "-o", dec)
	if err != nil {
		t.Fatalf("decrypt: %v\n%s", err, o)
	}
	got, want := readIPs(t, dec), readIPs(t, plain)
	if len(got) != len(want) {
		t.Fatalf("decrypted %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("packet %d differs after encrypt+decrypt", i)
		}
	}
	// A wrong HMAC key fails every ICV. A wrong cipher key passes the ICV
	// (encrypt-then-MAC) and decrypts to noise: almost always a padding
	// error, but a noise pad-length byte of 0 (p = 1/256 per packet, with
	// random CBC IVs) passes the padding check and fails later, so only
	// "every packet dropped, some for bad padding" is certain.
	for _, k := range []struct{ key, want string }{{keySHA1, "bad-icv=8"}, {keyCBC, "bad-pad="}} {
		bad := filepath.Join(dir, "bad.conf")
		os.WriteFile(bad, []byte(strings.Replace(c.config("in"), k.key, strings.Repeat("0", len(k.key)), 1)), 0o600)
		o, err = run("decrypt", "-f", bad, "-i", enc, "-o", filepath.Join(dir, "x.pcap"))
		var de *DropsError
		if !errors.As(err, &de) || de.Total != 8 || !strings.Contains(err.Error(), "--allow-drops") ||
			!strings.Contains(o, k.want) || !strings.Contains(o, "forwarded 0") || !strings.Contains(o, "dropped 8") {
			t.Errorf("wrong key: %v\n%s", err, o)
		}
		// --allow-drops accepts the drops: same report, exit 0.
		if o2, err := run("decrypt", "--allow-drops", "-f", bad, "-i", enc, "-o", filepath.Join(dir, "x.pcap")); err != nil || !strings.Contains(o2, "dropped 8") {
			t.Errorf("wrong key with --allow-drops: %v\n%s", err, o2)
		}
		if strings.Contains(o, keyCBC) || strings.Contains(o, keySHA1) {
			t.Error("report contains key material")
		}
	}
	// Errors: missing flag, bad config (position named), missing input.
	if _, err := run("encrypt", "-f", out, "-i", plain); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("missing -o: %v", err)
	}
	broken := filepath.Join(dir, "broken.conf")
	os.WriteFile(broken, []byte("add 192.0.2.1 192.0.2.2 esp 0x10 -E aes-gcm-16 0x00;\n"), 0o600)
	if _, err := run("encrypt", "-f", broken, "-i", plain, "-o", enc); !errors.Is(err, setkey.ErrSyntax) || !strings.Contains(err.Error(), "broken.conf:1:") {
		t.Errorf("broken config: %v", err)
	}
	if _, err := run("encrypt", "-f", out, "-i", filepath.Join(dir, "nope.pcap"), "-o", enc); err == nil {
		t.Error("missing input accepted")
	}
}
