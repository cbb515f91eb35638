package virtio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/modules"
)

// ModuleName is the module (and provider) name registered from init().
const ModuleName = "virtio"

var module struct {
	mu   sync.Mutex
	opts Options
	p    *Provider
}

// ConfigureModule sets the Options the module's Load hook uses for the
// next load (Name is forced to ModuleName; OnFault is wired to the
// framework). Call it before loading the module.
func ConfigureModule(o Options) {
	module.mu.Lock()
	module.opts = o
	module.mu.Unlock()
}

// ModuleProvider returns the provider of the loaded module, or nil.
func ModuleProvider() *Provider {
	module.mu.Lock()
	defer module.mu.Unlock()
	return module.p
}

func init() {
	m := crypto.ProviderModule(ModuleName, 1, "virtio-crypto device (emulated, separate process), async control queue",
		func(ctx context.Context) (crypto.Provider, error) {
			fw, ok := crypto.FromContext(ctx)
			if !ok {
				return nil, crypto.ErrNoFramework
			}
			module.mu.Lock()
			defer module.mu.Unlock()
			if module.p != nil {
				return nil, fmt.Errorf("virtio: already loaded")
			}
			o := module.opts
			o.Name = ModuleName
			user := o.OnFault
			var self *Provider
			var selfMu sync.Mutex
			o.OnFault = func(err error) {
				// Fail over first, then drop the dead provider.
				fw.ReportFault(ModuleName, err)
				dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				fw.Deregister(dctx, ModuleName)
				selfMu.Lock()
				p := self
				selfMu.Unlock()
				if p != nil {
					p.Close(dctx)
				}
				if user != nil {
					user(err)
				}
			}
			p, err := Start(ctx, o)
			if err != nil {
				return nil, err
			}
			selfMu.Lock()
			self = p
			selfMu.Unlock()
			module.p = p
			return p, nil
		})
	register := m.Load
	m.Load = func(ctx context.Context) error {
		err := register(ctx)
		if err != nil {
			stopModuleProvider(ctx)
		}
		return err
	}
	deregister := m.Unload
	m.Unload = func(ctx context.Context) error {
		err := deregister(ctx)
		if err != nil && !errors.Is(err, crypto.ErrNoProvider) {
			return err
		}
		stopModuleProvider(ctx)
		return nil
	}
	modules.Register(m)
}

func stopModuleProvider(ctx context.Context) {
	module.mu.Lock()
	p := module.p
	module.p = nil
	module.mu.Unlock()
	if p == nil {
		return
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	p.Close(ctx)
}
