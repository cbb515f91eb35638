package crypto

import (
	"context"
	"errors"
	"fmt"

	"github.com/keelinit/keel/modules"
)

// ModuleName is the name of the framework's own module; every provider
// module depends on it.
const ModuleName = "crypto"

// ModuleVersion is the framework module's MODULE_VERSION. Providers
// depend on it with Min: 1.
const ModuleVersion = 1

// ErrNoFramework is returned by module hooks whose load context carries no
// Framework (see NewContext).
var ErrNoFramework = errors.New("crypto: no framework in context")

func init() {
	modules.Register(modules.Module{
		Name:        ModuleName,
		Version:     ModuleVersion,
		Kind:        modules.KindEngine,
		Description: "crypto provider framework (self-test, calibrate, bind, rebind)",
		Load: func(ctx context.Context) error {
			if _, ok := FromContext(ctx); !ok {
				return fmt.Errorf("module %s: load: %w", ModuleName, ErrNoFramework)
			}
			return nil
		},
		Unload: func(ctx context.Context) error { return nil },
	})
}

// ProviderModule returns the module descriptor of a crypto provider, for
// the provider package to pass to modules.Register from init(). Its Load
// hook creates the provider with newProvider and registers it with the
// Framework carried by the load context (failing, and so aborting the
// load, if the provider is quarantined); its Unload hook deregisters it,
// migrating every binding to another provider before the provider goes.
// An error from newProvider aborts the load.
func ProviderModule(name string, version int, description string, newProvider func(ctx context.Context) (Provider, error)) modules.Module {
	return modules.Module{
		Name:        name,
		Version:     version,
		Kind:        modules.KindCryptoProvider,
		Description: description,
		Depends:     []modules.Dependency{{Name: ModuleName, Min: 1}},
		Load: func(ctx context.Context) error {
			fw, ok := FromContext(ctx)
			if !ok {
				return fmt.Errorf("module %s: load: %w", name, ErrNoFramework)
			}
			p, err := newProvider(ctx)
			if err != nil {
				return fmt.Errorf("module %s: load: %w", name, err)
			}
			if got := p.Info().Name; got != name {
				return fmt.Errorf("module %s: load: provider is named %q", name, got)
			}
			if err := fw.Register(ctx, p); err != nil {
				return fmt.Errorf("module %s: load: %w", name, err)
			}
			return nil
		},
		Unload: func(ctx context.Context) error {
			fw, ok := FromContext(ctx)
			if !ok {
				return fmt.Errorf("module %s: unload: %w", name, ErrNoFramework)
			}
			if err := fw.Deregister(ctx, name); err != nil && !errors.Is(err, ErrNoProvider) {
				return fmt.Errorf("module %s: unload: %w", name, err)
			}
			return nil
		},
	}
}
