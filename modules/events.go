package modules

import (
	"fmt"
	"slices"
	"sync"
)

// String returns "loaded", "unloading" or "unloaded".
func (t EventType) String() string {
	switch t {
	case Loaded:
		return "loaded"
	case Unloading:
		return "unloading"
	case Unloaded:
		return "unloaded"
	}
	return fmt.Sprintf("event(%d)", int(t))
}

// String renders e.g. "aesni v1 loaded".
func (e Event) String() string {
	s := fmt.Sprintf("%s v%d %s", e.Module, e.Version, e.Type)
	switch {
	case e.Snapshot:
		s += " (snapshot)"
	case e.Aborted:
		s += " (unload refused)"
	case e.Forced:
		s += " (forced)"
	}
	return s
}

// Subscription receives a Loader's events. Every event published after the
// subscription was created (and, with replay, the snapshot before them) is
// queued without bound and delivered in order on Events; none is dropped
// however slowly the subscriber reads. Methods are safe for concurrent use.
type Subscription struct {
	l      *Loader
	ch     chan Event
	wake   chan struct{} // capacity 1: "the queue grew"
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	queue  []Event
	closed bool
}

// Subscribe returns a new subscription to l's events. With replay, the
// subscription first receives synthetic events (Snapshot true) describing
// the modules that are currently loaded, in load order: a Loaded event for
// each, followed by an Unloading event for a module whose unload is in
// progress. The snapshot is taken atomically with respect to loads and
// unloads, so the live events that follow neither miss nor repeat a change.
// The caller must Close the subscription when done with it.
func (l *Loader) Subscribe(replay bool) *Subscription {
	s := &Subscription{
		l:    l,
		ch:   make(chan Event),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	l.mu.Lock()
	if replay {
		recs := make([]*record, 0, len(l.recs))
		for _, r := range l.recs {
			if r.last == Loaded || r.last == Unloading {
				recs = append(recs, r)
			}
		}
		slices.SortFunc(recs, func(a, b *record) int { return a.id - b.id })
		for _, r := range recs {
			s.queue = append(s.queue, r.event(Loaded, r.loadedAt, true))
			if r.last == Unloading {
				s.queue = append(s.queue, r.event(Unloading, r.lastAt, true))
			}
		}
	}
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	go s.pump()
	return s
}

// Events returns the channel on which events arrive in order. It is closed
// after Close; events still queued at that point are discarded.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Close ends the subscription: no further event is queued, and Events is
// closed shortly after. Close is idempotent and never blocks on the reader.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.l.mu.Lock()
		delete(s.l.subs, s)
		s.l.mu.Unlock()
		s.mu.Lock()
		s.closed = true
		s.queue = nil
		s.mu.Unlock()
		close(s.done)
	})
}

// push queues e. It never blocks; l.mu is held by the caller, which fixes
// one global order of events for all subscribers.
func (s *Subscription) push(e Event) {
	s.mu.Lock()
	if !s.closed {
		s.queue = append(s.queue, e)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pump moves queued events to the unbuffered channel until Close.
func (s *Subscription) pump() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		e := s.queue[0]
		s.queue[0] = Event{}
		s.queue = s.queue[1:]
		if len(s.queue) == 0 {
			s.queue = nil
		}
		s.mu.Unlock()
		select {
		case s.ch <- e:
		case <-s.done:
			return
		}
	}
}
