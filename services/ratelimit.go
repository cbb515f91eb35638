package services

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Notify warnings are rate limited: the notify socket is writable by every
// local user (children may drop privileges), so anyone can send datagrams
// that are rejected; without a bound a flood would grow keeld's log (and
// whatever stores it) without limit.
const (
	notifyWarnBurst  = 10               // warnings logged per window
	notifyWarnWindow = 10 * time.Second // window length
	// MaxStatusText bounds a service's STATUS= text as kept and shown.
	MaxStatusText = 256
)

// logLimiter allows burst events per window. It is safe for concurrent
// use; the zero value allows nothing until burst and per are set.
type logLimiter struct {
	burst int
	per   time.Duration

	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

// allow reports whether an event at now may be logged and, when it may,
// how many events were suppressed since the last allowed one, so that the
// caller can say so.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= l.per || now.Before(l.start) {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	s := l.suppressed
	l.suppressed = 0
	return true, s
}

// sanitizeStatus makes a service's STATUS= text safe to keep and print: at
// most MaxStatusText bytes of valid UTF-8 (cut on a rune boundary), with
// control characters (terminal escapes included) replaced by spaces.
func sanitizeStatus(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) {
			r = ' '
		}
		if b.Len()+utf8.RuneLen(r) > MaxStatusText {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sanitizeLine makes a line of a service's output safe to keep and print
// (keelctl status shows it on an operator's terminal): a trailing CR is
// dropped, other control characters except tab (C0, DEL, C1: terminal
// escapes) are shown as \xNN, invalid UTF-8 becomes U+FFFD. Clean lines are
// returned as they are, without allocating.
func sanitizeLine(s string) string {
	s = strings.TrimSuffix(s, "\r")
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\t') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) && r != '\t' {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
