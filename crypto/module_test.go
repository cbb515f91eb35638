package crypto_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
	"github.com/keelinit/keel/modules"
)

// TestProviderModule loads aesni as a module (which pulls in the crypto
// module) and binds. Unloading it is refused (busy, in use, naming the
// binding and its label) since nothing else serves the binding, and
// changes nothing; a forced unload migrates the binding to unbound and
// removes the provider.
func TestProviderModule(t *testing.T) {
	if !aesni.Supported() {
		t.Skip("CPU lacks AES-NI/PCLMULQDQ: the aesni module is not registered")
	}
	fw := newFW(t, crypto.Options{})
	ctx := crypto.NewContext(context.Background(), fw)
	l := modules.NewLoader(modules.WithLogger(quietLogger()))
	if err := l.Load(ctx, aesni.Name); err != nil {
		t.Fatal(err)
	}
	if !l.IsLoaded(crypto.ModuleName) {
		t.Fatal("crypto module not loaded as a dependency")
	}
	if fw.Best(algGCM128) != aesni.Name {
		t.Fatalf("best provider %q", fw.Best(algGCM128))
	}
	b, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer closeBinding(t, b)
	b.SetLabel("ipsec SA esp 192.0.2.1->192.0.2.2 spi 0x1001")
	err = l.Unload(ctx, aesni.Name)
	var inUse *crypto.InUseError
	if !errors.Is(err, modules.ErrBusy) || !errors.As(err, &inUse) || len(inUse.Bindings) != 1 ||
		!strings.Contains(err.Error(), "spi 0x1001") {
		t.Fatalf("unload of a provider in use: %v, want busy naming the binding", err)
	}
	if !l.IsLoaded(aesni.Name) || fw.Best(algGCM128) != aesni.Name || b.Provider() != aesni.Name {
		t.Fatalf("refused unload changed something: loaded %v, best %q, binding on %q", l.IsLoaded(aesni.Name), fw.Best(algGCM128), b.Provider())
	}
	if err := l.Unload(ctx, aesni.Name, modules.Force()); err != nil {
		t.Fatal(err)
	}
	if len(fw.Providers()) != 0 || b.Provider() != "" {
		t.Fatalf("after unload: providers %v, binding on %q", fw.Providers(), b.Provider())
	}
	// Without a framework in the context the load fails cleanly.
	l2 := modules.NewLoader(modules.WithLogger(quietLogger()))
	if err := l2.Load(context.Background(), aesni.Name); !errors.Is(err, crypto.ErrNoFramework) {
		t.Fatalf("load without framework: %v", err)
	}
}

// closingProvider is a real (cpuprov, AES-128-GCM only) provider with a
// Close method that records how and when the module closed it.
type closingProvider struct {
	crypto.Provider
	fw       *crypto.Framework
	closeErr error

	mu          sync.Mutex
	closes      int
	listed      bool // the framework still listed it when Close ran
	hadDeadline bool
	deadline    time.Time
}

func (c *closingProvider) Capabilities() []crypto.Capability {
	return []crypto.Capability{{Alg: algGCM128}}
}

func (c *closingProvider) Close(ctx context.Context) error {
	listed := false
	for _, ps := range c.fw.Providers() {
		listed = listed || ps.Name == c.Info().Name
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	c.listed = listed
	c.deadline, c.hadDeadline = ctx.Deadline()
	return c.closeErr
}

// plainProvider has no Close method: the module must not need one.
type plainProvider struct{ crypto.Provider }

func (plainProvider) Capabilities() []crypto.Capability {
	return []crypto.Capability{{Alg: algGCM128}}
}

// providerModuleRig is a loader over an isolated catalog holding the
// framework module and one ProviderModule named "closer" whose providers
// newProvider builds; it records what OnProviderRelease got.
type providerModuleRig struct {
	fw      *crypto.Framework
	mod     modules.Module
	mu      sync.Mutex
	created []crypto.Provider
	release []crypto.Provider
}

func newProviderModuleRig(t *testing.T, newProvider func(fw *crypto.Framework) (crypto.Provider, error)) *providerModuleRig {
	t.Helper()
	r := &providerModuleRig{fw: newFW(t, crypto.Options{})}
	r.mod = crypto.ProviderModule("closer", 1, "test provider with Close",
		func(context.Context) (crypto.Provider, error) {
			p, err := newProvider(r.fw)
			if err == nil {
				r.mu.Lock()
				r.created = append(r.created, p)
				r.mu.Unlock()
			}
			return p, err
		},
		crypto.OnProviderRelease(func(p crypto.Provider) {
			r.mu.Lock()
			r.release = append(r.release, p)
			r.mu.Unlock()
		}))
	return r
}

// loader returns a new Loader over the rig's catalog.
func (r *providerModuleRig) loader(t *testing.T) *modules.Loader {
	t.Helper()
	cat := []modules.Module{r.mod}
	for _, m := range modules.Registered() {
		if m.Name == crypto.ModuleName {
			cat = append(cat, m)
		}
	}
	return modules.NewLoader(modules.WithCatalog(cat), modules.WithLogger(quietLogger()))
}

func (r *providerModuleRig) released() []crypto.Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.release)
}

func (c *closingProvider) state() (closes int, listed, hadDeadline bool, deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes, c.listed, c.hadDeadline, c.deadline
}

// TestProviderModuleClosesProvider: the module closes a provider with a
// Close method only once the framework no longer uses it (after
// Deregister on unload, after a failed admission on load), with a bounded
// context, and hands it to OnProviderRelease; a provider without Close is
// only released.
func TestProviderModuleClosesProvider(t *testing.T) {
	errBoom := errors.New("boom")
	errClose := errors.New("close failed")
	for _, tc := range []struct {
		name          string
		provName      string // the name the provider reports ("" = closer)
		plain         bool   // no Close method
		occupied      bool   // fw already serves a provider named closer
		newErr        error  // newProvider fails
		closeErr      error
		preDeregister bool // deregistered before the unload (fault handler)
		ctxDeadline   bool // the hooks' context carries its own deadline
		wantLoadErr   bool
	}{
		{name: "unload"},
		{name: "unload with deadline", ctxDeadline: true},
		{name: "unload after deregister", preDeregister: true},
		{name: "close error fails unload once", closeErr: errClose},
		{name: "no Close method", plain: true},
		{name: "admission refused", occupied: true, wantLoadErr: true},
		{name: "admission refused, close error joined", occupied: true, closeErr: errClose, wantLoadErr: true},
		{name: "misnamed", provName: "other", wantLoadErr: true},
		{name: "newProvider fails", newErr: errBoom, wantLoadErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newProviderModuleRig(t, func(fw *crypto.Framework) (crypto.Provider, error) {
				if tc.newErr != nil {
					return nil, tc.newErr
				}
				name := cmp.Or(tc.provName, "closer")
				inner := cpuprov.New(crypto.ProviderInfo{Name: name}, stdPrims)
				if tc.plain {
					return plainProvider{inner}, nil
				}
				return &closingProvider{Provider: inner, fw: fw, closeErr: tc.closeErr}, nil
			})
			if tc.occupied {
				mustRegister(t, r.fw, plainProvider{cpuprov.New(crypto.ProviderInfo{Name: "closer"}, stdPrims)})
			}
			base := context.Background()
			var hookDeadline time.Time
			if tc.ctxDeadline {
				var cancel context.CancelFunc
				base, cancel = context.WithTimeout(base, time.Minute)
				defer cancel()
				hookDeadline, _ = base.Deadline()
			}
			ctx := crypto.NewContext(base, r.fw)
			l := r.loader(t)

			err := l.Load(ctx, "closer")
			if tc.wantLoadErr {
				if err == nil {
					t.Fatal("load succeeded")
				}
				if tc.newErr != nil && !errors.Is(err, tc.newErr) {
					t.Fatalf("load: %v, want %v", err, tc.newErr)
				}
				if tc.closeErr != nil && !errors.Is(err, tc.closeErr) {
					t.Fatalf("load: %v, want the close error joined", err)
				}
				if l.IsLoaded("closer") {
					t.Fatal("module loaded after a failed load")
				}
				if len(r.created) == 0 {
					if len(r.released()) != 0 {
						t.Fatal("released a provider that was never created")
					}
					return
				}
				c := r.created[0].(*closingProvider)
				if n, _, hadDeadline, _ := c.state(); n != 1 || !hadDeadline {
					t.Fatalf("refused provider: %d closes (deadline %v), want 1 bounded", n, hadDeadline)
				}
				if got := r.released(); len(got) != 1 || got[0] != c {
					t.Fatalf("released %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			p := r.created[0]
			c, closable := p.(*closingProvider)
			if closable {
				if n, _, _, _ := c.state(); n != 0 {
					t.Fatal("closed while loaded")
				}
			}
			if len(r.released()) != 0 {
				t.Fatal("released while loaded")
			}
			if r.fw.Best(algGCM128) != "closer" {
				t.Fatalf("best provider %q", r.fw.Best(algGCM128))
			}
			b, err := r.fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {})
			if err != nil {
				t.Fatal(err)
			}
			defer closeBinding(t, b)
			if tc.preDeregister {
				if err := r.fw.Deregister(ctx, "closer"); err != nil {
					t.Fatal(err)
				}
			}

			start := time.Now()
			// Forced: the binding has nowhere else to go. But a forced
			// unload ignores the hook's error: for the close error, the
			// binding goes first and the unload is not forced.
			opts := []modules.UnloadOption{modules.Force()}
			if tc.closeErr != nil {
				b.Close(context.Background())
				opts = nil
			}
			err = l.Unload(ctx, "closer", opts...)
			if tc.closeErr != nil {
				if !errors.Is(err, tc.closeErr) {
					t.Fatalf("unload: %v, want the close error", err)
				}
				// The provider is deregistered and closed: a retry
				// succeeds without closing it again.
				if err := l.Unload(ctx, "closer"); err != nil {
					t.Fatalf("retried unload: %v", err)
				}
			} else if err != nil {
				t.Fatalf("unload: %v", err)
			}
			if b.Provider() != "" || len(r.fw.Providers()) != 0 {
				t.Fatalf("after unload: binding on %q, providers %v", b.Provider(), r.fw.Providers())
			}
			if got := r.released(); len(got) != 1 || got[0] != p {
				t.Fatalf("released %v, want the loaded provider once", got)
			}
			if !closable {
				return
			}
			n, listed, hadDeadline, deadline := c.state()
			switch {
			case n != 1:
				t.Fatalf("%d closes, want 1", n)
			case listed:
				t.Fatal("closed while the framework still listed it")
			case !hadDeadline:
				t.Fatal("Close got a context without deadline")
			case tc.ctxDeadline && !deadline.Equal(hookDeadline):
				t.Fatalf("Close deadline %v, want the hook's %v", deadline, hookDeadline)
			case !tc.ctxDeadline && (deadline.Before(start) || deadline.After(time.Now().Add(10*time.Second))):
				t.Fatalf("Close deadline %v not bounded to 10 s from the unload at %v", deadline, start)
			}
		})
	}
}

// TestProviderModuleReleasesReplaced: a provider deregistered behind the
// module's back (as a fault handler does) is closed when another Loader
// on the same Framework loads the module again, and the new one on that
// Loader's unload.
func TestProviderModuleReleasesReplaced(t *testing.T) {
	r := newProviderModuleRig(t, func(fw *crypto.Framework) (crypto.Provider, error) {
		return &closingProvider{Provider: cpuprov.New(crypto.ProviderInfo{Name: "closer"}, stdPrims), fw: fw}, nil
	})
	ctx := crypto.NewContext(context.Background(), r.fw)
	l1, l2 := r.loader(t), r.loader(t)
	if err := l1.Load(ctx, "closer"); err != nil {
		t.Fatal(err)
	}
	if err := r.fw.Deregister(ctx, "closer"); err != nil {
		t.Fatal(err)
	}
	if err := l2.Load(ctx, "closer"); err != nil {
		t.Fatal(err)
	}
	first, second := r.created[0].(*closingProvider), r.created[1].(*closingProvider)
	if n, _, _, _ := first.state(); n != 1 {
		t.Fatalf("deregistered provider closed %d times, want 1", n)
	}
	if n, _, _, _ := second.state(); n != 0 {
		t.Fatal("new provider closed while loaded")
	}
	if err := l2.Unload(ctx, "closer"); err != nil {
		t.Fatal(err)
	}
	if n, _, _, _ := second.state(); n != 1 {
		t.Fatalf("new provider closed %d times after unload, want 1", n)
	}
	if got := r.released(); len(got) != 2 || got[0] != first || got[1] != second {
		t.Fatalf("released %v", got)
	}
}
