package services

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// logRing keeps the last lines logged by or about a service.
type logRing struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

const logRingSize = 200

func (r *logRing) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lines == nil {
		r.lines = make([]string, logRingSize)
	}
	r.lines[r.next] = line
	r.next = (r.next + 1) % logRingSize
	if r.next == 0 {
		r.full = true
	}
}

// last returns up to n most recent lines, oldest first.
func (r *logRing) last(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	if r.full {
		all = append(all, r.lines[r.next:]...)
	}
	all = append(all, r.lines[:r.next]...)
	if n > 0 && len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}

// lineWriter splits a child's output into lines for the ring and the log.
type lineWriter struct {
	u   *unit
	mu  sync.Mutex
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > 4096 {
				w.emit(string(w.buf))
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) emit(line string) {
	line = sanitizeLine(line)
	w.u.ring.add(time.Now().Format("15:04:05.000") + " " + line)
	w.u.m.log.Debug(line, "service", w.u.name)
}

func (u *unit) logf(level slog.Level, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	u.ring.add(time.Now().Format("15:04:05.000") + " keeld: " + msg)
	u.m.log.Log(context.Background(), level, u.name+": "+msg)
}
