// Package devslot holds the single-device slot of an emulated provider
// module (glxsb, virtio): the options the next load uses and the provider
// of the loaded module. A module that drives one device refuses a second
// load, from any Loader, while the slot is full.
package devslot

import "sync"

// Slot is one device slot. The zero value is empty and ready; all methods
// are safe for concurrent use. O is the provider's options type, P its
// provider pointer type.
type Slot[O any, P comparable] struct {
	mu   sync.Mutex
	opts O
	p    P
}

// Configure sets the options the next Fill passes to its constructor.
func (s *Slot[O, P]) Configure(o O) {
	s.mu.Lock()
	s.opts = o
	s.mu.Unlock()
}

// Current returns the provider in the slot, or the zero P when empty.
func (s *Slot[O, P]) Current() P {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// Fill creates the slot's provider with the configured options, holding
// the slot while create runs. It returns busy when the slot is already
// full, and create's error (leaving the slot empty) when create fails.
func (s *Slot[O, P]) Fill(busy error, create func(O) (P, error)) (P, error) {
	var zero P
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != zero {
		return zero, busy
	}
	p, err := create(s.opts)
	if err != nil {
		return zero, err
	}
	s.p = p
	return p, nil
}

// Release empties the slot if it still holds p (after the module closed
// it); a stale p leaves a newer provider in place.
func (s *Slot[O, P]) Release(p P) {
	var zero P
	s.mu.Lock()
	if s.p == p {
		s.p = zero
	}
	s.mu.Unlock()
}
