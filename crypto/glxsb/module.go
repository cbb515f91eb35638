package glxsb

import (
	"context"
	"errors"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/devslot"
	"github.com/keelinit/keel/modules"
)

// ModuleName is the module (and provider) name registered from init().
const ModuleName = "glxsb"

// errAlreadyLoaded refuses a second load while another Loader holds the
// (single) device.
var errAlreadyLoaded = errors.New("glxsb: already loaded")

// module is the package's single device slot: the provider of the loaded
// module, filled by newModuleProvider and emptied by releaseModuleProvider
// once crypto.ProviderModule has closed it.
var module devslot.Slot[Options, *Provider]

// ConfigureModule sets the Options the module's Load hook uses for the
// next load (Name is forced to ModuleName; OnFault is wired to the
// framework). Call it before loading the module.
func ConfigureModule(o Options) { module.Configure(o) }

func init() {
	// crypto.ProviderModule closes the provider (stopping the emulated
	// device's goroutines) after Deregister on unload and after a failed
	// admission on load.
	modules.Register(crypto.ProviderModule(ModuleName, 1, "AMD Geode LX Security Block (emulated), AES-128-CBC, queued driver",
		newModuleProvider, crypto.OnProviderRelease(releaseModuleProvider)))
}

// newModuleProvider is the module's provider constructor: it creates the
// device with the configured Options, its faults reported to the
// framework of the load context.
func newModuleProvider(ctx context.Context) (crypto.Provider, error) {
	fw, ok := crypto.FromContext(ctx)
	if !ok {
		return nil, crypto.ErrNoFramework
	}
	p, err := module.Fill(errAlreadyLoaded, func(o Options) (*Provider, error) {
		o.Name = ModuleName
		user := o.OnFault
		o.OnFault = func(err error) {
			fw.ReportFault(ModuleName, err)
			if user != nil {
				user(err)
			}
		}
		return New(o)
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
