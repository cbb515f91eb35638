package ipsec

import (
	"context"
	"fmt"
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

// binder creates a binding for one SA; label names the SA (no keys) for
// the crypto framework's status and errors.
type binder func(label string, p crypto.SessionParams, done crypto.CompletionFunc) (binding, error)

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
	return func(_ string, sp crypto.SessionParams, done crypto.CompletionFunc) (binding, error) {
		s, err := p.NewSession(sp, done)
		if err != nil {
			return nil, err
		}
		return &sessionBinding{name: name, s: s}, nil
	}
}

// saLabel names s for its crypto binding: the engine's name, then the SA
// as setkey writes it (protocol, addresses, SPI). No key material.
func (e *Engine) saLabel(s *sa) string {
	l := fmt.Sprintf("SA %s %s->%s spi 0x%x", s.cfg.Proto, s.cfg.Src.Addr(), s.cfg.Dst.Addr(), s.cfg.SPI)
	if e.opts.Name != "" {
		l = e.opts.Name + " " + l
	}
	return l
}
