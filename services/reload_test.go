package services

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReloadRefusesInvalid: a reload whose new configuration has an
// error changes nothing: no service restarts, and the error names the
// file and line. Table-driven over what can be wrong: the rc.conf chain,
// an rc.d file of a changed service, a new rcorder error.
func TestReloadRefusesInvalid(t *testing.T) {
	base := tree{
		"etc/rc.conf": "a_flags=30\n",
		"etc/rc.d/a":  svc("a", "", "name=a\ncommand=/bin/sleep\n"),
		"etc/rc.d/b":  svc("b", "a", "name=b\ncommand=/bin/sleep\ncommand_args=30\n"),
	}
	tests := []struct {
		name       string
		file, body string
		want       string
	}{
		{"rc.conf syntax", "etc/rc.conf", "a_flags=\"31\n", "etc/rc.conf:1:"},
		{"rc.conf command substitution", "etc/rc.conf", "a_flags=$(echo 31)\n", "etc/rc.conf:1:9: command substitution"},
		{"rc.d unknown key", "etc/rc.d/b", svc("b", "a", "name=b\ncommand=/bin/sleep\ncommand_args=31\nstop_timout=3\n"), "etc/rc.d/b:7:1: stop_timout"},
		{"rc.d bad value", "etc/rc.d/b", svc("b", "a", "name=b\ncommand=/bin/sleep\ncommand_args=31\nrestart=sometimes\n"), "etc/rc.d/b:7: restart"},
		{"new missing provider", "etc/rc.d/b", svc("b", "a sshd", "name=b\ncommand=/bin/sleep\ncommand_args=31\n"), "etc/rc.d/b:2: rcorder: requirement `sshd'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeRoot(t, base)
			m := newManager(t, root, nil)
			if err := m.Boot(context.Background()); err != nil {
				t.Fatal(err)
			}
			before := states(m)
			if err := os.WriteFile(filepath.Join(root, tt.file), []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := m.Reload(context.Background())
			if !errors.Is(err, ErrReloadInvalid) {
				t.Fatalf("reload: %v, want ErrReloadInvalid", err)
			}
			if len(res.Errors) != 1 || !strings.HasPrefix(res.Errors[0], tt.want) {
				t.Errorf("errors %q, want one starting %s", res.Errors, tt.want)
			}
			for n, s := range states(m) {
				if o := before[n]; s.PID != o.PID || s.State != o.State {
					t.Errorf("%s: %s pid %d, was %s pid %d", n, s.State, s.PID, o.State, o.PID)
				}
			}
			if d, _ := m.Detail("b", 1); d.Command[1] != "30" {
				t.Errorf("b's definition changed: %v", d.Command)
			}
		})
	}
}

// TestBootLogsCheckNotices: Boot logs the ordering problems and unknown
// variables in the very words of Check (keeld -n).
func TestBootLogsCheckNotices(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.conf": "a_enabel=YES\n",
		"etc/rc.d/a":  svc("a", "nothere", "name=a\nrcvar=a_enable\ntype=oneshot\ncommand=/bin/true\n"),
	})
	var log bytes.Buffer
	opts := Options{Root: os.DirFS(root), RootDir: root, RuntimeDir: t.TempDir(), NoNotify: true,
		Seed: map[string]string{"keel_root": root}, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	rep := Check(opts, root)
	if rep.Count(SeverityError) != 1 || rep.Count(SeverityWarning) != 1 {
		t.Fatalf("findings %+v, want the missing provider and the unknown variable", rep.Findings)
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	_ = m.Boot(context.Background())
	for _, f := range rep.Findings {
		if !strings.Contains(log.String(), "level=WARN msg="+quoteLog(f.Text)) {
			t.Errorf("boot log lacks %q:\n%s", f.Text, log.String())
		}
	}
}

// quoteLog quotes s as slog's text handler does.
func quoteLog(s string) string {
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
			return slog.Attr{}
		}
		return a
	}})).Info(s)
	return strings.TrimSuffix(strings.TrimPrefix(b.String(), "msg="), "\n")
}

// TestReloadWarnsNewNotices: a reload that brings a new warning (an
// unknown rc.conf variable) applies and returns it, worded as by Check.
func TestReloadWarnsNewNotices(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.conf": "b_enable=YES\n",
		"etc/rc.d/b":  svc("b", "", "name=b\nrcvar=b_enable\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	m := newManager(t, root, nil)
	if err := m.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/rc.conf"), []byte("b_enable=YES\nb_flags=1\nb_enabel=NO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := m.Reload(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "etc/rc.conf:3: b_enabel: unknown variable") || !strings.Contains(res.Warnings[0], "did you mean b_enable?") {
		t.Errorf("warnings %q", res.Warnings)
	}
	if len(res.Restarted) != 1 {
		t.Errorf("a warning stopped the reload: %+v", res)
	}
}
