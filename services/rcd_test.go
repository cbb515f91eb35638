package services

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keelinit/keel/services/rcconf"
)

func TestParseDefinition(t *testing.T) {
	chain, err := rcconf.Load(fstest.MapFS{
		"etc/rc.conf":        {Data: []byte("foo_enable=YES\nfoo_flags=\"-v -x\"\nlogdir=/var/log\nbar_enable=no\n")},
		"etc/rc.conf.d/foo2": {Data: []byte("foo2_flags=--from-rc.conf.d\n")},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		src     string
		exec    bool
		check   func(t *testing.T, d *Definition)
		wantErr string
	}{
		{name: "daemon", src: `name=foo
rcvar=foo_enable
command=/usr/sbin/food
command_args="-l '${logdir}/foo log'"
pidfile=/run/foo.pid
required_modules="aesni glxsb"
required_files="/etc/foo.conf /etc/bar"
start_precmd="/bin/mkdir -p /run/foo"
stop_postcmd="/bin/rm -f /run/foo.sock"
stop_signal=INT
start_timeout=2.5
stop_timeout=300ms
restart=on-failure
restart_backoff=1s
notify=yes
`, check: func(t *testing.T, d *Definition) {
			if d.Name != "foo" || !d.Enabled || d.Type != TypeDaemon || d.Command != "/usr/sbin/food" {
				t.Errorf("%+v", d)
			}
			if want := []string{"-v", "-x", "-l", "/var/log/foo log"}; !slices.Equal(d.Args, want) {
				t.Errorf("args %q, want %q", d.Args, want)
			}
			if !slices.Equal(d.RequiredModules, []string{"aesni", "glxsb"}) || !slices.Equal(d.StartPrecmd, []string{"/bin/mkdir", "-p", "/run/foo"}) {
				t.Errorf("lists: %q %q", d.RequiredModules, d.StartPrecmd)
			}
			if d.StopSignal != syscall.SIGINT || d.StartTimeout != 2500*time.Millisecond || d.StopTimeout != 300*time.Millisecond ||
				d.Restart != RestartOnFailure || d.RestartBackoff != time.Second || !d.Notify || d.Pidfile != "/run/foo.pid" {
				t.Errorf("%+v", d)
			}
			if d.Settings["foo_flags"] != "-v -x" || d.Settings["foo_enable"] != "YES" {
				t.Errorf("settings %v", d.Settings)
			}
		}},
		{name: "disabled", src: "name=bar\nrcvar=bar_enable\ncommand=/bin/true\ntype=oneshot\n", check: func(t *testing.T, d *Definition) {
			if d.Enabled {
				t.Error("bar enabled")
			}
		}},
		{name: "rc.conf.d", src: "name=foo2\ncommand=/bin/x\n", check: func(t *testing.T, d *Definition) {
			if !slices.Equal(d.Args, []string{"--from-rc.conf.d"}) {
				t.Errorf("args %q", d.Args)
			}
		}},
		{name: "default-name", src: "command=/bin/x\n", check: func(t *testing.T, d *Definition) {
			if d.Name != "svc" {
				t.Errorf("name %q", d.Name)
			}
		}},
		{name: "milestone", src: "name=NETWORKING\ntype=oneshot\n", check: func(t *testing.T, d *Definition) {
			if d.Command != "" || d.Type != TypeOneshot {
				t.Errorf("%+v", d)
			}
		}},
		{name: "script", src: "name=legacy\nrcvar=foo_enable\nstart() { echo hi; }\n", exec: true, check: func(t *testing.T, d *Definition) {
			if d.Type != TypeScript || d.Name != "legacy" || !d.Enabled || d.Argv()[0] != "/bin/sh" {
				t.Errorf("%+v", d)
			}
		}},
		{name: "shell-not-executable", src: "name=x\necho hi\n", wantErr: "svc:2:1: only variable assignments"},
		{name: "cmdsubst", src: "name=x\ncommand=$(which x)\n", wantErr: "svc:2:9: command substitution"},
		{name: "bad-type", src: "name=x\ntype=forking\ncommand=/bin/x\n", wantErr: "svc:2: type: invalid rc.d service"},
		{name: "bad-restart", src: "command=/bin/x\nrestart=sometimes\n", wantErr: "svc:2: restart:"},
		{name: "bad-signal", src: "command=/bin/x\nstop_signal=SIGFOO\n", wantErr: `unknown signal "SIGFOO"`},
		{name: "bad-timeout", src: "command=/bin/x\nstart_timeout=soon\n", wantErr: "svc:2: start_timeout:"},
		{name: "no-command", src: "name=x\n", wantErr: "svc: command:"},
		{name: "notify-oneshot", src: "type=oneshot\ncommand=/bin/x\nnotify=yes\n", wantErr: "notify=yes needs type=daemon"},
		{name: "bad-name", src: "name='a b'\ncommand=/bin/x\n", wantErr: "invalid service name"},
		{name: "unknown-key", src: "command=/bin/x\nstart_timout=5s\n", wantErr: "svc:2:1: start_timout: invalid rc.d service: unknown key (did you mean start_timeout?)"},
		{name: "unknown-key-no-hint", src: "command=/bin/x\nfrobnicate=1\n", wantErr: "svc:2:1: frobnicate: invalid rc.d service: unknown key"},
		{name: "requisite-not-required", src: "command=/bin/x\nrequisite=ipsec\n", wantErr: `svc:2: requisite: invalid rc.d service: "ipsec" is not in the REQUIRE header`},
		{name: "argv-expansion", src: "command=/bin/x\ncommand_args='$HOME'\n", wantErr: "expansions are not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseDefinition(chain, Header{Path: "svc"}, []byte(tt.src), tt.exec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if !errors.Is(err, ErrBadService) && !strings.Contains(tt.wantErr, "signal") {
					t.Errorf("err %v is not ErrBadService", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, d)
		})
	}
}

func TestSplitWords(t *testing.T) {
	for in, want := range map[string][]string{
		"":                   nil,
		"a b":                {"a", "b"},
		`"a b" 'c d' e\ f`:   {"a b", "c d", "e f"},
		"  -x   --y=1  ":     {"-x", "--y=1"},
		`--opt="quoted val"`: {"--opt=quoted val"},
	} {
		got, err := SplitWords(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("SplitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a; b", "a | b", "$(x)", "a > f", "${x}"} {
		if _, err := SplitWords(bad); err == nil {
			t.Errorf("SplitWords(%q) succeeded", bad)
		}
	}
}

func TestCriticalChainAndPlot(t *testing.T) {
	ms := time.Millisecond
	tl := Timeline{Finished: 40 * ms, Spans: []Span{
		{Name: "a", State: StateExited, Start: 0, Ready: 5 * ms},
		{Name: "b", State: StateRunning, Start: 5 * ms, Ready: 30 * ms, Requires: []string{"a"}},
		{Name: "c", State: StateRunning, Start: 5 * ms, Ready: 10 * ms, Requires: []string{"a"}},
		{Name: "d", State: StateRunning, Start: 30 * ms, Ready: 40 * ms, Requires: []string{"c", "b"}},
		{Name: "x", State: StateBlocked},
	}}
	var names []string
	for _, s := range CriticalChain(tl) {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "d"}) {
		t.Errorf("chain %v", names)
	}
	var sb strings.Builder
	if err := PlotSVG(&sb, tl); err != nil {
		t.Fatal(err)
	}
	svg := sb.String()
	if !strings.HasPrefix(svg, "<?xml") || strings.Count(svg, "<rect") != 5 || !strings.Contains(svg, ">d (10ms)<") {
		t.Errorf("svg:\n%s", svg)
	}
}

// FuzzParseDefinition feeds arbitrary rc.d files (untrusted input in a
// shared rc.d) to the parser: it must return a definition or an error that
// names the file, never panic.
func FuzzParseDefinition(f *testing.F) {
	f.Add("name=x\ncommand=/bin/x\n")
	chain, err := rcconf.Load(fstest.MapFS{"etc/rc.conf": {Data: []byte("x_enable=YES\n")}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for _, exec := range []bool{false, true} {
			d, err := ParseDefinition(chain, Header{Path: "etc/rc.d/fuzz"}, []byte(src), exec)
			if err != nil {
				if !strings.Contains(err.Error(), "fuzz") {
					t.Fatalf("error does not name the file: %v", err)
				}
				continue
			}
			if d.Name == "" || d.Type == "" || d.Settings == nil {
				t.Fatalf("incomplete definition %+v", d)
			}
		}
	})
}
