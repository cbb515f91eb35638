package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	// The crypto provider modules keeld ships, so that module names are
	// checked against the registry keeld loads them from.
	_ "github.com/keelinit/keel/crypto/providers"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/builtin"
)

// checkCommand is keelctl check: keeld -n in process, without a running
// keeld. It validates the appliance under --root and exits 1 when the
// configuration has errors (0 with warnings only).
func (a *app) checkCommand() command {
	var root, stateDir, record string
	return command{use: "check", short: "Validate the configuration under --root without keeld (as keeld -n): exit 1 on errors",
		run: func(*cobra.Command, []string) error {
			abs, err := filepath.Abs(root)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(abs, "etc")); err != nil {
				return fmt.Errorf("root %s: %w", abs, err)
			}
			log := slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
			rep := builtin.CheckConfig(os.DirFS(abs), abs, abs, services.Seed(services.SeedVars{
				Self: keeldPath(), RuntimeDir: services.DefaultRuntimeDir(), Root: abs, StateDir: stateDir, NonceRecord: record}), log)
			if err := show(a, rep, func(w io.Writer, r *services.Report) error { return r.Write(w) }); err != nil {
				return err
			}
			if rep.Count(services.SeverityError) > 0 {
				return exitError{1}
			}
			return nil
		},
		flags: func(c *cobra.Command) {
			c.Flags().StringVar(&root, "root", "/", "root directory holding etc/")
			c.Flags().StringVar(&stateDir, "state-dir", "", "keeld's --state-dir, if it is given one")
			c.Flags().StringVar(&record, "nonce-record", "", "keeld's --nonce-record, if it is given one")
		}}
}

// keeldPath is the keeld that rc.d's ${keel_self} would name: the one
// next to keelctl, else the one on PATH, else "keeld".
func keeldPath() string {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "keeld"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("keeld"); err == nil {
		return p
	}
	return "keeld"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
