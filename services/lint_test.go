package services

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUnknownVars: a variable that no service and not keeld uses is a
// warning with its place and a did-you-mean; everything the defaults,
// keeld's seed, the rcvars and the rc.d files use is not.
func TestUnknownVars(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/defaults/rc.conf": "pktgen_enable=\"NO\"\npktgen_rate=\"1000\"\n",
		"etc/rc.conf":          "pktgen_enabel=\"YES\"\npktgen_rate=\"5\"\nsyslogd_socket=\"/x\"\nfoo_flags=\"-v\"\nfrobnicate=1\n",
		"etc/rc.conf.d/foo":    "foo_extra=1\nfoo_enalbe=YES\n",
		"etc/rc.d/pktgen":      svc("pktgen", "", "name=pktgen\nrcvar=pktgen_enable\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/syslogd":     svc("syslogd", "", "name=syslogd\ntype=oneshot\ncommand=/bin/true\ncommand_args=\"${syslogd_socket}\"\n"),
		"etc/rc.d/foo":         svc("foo", "", "name=foo\nrcvar=foo_enable\ntype=oneshot\ncommand=/bin/true\ncommand_args=\"${foo_extra}\"\n"),
	})
	m := newManager(t, root, nil)
	got := m.Catalog().Warnings
	want := []string{
		"etc/rc.conf:1: pktgen_enabel: unknown variable, used by no service and not by keeld (did you mean pktgen_enable?)",
		"etc/rc.conf:5: frobnicate: unknown variable, used by no service and not by keeld",
		"etc/rc.conf.d/foo:2: foo_enalbe: unknown variable, used by no service and not by keeld (did you mean foo_enable?)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%q\nwant\n%q", got, want)
	}
}

// TestErrorsNameHostPaths: with a root directory, errors and warnings
// name the file under it that the operator has to edit, not the
// root-relative path.
func TestErrorsNameHostPaths(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.conf":     "a_enabel=YES\n",
		"etc/rc.d/a":      svc("a", "", "name=a\nrcvar=a_enable\ntype=oneshot\ncommand=/bin/true\nstart_timout=1s\n"),
		"etc/rc.d/b":      svc("b", "", "name=b\nrcvar=b_enable\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.conf.d/b": "b_enable=MAYBE\n",
	})
	c, err := LoadCatalog(os.DirFS(root), map[string]string{"keel_root": root})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a": filepath.Join(root, "etc/rc.d/a") + ":7:1: start_timout:",
		"b": filepath.Join(root, "etc/rc.conf.d/b") + ":1: WARNING: $b_enable",
	}
	for name, prefix := range want {
		i, _ := c.Lookup(name)
		if err := c.Defs[i].Err; err == nil || !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("%s: error %v, want it to start with %q", name, err, prefix)
		}
	}
	if len(c.Warnings) != 1 || !strings.HasPrefix(c.Warnings[0], filepath.Join(root, "etc/rc.conf")+":1: a_enabel:") {
		t.Errorf("warnings %q", c.Warnings)
	}
	_, err = LoadCatalog(os.DirFS(writeRoot(t, tree{"etc/rc.conf": "x=$(id)\n"})), map[string]string{"keel_root": "/srv/app"})
	if err == nil || !strings.HasPrefix(err.Error(), "/srv/app/etc/rc.conf:1:3:") {
		t.Errorf("rc.conf error %v does not name the host path", err)
	}
}
