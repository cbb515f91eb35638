package rcconf

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// freebsdStyleDefaults ends the way FreeBSD's /etc/defaults/rc.conf
// does (libexec/rc/rc.conf in the FreeBSD tree): rc_conf_files, the
// guarded definition of source_rc_confs, and the optional vendor.conf.
// The function's body here is a stand-in: Load never evaluates it.
const freebsdStyleDefaults = `#!/bin/sh
sshd_enable="NO"		# Enable sshd
sshd_flags=""
rc_conf_files="/etc/rc.conf /etc/rc.conf.local"

if [ -z "${source_rc_confs_defined}" ]; then
	source_rc_confs_defined=yes
	source_rc_confs() {
		local i sourced_files
		for i in ${rc_conf_files}; do
			case ${sourced_files} in
			*:$i:*) ;;
			*) sourced_files="${sourced_files}:$i:"; if [ -r $i ]; then . $i; fi ;;
			esac
		done
	}
fi

if [ -r /etc/defaults/vendor.conf ]; then
	. /etc/defaults/vendor.conf
fi
`

func TestLoadSourceRCConfs(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    map[string]string
		sources []string
		wantErr string
	}{
		{name: "freebsd-defaults", files: map[string]string{
			"etc/defaults/rc.conf":     freebsdStyleDefaults,
			"etc/defaults/vendor.conf": "sshd_flags=\"-vendor\"\n",
			"etc/rc.conf":              "sshd_enable=\"YES\"\n",
		}, want: map[string]string{"sshd_enable": "YES", "sshd_flags": "-vendor", "source_rc_confs_defined": "yes"},
			sources: []string{"etc/defaults/vendor.conf", "etc/defaults/rc.conf", "etc/rc.conf"}},
		{name: "rc_conf_files-honoured", files: map[string]string{
			"etc/defaults/rc.conf": "rc_conf_files=\"/etc/rc.conf /etc/site.conf\"\nx=default\n",
			"etc/rc.conf":          "x=rc\n",
			"etc/site.conf":        "x=\"${x}+site\"\n",
			"etc/rc.conf.local":    "x=not-listed\n",
		}, want: map[string]string{"x": "rc+site"}, sources: []string{"etc/defaults/rc.conf", "etc/rc.conf", "etc/site.conf"}},
		{name: "redefined-in-second-pass", files: map[string]string{
			"etc/defaults/rc.conf": "rc_conf_files=\"/etc/rc.conf\"\n",
			"etc/rc.conf":          "rc_conf_files=\"/etc/rc.conf /etc/extra.conf\"\nx=1\n",
			"etc/extra.conf":       "x=\"${x}2\"\n",
		}, want: map[string]string{"x": "12"}, sources: []string{"etc/defaults/rc.conf", "etc/rc.conf", "etc/extra.conf"}},
		{name: "each-file-once", files: map[string]string{
			"etc/defaults/rc.conf": "rc_conf_files=\"/etc/rc.conf /etc/rc.conf\"\n",
			"etc/rc.conf":          "x=\"${x}a\"\n",
		}, want: map[string]string{"x": "a"}, sources: []string{"etc/defaults/rc.conf", "etc/rc.conf"}},
		{name: "unset-means-freebsd-default", files: map[string]string{
			"etc/rc.conf":       "x=1\n",
			"etc/rc.conf.local": "x=\"${x}2\"\n",
		}, want: map[string]string{"x": "12"}, sources: []string{"etc/rc.conf", "etc/rc.conf.local"}},
		{name: "if-else", files: map[string]string{
			"etc/rc.conf": "a=1\nif [ \"$a\" = 2 ]; then b=two; elif test -n \"$a\"; then b=set; else b=none; fi\n",
		}, want: map[string]string{"b": "set"}},
		{name: "other-function", files: map[string]string{"etc/rc.conf": "x=1\nrm_all() { rm -rf /; }\n"}, wantErr: "etc/rc.conf:2:1: only variable assignments are allowed"},
		{name: "command-in-if", files: map[string]string{"etc/rc.conf": "if true; then x=1; fi\n"}, wantErr: "etc/rc.conf:1:1: only variable assignments are allowed: if condition runs \"true\""},
		{name: "subst-in-test", files: map[string]string{"etc/rc.conf": "if [ -n \"$(id)\" ]; then x=1; fi\n"}, wantErr: "etc/rc.conf:1:10: command substitution is not allowed"},
		{name: "missing-dot", files: map[string]string{"etc/rc.conf": ". /etc/nothere\n"}, wantErr: "etc/rc.conf:1:3: only variable assignments are allowed: . /etc/nothere: no such file"},
		{name: "command-in-then", files: map[string]string{"etc/rc.conf": "if [ -z \"$x\" ]; then reboot; fi\n"}, wantErr: "etc/rc.conf:1:22: only variable assignments are allowed: command \"reboot\""},
		{name: "sourcing-loop", files: map[string]string{"etc/rc.conf": ". /etc/rc.conf\n"}, wantErr: "nested more than 8 deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for p, s := range tt.files {
				fsys[p] = &fstest.MapFile{Data: []byte(s)}
			}
			ch, err := Load(fsys, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if !errors.Is(err, ErrStatement) && !errors.Is(err, ErrSubstitution) {
					t.Errorf("err %v is neither ErrStatement nor ErrSubstitution", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if g := ch.Global().Get(k); g != v {
					t.Errorf("%s = %q, want %q", k, g, v)
				}
			}
			if tt.sources != nil && !slices.Equal(ch.Sources, tt.sources) {
				t.Errorf("sources %v, want %v", ch.Sources, tt.sources)
			}
		})
	}
}

// FuzzLoad: the chain evaluator never panics, and every error names the
// file it is in.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{freebsdStyleDefaults, "if [ -r /etc/x ]; then . /etc/x; fi", ". /etc/rc.conf", "if [ a = a ]; then b=1; elif [ -z \"$q\" ]; then c=2; else d=3; fi", "if [ -z ]; then x=1; fi", "test -e /etc/rc.conf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		fsys := fstest.MapFS{"etc/rc.conf": &fstest.MapFile{Data: []byte(src)}, "etc/x": &fstest.MapFile{Data: []byte("y=1\n")}}
		if _, err := Load(fsys, nil); err != nil && !strings.HasPrefix(err.Error(), "etc/") {
			t.Fatalf("error without file name: %v", err)
		}
	})
}
