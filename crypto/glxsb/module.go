package glxsb

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
const ModuleName = "glxsb"

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

func init() {
	m := crypto.ProviderModule(ModuleName, 1, "AMD Geode LX Security Block (emulated), AES-128-CBC, queued driver",
		func(ctx context.Context) (crypto.Provider, error) {
			fw, ok := crypto.FromContext(ctx)
			if !ok {
				return nil, crypto.ErrNoFramework
			}
			module.mu.Lock()
			defer module.mu.Unlock()
			if module.p != nil {
				return nil, fmt.Errorf("glxsb: already loaded")
			}
			o := module.opts
			o.Name = ModuleName
			user := o.OnFault
			o.OnFault = func(err error) {
				fw.ReportFault(ModuleName, err)
				if user != nil {
					user(err)
				}
			}
			p, err := New(o)
			if err != nil {
				return nil, err
			}
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

// stopModuleProvider closes the module's provider once the framework no
// longer uses it (after Deregister, or after a failed admission).
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
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	p.Close(ctx)
}
