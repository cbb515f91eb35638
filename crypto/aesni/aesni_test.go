package aesni_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/modules"
)

// TestModuleRegisteredOnlyWhenSupported: like aesni(4)'s probe, the module
// exists exactly when the CPU has the instructions.
func TestModuleRegisteredOnlyWhenSupported(t *testing.T) {
	var found *modules.Module
	for _, m := range modules.Registered() {
		if m.Name == aesni.Name {
			found = &m
		}
	}
	if aesni.Supported() != (found != nil) {
		t.Fatalf("Supported() = %v but module registered = %v", aesni.Supported(), found != nil)
	}
	if found != nil {
		if found.Kind != modules.KindCryptoProvider || !slices.ContainsFunc(found.Depends, func(d modules.Dependency) bool { return d.Name == crypto.ModuleName && d.Min == 1 }) {
			t.Fatalf("module descriptor %+v", *found)
		}
	}
}

// TestAdmitted: aesni passes the framework's known-answer self-tests for
// every algorithm it claims, through its own sessions.
func TestAdmitted(t *testing.T) {
	p := aesni.New()
	info := p.Info()
	if info.Name != aesni.Name || info.Kind != crypto.KindAccelerated || info.Priority != aesni.Priority {
		t.Fatalf("info %+v", info)
	}
	if len(p.Capabilities()) != 12+4+3+1 {
		t.Fatalf("%d capabilities, want 20 (CBC×3 keys×4 HMACs, NULL×4, GCM×3 keys, ChaCha20-Poly1305)", len(p.Capabilities()))
	}
	fw := crypto.New(crypto.Options{CalibrationBudget: 1e6, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer func() { fw.Close(testwait.Context(t)) }()
	if err := fw.Register(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	st := fw.Providers()[0]
	if st.State != crypto.StateOK || !st.SelfTest.Passed || st.SelfTest.Vectors < 19 {
		t.Fatalf("status %+v", st)
	}
}
