package crypto

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// providerCloseTimeout bounds how long ProviderModule waits for a
// provider's Close when the hook's context has no deadline of its own.
const providerCloseTimeout = 10 * time.Second

// A ProviderModuleOption adjusts the descriptor ProviderModule builds.
type ProviderModuleOption func(*providerModule)

// OnProviderRelease makes the module call release with each provider it
// created once the framework no longer uses it and the module has closed
// it (if it has a Close method, see ProviderModule): after Deregister on
// unload, after a failed admission on load, or when a later load on the
// same Framework (by another Loader) succeeded because it had been
// deregistered meanwhile. Provider packages that keep the loaded instance
// (a single device, a ModuleProvider accessor) use it to drop their
// reference. release runs on the hook's goroutine, outside the
// framework's locks, once per provider; it must not block.
func OnProviderRelease(release func(Provider)) ProviderModuleOption {
	return func(m *providerModule) { m.release = release }
}

// providerModule is the state behind a ProviderModule descriptor: the
// provider each Framework got from the module, for the Unload hook.
type providerModule struct {
	name        string
	newProvider func(ctx context.Context) (Provider, error)
	release     func(Provider)

	mu     sync.Mutex
	loaded map[*Framework]Provider
}

// ProviderModule returns the module descriptor of a crypto provider, for
// the provider package to pass to modules.Register from init(). Its Load
// hook creates the provider with newProvider and registers it with the
// Framework carried by the load context (failing, and so aborting the
// load, if the provider is quarantined); its Unload hook deregisters it,
// migrating every binding to another provider before the provider goes.
// An error from newProvider aborts the load.
//
// An unload is refused, as FreeBSD refuses to unload a crypto driver in
// use (EBUSY), while bindings on the provider could move to no provider
// that stays: the module's Quiesce hook (and, against races, its Unload
// hook through Framework.DeregisterUnused) returns an *InUseError naming
// them, which the Loader reports as busy. The providers of the other
// modules leaving in the same unload do not count as staying, so
// unloading aesni and cryptosoft together is refused while AES-GCM
// bindings exist even though each alone could go. A forced unload
// (modules.Force) deregisters anyway: the stranded bindings are unbound
// and fail their requests with ErrNoProvider.
//
// A provider that holds resources (goroutines, a device process)
// implements Close(context.Context) error; the module then closes it once
// the framework no longer uses it: after Deregister on unload (also when
// the provider had already been deregistered, e.g. by its own fault
// handler), and after a failed admission on load (wrong name, Register
// error). Close gets the hook's context, bounded to 10 s when it has no
// deadline; a Close error fails the unload (the provider is already
// deregistered, and a retried unload succeeds) or is joined to the load
// error. When Deregister itself fails the provider stays registered and
// is not closed. The module keeps one provider per Framework, so several
// Loaders on different Frameworks may load it at once (unless
// newProvider refuses). Options adjust this (see OnProviderRelease).
func ProviderModule(name string, version int, description string, newProvider func(ctx context.Context) (Provider, error), opts ...ProviderModuleOption) modules.Module {
	pm := &providerModule{name: name, newProvider: newProvider, loaded: map[*Framework]Provider{}}
	for _, o := range opts {
		o(pm)
	}
	return modules.Module{
		Name:        name,
		Version:     version,
		Kind:        modules.KindCryptoProvider,
		Description: description,
		Depends:     []modules.Dependency{{Name: ModuleName, Min: 1}},
		Load:        pm.load,
		Unload:      pm.unload,
		Quiesce:     pm.quiesce,
	}
}

// quiesce is the module's Quiesce hook: may the provider leave with
// leaving?
func (m *providerModule) quiesce(ctx context.Context, leaving []string) error {
	fw, ok := FromContext(ctx)
	if !ok {
		return nil // no framework: nothing can be bound to the provider
	}
	return fw.CheckRemove(leaving...)
}

// load is the module's Load hook.
func (m *providerModule) load(ctx context.Context) error {
	fw, ok := FromContext(ctx)
	if !ok {
		return fmt.Errorf("module %s: load: %w", m.name, ErrNoFramework)
	}
	p, err := m.newProvider(ctx)
	if err != nil {
		return fmt.Errorf("module %s: load: %w", m.name, err)
	}
	if got := p.Info().Name; got != m.name {
		err = fmt.Errorf("provider is named %q", got)
	} else {
		err = fw.Register(ctx, p)
	}
	if err != nil {
		if cerr := m.releaseProvider(ctx, p); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return fmt.Errorf("module %s: load: %w", m.name, err)
	}
	m.mu.Lock()
	old := m.loaded[fw]
	m.loaded[fw] = p
	m.mu.Unlock()
	if old != nil {
		// Register admitted p under the module's name, so old, loaded
		// earlier on this Framework by another Loader, had been
		// deregistered behind the module's back (its fault handler):
		// the framework no longer uses it.
		m.releaseProvider(ctx, old)
	}
	return nil
}

// unload is the module's Unload hook.
func (m *providerModule) unload(ctx context.Context) error {
	fw, ok := FromContext(ctx)
	if !ok {
		return fmt.Errorf("module %s: unload: %w", m.name, ErrNoFramework)
	}
	var err error
	if u, ok := modules.UnloadFromContext(ctx); ok && !u.Forced {
		err = fw.DeregisterUnused(ctx, m.name, u.Leaving...)
	} else {
		err = fw.Deregister(ctx, m.name)
	}
	if err != nil && !errors.Is(err, ErrNoProvider) {
		return fmt.Errorf("module %s: unload: %w", m.name, err)
	}
	m.mu.Lock()
	p := m.loaded[fw]
	delete(m.loaded, fw)
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := m.releaseProvider(ctx, p); err != nil {
		return fmt.Errorf("module %s: unload: %w", m.name, err)
	}
	return nil
}

// releaseProvider closes p if it has a Close method (bounding ctx when it
// has no deadline), then calls the release option.
func (m *providerModule) releaseProvider(ctx context.Context, p Provider) error {
	var err error
	if c, ok := p.(interface{ Close(context.Context) error }); ok {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, providerCloseTimeout)
			defer cancel()
		}
		if cerr := c.Close(ctx); cerr != nil {
			err = fmt.Errorf("close provider: %w", cerr)
		}
	}
	if m.release != nil {
		m.release(p)
	}
	return err
}
