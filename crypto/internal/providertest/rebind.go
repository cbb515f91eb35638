package providertest

import (
	"sync"
	"time"

	"github.com/keelinit/keel/crypto"
)

// RebindWatch turns a Framework's rebinds into events to wait on: pass
// its OnRebind as crypto.Options.OnRebind. Methods are safe for
// concurrent use.
type RebindWatch struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every rebind
	blocked chan struct{} // if set, closed when a Wait first blocks (tests)
}

// NewRebindWatch returns a watch with no rebind seen yet.
func NewRebindWatch() *RebindWatch { return &RebindWatch{changed: make(chan struct{})} }

// OnRebind is the crypto.Options.OnRebind hook; it never blocks.
func (w *RebindWatch) OnRebind(uint64, crypto.Algorithm, string, string) {
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// Wait returns true once b is on provider (at once if it already is),
// woken by each rebind of the framework, or false after limit.
func (w *RebindWatch) Wait(b *crypto.Binding, provider string, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		// Take the channel before looking, so that a rebind between the
		// look and the wait still wakes us.
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if b.Provider() == provider {
			return true
		}
		w.mu.Lock()
		if w.blocked != nil {
			close(w.blocked)
			w.blocked = nil
		}
		w.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return b.Provider() == provider
		}
	}
}
