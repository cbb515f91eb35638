package builtin

import (
	"io/fs"
	"log/slog"

	"github.com/keelinit/keel/services"
)

// CheckConfig validates the appliance root (rootDir its host directory,
// "" for an embedded one) as keeld would boot it with seed (see
// services.Seed) and these builtins, without starting, creating or
// locking anything: services.Check with every builtin's Checker. desc
// names the root in the summary.
func CheckConfig(root fs.FS, rootDir, desc string, seed map[string]string, log *slog.Logger) *services.Report {
	sys := New(Options{Logger: log})
	return services.Check(services.Options{Root: root, RootDir: rootDir, Seed: seed, Logger: log,
		Builtins: sys.Builtins(), LoadModules: sys.LoadModules, NoNotify: true}, desc)
}
