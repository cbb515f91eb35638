package ipsec

import (
	"context"
	"sync/atomic"

	"github.com/keelinit/keel/crypto"
)

// binding is what an SA needs from a crypto.Binding: batch submission with
// in-order completions, the current provider and the rebind count.
type binding interface {
	Submit(reqs []*crypto.Request) int
	Provider() string
	Rebinds() uint64
	Close(ctx context.Context) error
}

// binder creates a binding for one SA.
type binder func(p crypto.SessionParams, done crypto.CompletionFunc) (binding, error)

// sessionBinding binds an SA directly to one provider session (no live
// rebind). It is used when the engine is built on a bare Provider.
type sessionBinding struct {
	name string
	s    crypto.Session
	n    atomic.Uint64
}

func (b *sessionBinding) Submit(reqs []*crypto.Request) int { return b.s.Submit(reqs) }
func (b *sessionBinding) Provider() string                  { return b.name }
func (b *sessionBinding) Rebinds() uint64                   { return 0 }
func (b *sessionBinding) Close(ctx context.Context) error   { return b.s.Close(ctx) }

// providerBinder binds every SA to a session of p.
func providerBinder(p crypto.Provider) binder {
	name := p.Info().Name
	return func(sp crypto.SessionParams, done crypto.CompletionFunc) (binding, error) {
		s, err := p.NewSession(sp, done)
		if err != nil {
			return nil, err
		}
		return &sessionBinding{name: name, s: s}, nil
	}
}
