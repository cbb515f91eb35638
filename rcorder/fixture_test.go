package rcorder

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// loadFixture parses testdata/rc.d, the appliance tree written for Keel.
func loadFixture(t testing.TB) []Script {
	t.Helper()
	fsys := os.DirFS("testdata")
	names, err := fs.Glob(fsys, "rc.d/*")
	if err != nil {
		t.Fatal(err)
	}
	scripts, errs := Parse(fsys, names...)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return scripts
}

func TestFixtureTree(t *testing.T) {
	scripts := loadFixture(t)
	if len(scripts) < 100 {
		t.Fatalf("fixture has %d scripts, want at least 100", len(scripts))
	}
	r := Order(scripts, Filter{Skip: []string{"nostart", "firstboot"}})
	checkValid(t, r)
	if len(r.Problems) != 0 || r.ExitCode() != 0 {
		t.Fatalf("problems: %q", problemTexts(r))
	}
	pos := map[string]int{}
	for p, i := range r.Order {
		pos[path.Base(scripts[i].Path)] = p
	}
	// Boot-order facts an appliance relies on.
	before := [][2]string{
		{"kld", "kld_crypto"}, {"kld_crypto", "aesni"}, {"kld_crypto", "glxsb"},
		{"aesni", "crypto_select"}, {"cryptosoft", "crypto_select"}, {"qat", "cryptodev"},
		{"crypto_select", "ipsec"}, {"kld_ipsec", "ipsec"}, {"ipsec", "keel_esp"},
		{"ipsec", "mountcritremote"}, {"ipsec_policy", "ike"}, {"keel_esp", "ipsec_tunnels"},
		{"ike", "ipsec_tunnels"}, {"strongswan", "ipsec_tunnels"}, {"kld_if_wg", "netif"},
		{"netif", "NETWORKING"}, {"devd", "NETWORKING"}, {"NETWORKING", "DAEMON"},
		{"SERVERS", "DAEMON"}, {"DAEMON", "LOGIN"}, {"LOGIN", "sshd"}, {"ntpd", "LOGIN"},
		{"sendmail", "dma_flushq"}, {"postfix", "dma_flushq"}, {"cron", "securelevel"},
		{"jail", "securelevel"}, {"frr", "bgpd"}, {"zpool", "mountcritlocal"}, {"growfs", "root"},
		{"dumpon", "disks"}, {"ddb", "disks"},
	}
	for _, b := range before {
		if pos[b[0]] >= pos[b[1]] {
			t.Errorf("%s must start before %s", b[0], b[1])
		}
	}
	for _, skipped := range []string{"strongswan", "postfix", "ucarp", "growfs", "gptboot"} {
		for _, i := range r.Printed {
			if path.Base(scripts[i].Path) == skipped {
				t.Errorf("%s has a skipped keyword but was printed", skipped)
			}
		}
	}
	all := Order(scripts, Filter{})
	if !slices.Equal(all.Levels, r.Levels) {
		t.Error("-s changed the levels")
	}

	var got bytes.Buffer
	all.WriteLevels(&got)
	golden := "testdata/rc.d.levels.golden"
	if *update {
		os.WriteFile(golden, got.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("rcorder -p of the fixture differs from %s (run with -update after checking):\n%s", golden, got.String())
	}

	why, err := all.Explain("keel_esp")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "rc.d/keel_esp (level") || !strings.Contains(why, "waits for nothing") {
		t.Errorf("Explain(keel_esp):\n%s", why)
	}
}
