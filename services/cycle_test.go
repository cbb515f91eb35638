package services

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCycleBootFollowsRcorder boots trees with dependency cycles and
// checks that keeld starts the services of each cycle in exactly the
// order FreeBSD rcorder prints them (the cycle broken at the REQUIRE
// line rcorder names) and blocks none of them. t4 is the cycle probe of
// testdata/freebsd-probes.txt in package rcorder (a copy of
// shared/reference/rcorder-behaviour.txt, FreeBSD 14 rcorder on probe
// trees): FreeBSD prints t4/d t4/c t4/b t4/a and names provision `a' in
// file t4/c. The second tree is the lock-out an operator hit: a stray
// REQUIRE: ipsec in cryptodev.
func TestCycleBootFollowsRcorder(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string // file: "PROVIDE|REQUIRE"
		want    []string          // start order of the cycle's members, as rcorder prints it
		problem string
		fail    string // a member whose start fails: the ones after it start all the same
	}{
		{"freebsd-t4", map[string]string{"a": "a|b", "b": "b|c", "c": "c|a", "d": "d|"},
			[]string{"c", "b", "a"}, "Circular dependency on provision `a'", ""},
		{"cryptodev-ipsec", map[string]string{"cryptodev": "cryptodev|ipsec", "ipsec": "ipsec|cryptodev", "NETWORKING": "NETWORKING|ipsec"},
			[]string{"ipsec", "cryptodev"}, "Circular dependency on provision `cryptodev'", ""},
		{"cryptodev-ipsec-failing", map[string]string{"cryptodev": "cryptodev|ipsec", "ipsec": "ipsec|cryptodev", "NETWORKING": "NETWORKING|ipsec"},
			[]string{"ipsec", "cryptodev"}, "Circular dependency on provision `cryptodev'", "ipsec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := tree{}
			logf := filepath.Join(t.TempDir(), "started")
			for name, h := range tt.headers {
				p, r, _ := strings.Cut(h, "|")
				exit := ""
				if name == tt.fail {
					exit = "; exit 1"
				}
				files["etc/rc.d/"+name] = svc(p, r, "name="+name+"\ntype=oneshot\ncommand=/bin/sh\ncommand_args=\"-c 'echo "+name+" >> "+logf+exit+"'\"\n")
			}
			m := newManager(t, writeRoot(t, files), nil)
			_ = m.Boot(context.Background())
			var problems string
			for _, p := range m.Catalog().Problems {
				problems += p.Text + "\n"
			}
			if !strings.Contains(problems, tt.problem) {
				t.Errorf("problems do not name the cycle's line (%q):\n%s", tt.problem, problems)
			}
			for _, s := range m.Status() {
				if want := StateExited; s.Name == tt.fail && s.State != StateFailed || s.Name != tt.fail && s.State != want {
					t.Errorf("%s: %s %q", s.Name, s.State, s.Reason)
				}
			}
			b, err := os.ReadFile(logf)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range strings.Fields(string(b)) {
				if slices.Contains(tt.want, n) {
					got = append(got, n)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("cycle members started in order %v, want rcorder's %v", got, tt.want)
			}
			var printed []string
			for _, i := range m.Catalog().Order {
				if n := m.Catalog().Defs[i].Name; slices.Contains(tt.want, n) {
					printed = append(printed, n)
				}
			}
			if !slices.Equal(printed, tt.want) {
				t.Errorf("rcorder order of the cycle %v, want %v", printed, tt.want)
			}
		})
	}
}
