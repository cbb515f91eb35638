package ipsec

import (
	"context"

	"github.com/keelinit/keel/crypto"
)

// fwBinding adapts a *crypto.Binding (live rebind) to the engine.
type fwBinding struct{ b *crypto.Binding }

func (f *fwBinding) Submit(reqs []*crypto.Request) int { return f.b.Submit(reqs) }
func (f *fwBinding) Provider() string                  { return f.b.Provider() }
func (f *fwBinding) Rebinds() uint64                   { return f.b.Status().Rebinds }
func (f *fwBinding) Close(ctx context.Context) error   { return f.b.Close(ctx) }

// NewEngine returns an engine whose SAs bind through fw: each SA holds a
// crypto.Binding on the fastest admitted provider for its algorithm and
// follows the framework's live rebinds; the binding's label names the SA
// (Options.Name, protocol, addresses, SPI), never its keys. The engine starts empty (no SA, no
// policy: everything outbound is dropped with DropNoPolicy); configure it
// with Apply. Close it to zero the keys and stop its housekeeping
// goroutine. fw must outlive the engine.
func NewEngine(fw *crypto.Framework, opts Options) *Engine {
	return newEngine(func(label string, p crypto.SessionParams, done crypto.CompletionFunc) (binding, error) {
		b, err := fw.Bind(p, done)
		if err != nil {
			return nil, err
		}
		b.SetLabel(label)
		return &fwBinding{b: b}, nil
	}, opts)
}
