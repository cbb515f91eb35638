package rcconf

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestEval(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		want    map[string]string
		wantErr error
		errPos  string
	}{
		{name: "plain", src: "a=1\nb=two\n", want: map[string]string{"a": "1", "b": "two"}},
		{name: "quotes", src: `a="x y" b='$z' c=x\ y`, want: map[string]string{"a": "x y", "b": "$z", "c": "x y"}},
		{name: "ref", src: "a=1\nb=\"${a}2\"\n", want: map[string]string{"b": "12"}},
		{name: "default", src: "b=${unset:-dflt}\nc=${a:-no}", want: map[string]string{"b": "dflt", "c": "base"}},
		{name: "assign-default", src: "b=${n:=set}\n", want: map[string]string{"b": "set", "n": "set"}},
		{name: "comments", src: "# hi\n\na=1 # trailing\n", want: map[string]string{"a": "1"}},
		{name: "arith", src: "a=$((2+3))", want: map[string]string{"a": "5"}},
		{name: "no-env-leak", src: "h=${HOME}", want: map[string]string{"h": ""}},
		{name: "cmdsubst", src: "a=1\nb=$(rm -rf /)\n", wantErr: ErrSubstitution, errPos: "f:2:3"},
		{name: "backtick", src: "b=`id`", wantErr: ErrSubstitution, errPos: "f:1:3"},
		{name: "nested-cmdsubst", src: "b=${x:-$(id)}", wantErr: ErrSubstitution, errPos: "f:1:8"},
		{name: "command", src: "a=1\n  echo hi\n", wantErr: ErrStatement, errPos: "f:2:3"},
		{name: "assign-then-command", src: "a=1 true", wantErr: ErrStatement, errPos: "f:1:5"},
		{name: "if", src: "if true; then a=1; fi", wantErr: ErrStatement, errPos: "f:1:1"},
		{name: "func", src: "f() { a=1; }", wantErr: ErrStatement, errPos: "f:1:1"},
		{name: "redirect", src: "a=1 >/tmp/x", wantErr: ErrStatement, errPos: "f:1:1"},
		{name: "pipeline", src: "a=1 | b=2", wantErr: ErrStatement, errPos: "f:1:1"},
		{name: "syntax", src: "a=\"unterminated\n", wantErr: ErrSyntax, errPos: "f:1:3"},
	}
	base := New(map[string]string{"a": "base"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := base.Eval("f", []byte(tt.src))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), tt.errPos+":") {
					t.Fatalf("err %q does not start with %q", err, tt.errPos)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if g := got.Get(k); g != v {
					t.Errorf("%s = %q, want %q", k, g, v)
				}
			}
			if base.Get("a") != "base" || len(base.vars) != 1 {
				t.Errorf("receiver modified: %v", base.Vars())
			}
		})
	}
}

func TestCheckYesNo(t *testing.T) {
	for v, want := range map[string]bool{"YES": true, "yes": true, "True": true, "on": true, "1": true, " Yes ": true,
		"NO": false, "": false, "0": false, "y": false, "enable": false} {
		if got := CheckYesNo(v); got != want {
			t.Errorf("CheckYesNo(%q) = %v", v, got)
		}
	}
}

func TestChainLayering(t *testing.T) {
	fsys := fstest.MapFS{
		"etc/defaults/rc.conf": {Data: []byte("sshd_enable=NO\nsshd_flags=\"-p ${sshd_port:-22}\"\nlog=${keel_root}/log\nx=default\n")},
		"etc/rc.conf":          {Data: []byte("sshd_enable=YES\nx=\"${x}+rc\"\n")},
		"etc/rc.conf.local":    {Data: []byte("x=\"${x}+local\"\n")},
		"etc/rc.conf.d/sshd":   {Data: []byte("sshd_flags=\"${sshd_flags} -v\"\n")},
	}
	ch, err := Load(fsys, map[string]string{"keel_root": "/r"})
	if err != nil {
		t.Fatal(err)
	}
	g := ch.Global()
	if !g.Bool("sshd_enable") || g.Get("x") != "default+rc+local" || g.Get("log") != "/r/log" {
		t.Fatalf("global: %v", g.Vars())
	}
	if v, _ := g.Lookup("x"); v.File != "etc/rc.conf.local" || v.Line != 1 {
		t.Errorf("origin = %+v", v)
	}
	s, err := ch.ForService("sshd")
	if err != nil {
		t.Fatal(err)
	}
	if s.Get("sshd_flags") != "-p 22 -v" {
		t.Errorf("sshd_flags = %q", s.Get("sshd_flags"))
	}
	if g.Get("sshd_flags") != "-p 22" {
		t.Errorf("global modified: %q", g.Get("sshd_flags"))
	}
	o, err := ch.ForService("other")
	if err != nil || o != g {
		t.Errorf("other: %v", err)
	}
	if len(ch.Sources) != 3 {
		t.Errorf("sources %v", ch.Sources)
	}
	fsys["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte("ok=1\nx=$(date)\n")}
	if _, err := Load(fsys, nil); err == nil || !strings.HasPrefix(err.Error(), "etc/rc.conf.local:2:3:") {
		t.Errorf("err = %v", err)
	}
}

func FuzzEval(f *testing.F) {
	for _, s := range []string{"a=1", "a=${b:-c}", "a=$(x)", "if x; then y; fi", "a='q' b=\"${a}\"", "a=$((1/0))", "a=${b:?err}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, err := New(nil).Eval("fuzz", []byte(src))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz") {
				t.Fatalf("error without file name: %v", err)
			}
			return
		}
		_ = c.Vars()
	})
}
