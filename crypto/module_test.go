package crypto_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/modules"
)

// TestProviderModule loads aesni as a module (which pulls in the crypto
// module), binds, then unloads it: the binding is migrated (here: to
// unbound, as nothing else serves it) and the provider removed.
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
	defer b.Close(context.Background())
	if err := l.Unload(ctx, aesni.Name); err != nil {
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
