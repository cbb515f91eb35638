package virtio

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/devslot"
	"github.com/keelinit/keel/modules"
)

// ModuleName is the module (and provider) name registered from init().
const ModuleName = "virtio"

// errAlreadyLoaded refuses a second load while another Loader holds the
// (single) device.
var errAlreadyLoaded = errors.New("virtio: already loaded")

// module is the package's single device slot: the provider of the loaded
// module, filled by newModuleProvider and emptied by releaseModuleProvider
// once crypto.ProviderModule has closed it.
var module devslot.Slot[Options, *Provider]

// ConfigureModule sets the Options the module's Load hook uses for the
// next load (Name is forced to ModuleName; OnFault is wired to the
// framework). Call it before loading the module.
func ConfigureModule(o Options) { module.Configure(o) }

// ModuleProvider returns the provider of the loaded module, or nil.
func ModuleProvider() *Provider { return module.Current() }

func init() {
	// crypto.ProviderModule closes the provider (stopping the device
	// process) after Deregister on unload and after a failed admission on
	// load.
	modules.Register(crypto.ProviderModule(ModuleName, 1, "virtio-crypto device (emulated, separate process), async control queue",
		newModuleProvider, crypto.OnProviderRelease(releaseModuleProvider)))
}

// newModuleProvider is the module's provider constructor: it starts the
// device with the configured Options. A device fault fails the bindings
// over, deregisters the provider and stops the device.
func newModuleProvider(ctx context.Context) (crypto.Provider, error) {
	fw, ok := crypto.FromContext(ctx)
	if !ok {
		return nil, crypto.ErrNoFramework
	}
	p, err := module.Fill(errAlreadyLoaded, func(o Options) (*Provider, error) {
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
		return p, nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// releaseModuleProvider empties the device slot once the module has
// closed p.
func releaseModuleProvider(p crypto.Provider) {
	if q, ok := p.(*Provider); ok {
		module.Release(q)
	}
}
