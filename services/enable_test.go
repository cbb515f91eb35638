package services

import (
	"context"
	"strings"
	"testing"
)

// TestEnableValues: an rcvar takes checkyesno's values in any case; any
// other value is FreeBSD's "WARNING: $foo_enable is not set properly"
// and fails the service visibly, rather than disabling it in silence.
func TestEnableValues(t *testing.T) {
	conf := "a_enable=\"MAYBE\"\nb_enable=\"yes\"\nc_enable=\"Off\"\nd_enable=\"TRUE\"\ne_enable=\"0\"\nf_enable=\"1\"\n"
	files := tree{"etc/rc.conf": conf}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		files["etc/rc.d/"+n] = svc(n, "", "name="+n+"\nrcvar="+n+"_enable\ntype=oneshot\ncommand=/bin/true\n")
	}
	m := newManager(t, writeRoot(t, files), nil)
	_ = m.Boot(context.Background())
	st := states(m)
	want := map[string]State{"a": StateFailed, "b": StateExited, "c": StateDisabled, "d": StateExited, "e": StateDisabled, "f": StateExited}
	for n, w := range want {
		if st[n].State != w {
			t.Errorf("%s: %s %q, want %s", n, st[n].State, st[n].Reason, w)
		}
	}
	if r := st["a"].Reason; !strings.Contains(r, `etc/rc.conf:1: WARNING: $a_enable is not set properly - see rc.conf(5) ("MAYBE")`) {
		t.Errorf("a's reason %q does not carry FreeBSD's warning with its place", r)
	}
}
