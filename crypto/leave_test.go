package crypto_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/modules"
)

// TestDeregisterUnused: a provider leaves only if its bindings can move
// to a provider that stays; the providers leaving with it do not count.
// A refusal names the bindings (with their labels) and changes nothing.
// Two providers that are each other's only alternative, removed at the
// same time, cannot both go: exactly one does.
func TestDeregisterUnused(t *testing.T) {
	if !aesni.Supported() {
		t.Skip("aesni not supported on this CPU")
	}
	ctx := context.Background()
	fw := newFW(t, crypto.Options{})
	mustRegister(t, fw, aesni.New())
	mustRegister(t, fw, cryptosoft.New())
	b, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	b.SetLabel("ipsec SA esp 192.0.2.1->192.0.2.2 spi 0x1001")
	if b.Provider() != aesni.Name {
		t.Fatalf("bound to %q", b.Provider())
	}
	if err := fw.CheckRemove(aesni.Name); err != nil {
		t.Errorf("aesni alone: %v", err)
	}
	err = fw.CheckRemove(aesni.Name, cryptosoft.Name)
	var iu *crypto.InUseError
	if !errors.As(err, &iu) || !errors.Is(err, crypto.ErrInUse) || !errors.Is(err, modules.ErrBusy) ||
		len(iu.Bindings) != 1 || iu.Bindings[0].ID != b.ID() || !strings.Contains(err.Error(), "spi 0x1001") {
		t.Fatalf("both: %v", err)
	}
	if err := fw.DeregisterUnused(ctx, aesni.Name, cryptosoft.Name); !errors.Is(err, crypto.ErrInUse) {
		t.Fatalf("DeregisterUnused(aesni, with cryptosoft): %v", err)
	}
	if b.Provider() != aesni.Name || fw.Best(algGCM128) != aesni.Name {
		t.Fatalf("refusal changed something: binding on %q, best %q", b.Provider(), fw.Best(algGCM128))
	}

	for i := range 10 {
		if i > 0 {
			// Put back whichever left.
			for _, n := range []string{aesni.Name, cryptosoft.Name} {
				if providerSessions(fw, n) < 0 {
					p := map[string]func() crypto.Provider{aesni.Name: aesni.New, cryptosoft.Name: cryptosoft.New}[n]()
					mustRegister(t, fw, p)
				}
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, n := range []string{aesni.Name, cryptosoft.Name} {
			wg.Add(1)
			go func() { defer wg.Done(); errs[j] = fw.DeregisterUnused(ctx, n) }()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: concurrent removals: %v, %v: want exactly one refused", i, errs[0], errs[1])
		}
		if b.Provider() == "" {
			t.Fatalf("round %d: the binding was stranded", i)
		}
	}
}

// TestDeregisterUnusedCountsMigrations: while a's removal is migrating a
// binding to b (held inside b's session creation), b cannot be removed:
// the binding is on its way to it. Without counting providers already
// leaving, both removals passed their checks and the binding was
// stranded (seen under load in TestDeregisterUnused).
func TestDeregisterUnusedCountsMigrations(t *testing.T) {
	ctx := context.Background()
	fw := newFW(t, crypto.Options{Hysteresis: 1e9, SkipSelfTests: true})
	a, b := newFake("a", 1), newFake("b", 1)
	mustRegister(t, fw, a)
	bind, err := fw.Bind(testKeys(algGCM128, 1), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	defer bind.Close(ctx)
	mustRegister(t, fw, b)
	if bind.Provider() != "a" {
		t.Fatalf("bound to %q", bind.Provider())
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.onSession = func(*fakeSession) {
		once.Do(func() { close(entered); <-release })
	}
	errA := make(chan error, 1)
	go func() { errA <- fw.DeregisterUnused(ctx, "a") }()
	testwait.Recv(t, testwait.Timeout, "a's removal starts moving the binding to b", entered)
	err = fw.DeregisterUnused(ctx, "b")
	close(release)
	if !errors.Is(err, crypto.ErrInUse) {
		t.Errorf("removing b while a's binding moves to it: %v, want ErrInUse", err)
	}
	if err, _ := testwait.Recv(t, testwait.Timeout, "a's removal finishes", errA); err != nil {
		t.Fatalf("removing a: %v", err)
	}
	if bind.Provider() != "b" {
		t.Fatalf("binding on %q, want b", bind.Provider())
	}
}
