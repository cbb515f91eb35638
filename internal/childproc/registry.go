package childproc

import "sync"

var (
	// spawnMu is held shared by Start from before the fork until the pid
	// is registered, and exclusively by the Reaper while it decides on and
	// reaps a pid: see the package documentation.
	spawnMu sync.RWMutex

	regMu sync.Mutex
	reg   = map[int]*Child{}

	// nudge wakes the Reaper after a registered child was reaped: a
	// zombie it skipped while that pid was still registered (pid reuse)
	// may now be reapable, and no further SIGCHLD may come.
	nudge = make(chan struct{}, 1)
)

func register(c *Child) {
	regMu.Lock()
	reg[c.Pid] = c
	regMu.Unlock()
}

// unregister forgets c's pid unless a newer Child has registered it since.
func unregister(c *Child) {
	regMu.Lock()
	if reg[c.Pid] == c {
		delete(reg, c.Pid)
	}
	regMu.Unlock()
	select {
	case nudge <- struct{}{}:
	default:
	}
}

// registered reports whether pid belongs to a Child that has not been
// reaped by its own wait yet.
func registered(pid int) bool {
	regMu.Lock()
	defer regMu.Unlock()
	_, ok := reg[pid]
	return ok
}
