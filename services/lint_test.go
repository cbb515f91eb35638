package services

import (
	"slices"
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
