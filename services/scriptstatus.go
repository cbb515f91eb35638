package services

import (
	"context"
	"sync"
	"time"
)

// ScriptStatusTTL is how long the answer of a legacy script's status
// action (run as root for keelctl status NAME, which every member of the
// socket group may call) is reused. Within it, and while one run is in
// flight, no other run starts: however many readers ask, at most one root
// shell per TTL runs the script.
const ScriptStatusTTL = 2 * time.Second

// scriptStatusCache is a single-flight cache of one unit's script status.
type scriptStatusCache struct {
	mu      sync.Mutex
	at      time.Time // when the cached answer was produced; zero: none
	line    string
	code    int
	running chan struct{} // closed when the run in flight has stored its answer
}

// cachedScriptStatus returns the script's status line and exit code: the
// cached answer while younger than ScriptStatusTTL, else the answer of the
// run in flight, else that of a new run.
func (u *unit) cachedScriptStatus() (string, int) {
	c := &u.statusCache
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < ScriptStatusTTL {
		defer c.mu.Unlock()
		return c.line, c.code
	}
	if ch := c.running; ch != nil {
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.line, c.code
	}
	ch := make(chan struct{})
	c.running = ch
	c.mu.Unlock()
	line, code := u.scriptStatus(context.Background())
	c.mu.Lock()
	c.line, c.code, c.at, c.running = line, code, time.Now(), nil
	c.mu.Unlock()
	close(ch)
	return line, code
}
