package crypto

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keelinit/keel/modules"
)

// Removing providers that are in use, as FreeBSD refuses to unload a
// crypto driver with sessions (EBUSY): a provider may leave only if
// every binding on it can move to a provider that stays.

// ErrInUse reports providers that cannot leave because bindings on them
// would be left without a provider. An *InUseError matches it, and
// modules.ErrBusy, so that a module whose unload it refuses is reported
// busy.
var ErrInUse = errors.New("crypto: provider in use")

// InUseError names the bindings that removing Providers would strand: no
// admitted provider outside Providers supports their algorithm.
type InUseError struct {
	Providers []string        // the providers that would leave, sorted
	Bindings  []BindingStatus // the bindings that would be stranded, by ID
}

// maxNamed bounds how many bindings an InUseError's message lists.
const maxNamed = 8

// Error renders e.g. "crypto: aesni, cryptosoft in use: removing them
// would leave 2 bindings without a provider: binding 1 aes-gcm-16-128 on
// aesni (ipsec SA esp 192.0.2.1->192.0.2.2 spi 0x1001), ...".
func (e *InUseError) Error() string {
	var b strings.Builder
	them := "it"
	if len(e.Providers) > 1 {
		them = "them"
	}
	fmt.Fprintf(&b, "crypto: %s in use: removing %s would leave %d binding(s) without a provider: ",
		strings.Join(e.Providers, ", "), them, len(e.Bindings))
	for i, bs := range e.Bindings {
		if i == maxNamed {
			fmt.Fprintf(&b, ", and %d more", len(e.Bindings)-maxNamed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "binding %d %v on %s", bs.ID, bs.Alg, bs.Provider)
		if bs.Label != "" {
			fmt.Fprintf(&b, " (%s)", bs.Label)
		}
	}
	return b.String()
}

// Is reports whether target is ErrInUse or modules.ErrBusy.
func (e *InUseError) Is(target error) bool { return target == ErrInUse || target == modules.ErrBusy }

// CheckRemove reports whether the named providers can leave together
// without stranding a binding: it returns nil if every binding on one of
// them, or on a provider already being deregistered, has an admitted
// provider (ok or degraded) outside those that supports its algorithm,
// and an *InUseError naming the others. Unknown names are ignored.
// Bindings already unbound are not counted: removing the providers does
// not change them.
func (f *Framework) CheckRemove(names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkRemoveLocked(names)
}

// checkRemoveLocked is CheckRemove with f.mu held.
func (f *Framework) checkRemoveLocked(names []string) error {
	leaving := make(map[*provEntry]bool, len(names))
	var provs []string
	for _, n := range names {
		if e := f.provs[n]; e != nil && !leaving[e] {
			leaving[e] = true
			provs = append(provs, n)
		}
	}
	if len(leaving) == 0 {
		return nil
	}
	// Providers already leaving (a Deregister migrating their bindings
	// away) leave too: their bindings are on their way to the providers
	// that stay, which may be the ones asked about.
	for _, e := range f.provs {
		if e.state.Load() == stUnloading {
			leaving[e] = true
		}
	}
	canServe := func(alg Algorithm) bool {
		for _, e := range f.provs {
			if st := e.state.Load(); leaving[e] || (st != stOK && st != stDegraded) {
				continue
			}
			if _, ok := e.capSet[alg]; ok {
				return true
			}
		}
		return false
	}
	var stranded []BindingStatus
	for _, b := range f.allBindings() {
		w := b.curp.Load()
		if w == nil || !leaving[w.prov] || b.isClosed.Load() || canServe(b.alg) {
			continue
		}
		stranded = append(stranded, b.Status())
	}
	if len(stranded) == 0 {
		return nil
	}
	slices.SortFunc(stranded, func(a, b BindingStatus) int { return int(a.ID) - int(b.ID) })
	slices.Sort(provs)
	return &InUseError{Providers: provs, Bindings: stranded}
}

// DeregisterUnused is Deregister, refused while the provider is in use:
// if a binding on name could move to no admitted provider outside name
// and alsoLeaving (providers about to leave with it, e.g. the other
// modules of one kldunload), it changes nothing and returns an
// *InUseError. The check and the provider's switch to unloading happen
// under one lock, so two concurrent removals cannot each count on the
// other's provider.
func (f *Framework) DeregisterUnused(ctx context.Context, name string, alsoLeaving ...string) error {
	return f.deregister(ctx, name, append([]string{name}, alsoLeaving...))
}

// SetLabel names the binding's user (e.g. "ipsec SA esp 192.0.2.1->
// 192.0.2.2 spi 0x1001") in its status and in errors about it, such as
// an *InUseError. It must not contain key material.
func (b *Binding) SetLabel(label string) { b.label.Store(&label) }

// Label returns the label set by SetLabel, or "".
func (b *Binding) Label() string {
	if l := b.label.Load(); l != nil {
		return *l
	}
	return ""
}

// Removed returns the providers that the framework removed (Deregister)
// after they had faulted, with their last fault, by name; for example a
// device that died, whose fault handler deregistered it. A provider
// registered again under the same name leaves the list. Status displays
// use it to show such a provider as failed where its module is still
// listed (kldstat).
func (f *Framework) Removed() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.removed)
}
