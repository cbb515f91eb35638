package vaes

import (
	"slices"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/modules"
)

// TestModuleRegisteredOnlyWhenSupported: like aesni(4)'s probe, the module
// exists exactly when the CPU has the instructions, as a crypto provider
// module depending on the framework.
func TestModuleRegisteredOnlyWhenSupported(t *testing.T) {
	var found *modules.Module
	for _, m := range modules.Registered() {
		if m.Name == Name {
			found = &m
		}
	}
	if Supported() != (found != nil) {
		t.Fatalf("Supported() = %v but module registered = %v", Supported(), found != nil)
	}
	if found == nil {
		t.Skip("vaes: CPU lacks the instructions (hardware): module correctly not registered")
	}
	if found.Kind != modules.KindCryptoProvider || !slices.ContainsFunc(found.Depends, func(d modules.Dependency) bool { return d.Name == crypto.ModuleName && d.Min == 1 }) {
		t.Fatalf("module descriptor %+v", *found)
	}
}

// TestNewUnsupported: New refuses exactly when the probe fails.
func TestNewUnsupported(t *testing.T) {
	p, err := New()
	if Supported() != (err == nil) || (err == nil) != (p != nil) {
		t.Fatalf("Supported %v, New = %v, %v", Supported(), p, err)
	}
}
