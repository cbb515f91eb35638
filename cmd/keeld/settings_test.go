package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSettingsLayering(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keeld.yaml")
	if err := os.WriteFile(cfg, []byte("socket: /from/file.sock\nlog-format: json\ncalibration-budget: 7ms\nroot: /from/file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want settings
	}{
		{"defaults", nil, nil, settings{LogFormat: "auto", CalibrationBudget: 20 * time.Millisecond}},
		{"env", map[string]string{"KEEL_SOCKET": "/env.sock", "KEEL_CALIBRATION_BUDGET": "9ms", "KEEL_RUNTIME_DIR": "/rt"}, nil,
			settings{Socket: "/env.sock", RuntimeDir: "/rt", LogFormat: "auto", CalibrationBudget: 9 * time.Millisecond}},
		{"file", nil, []string{"--config", cfg}, settings{Socket: "/from/file.sock", Root: "/from/file", LogFormat: "json", CalibrationBudget: 7 * time.Millisecond}},
		{"flag beats env beats file", map[string]string{"KEEL_SOCKET": "/env.sock"}, []string{"--config", cfg, "--socket", "/flag.sock", "--runtime-dir", "/rt"},
			settings{Socket: "/flag.sock", Root: "/from/file", RuntimeDir: "/rt", LogFormat: "json", CalibrationBudget: 7 * time.Millisecond}},
		{"control group defaults socket group", nil, []string{"--control-group", "wheel", "--runtime-dir", "/rt"},
			settings{RuntimeDir: "/rt", Socket: "/rt/keeld.sock", LogFormat: "auto", CalibrationBudget: 20 * time.Millisecond, ControlGroup: "wheel", SocketGroup: "wheel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"KEEL_SOCKET", "KEEL_CALIBRATION_BUDGET", "KEEL_RUNTIME_DIR", "KEEL_ROOT", "KEEL_LOG_FORMAT"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var got settings
			cmd := rootCmd(func(_ context.Context, s settings) error { got = s; return nil })
			cmd.SetArgs(tt.args)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want.RuntimeDir == "" {
				want.RuntimeDir = got.RuntimeDir // the per-user default
			}
			if want.Socket == "" {
				want.Socket = filepath.Join(want.RuntimeDir, "keeld.sock")
			}
			if want.LogLevel == "" {
				want.LogLevel = "info"
			}
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
	cmd := rootCmd(func(context.Context, settings) error { return nil })
	cmd.SetArgs([]string{"--calibration-budget", "-1s"})
	if err := cmd.Execute(); err == nil {
		t.Error("negative calibration budget accepted")
	}
}
