package etc

import (
	"io/fs"
	"slices"
	"testing"
)

func TestRootLayout(t *testing.T) {
	r := Root()
	for _, p := range []string{"etc/rc.conf", "etc/defaults/rc.conf", "etc/ipsec.conf", "etc/rc.d/kld"} {
		if _, err := fs.ReadFile(r, p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	ents, err := fs.ReadDir(r, "etc/rc.d")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	for _, want := range []string{"cryptodev", "ipsec", "kld", "pktgen", "syslogd"} {
		if !slices.Contains(names, want) {
			t.Errorf("rc.d lacks %s: %v", want, names)
		}
	}
	top, err := fs.ReadDir(r, ".")
	if err != nil || len(top) != 1 || top[0].Name() != "etc" || !top[0].IsDir() {
		t.Errorf("top = %v, %v", top, err)
	}
	if _, err := r.Open("usr/bin"); err == nil {
		t.Error("opened a path outside etc/")
	}
}
