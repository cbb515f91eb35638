package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

func newLogger(format, level string, t0 time.Time) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level %q: %w", level, err)
	}
	if format == "auto" {
		format = "text"
		if ok, _ := journal.StderrIsJournalStream(); ok && journal.Enabled() {
			format = "journal"
		}
	}
	switch format {
	case "text":
		return slog.New(&bootHandler{w: os.Stderr, t0: t0, level: lv}), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv})), nil
	case "journal":
		if !journal.Enabled() {
			return slog.New(&bootHandler{w: os.Stderr, t0: t0, level: lv}), nil
		}
		return slog.New(&journalHandler{level: lv}), nil
	}
	return nil, fmt.Errorf("log-format %q: want auto, text, json or journal", format)
}

// bootHandler prints a compact, readable boot log: the time since keeld
// started, the level when it is not INFO, the message and attributes.
type bootHandler struct {
	mu     *sync.Mutex
	w      io.Writer
	t0     time.Time
	level  slog.Level
	attrs  string
	prefix string // "service: " from a service attribute
}

func (h *bootHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *bootHandler) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "[%9.3fms] ", float64(r.Time.Sub(h.t0).Microseconds())/1000)
	if r.Level != slog.LevelInfo {
		sb.WriteString(r.Level.String() + " ")
	}
	sb.WriteString(h.prefix)
	sb.WriteString(r.Message)
	sb.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		sb.WriteString(" " + a.String())
		return true
	})
	sb.WriteByte('\n')
	if h.mu == nil {
		h.mu = &logMu
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, sb.String())
	return err
}

var logMu sync.Mutex

func (h *bootHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		if a.Key == "service" && c.prefix == "" {
			c.prefix = a.Value.String() + ": "
			continue
		}
		c.attrs += " " + a.String()
	}
	return &c
}

func (h *bootHandler) WithGroup(string) slog.Handler { return h }

// journalHandler sends records to the systemd journal with structured
// fields.
type journalHandler struct {
	level slog.Level
	attrs []slog.Attr
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *journalHandler) Handle(_ context.Context, r slog.Record) error {
	pri := journal.PriInfo
	switch {
	case r.Level >= slog.LevelError:
		pri = journal.PriErr
	case r.Level >= slog.LevelWarn:
		pri = journal.PriWarning
	case r.Level < slog.LevelInfo:
		pri = journal.PriDebug
	}
	vars := map[string]string{}
	add := func(a slog.Attr) bool {
		k := strings.ToUpper(strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '_'
		}, a.Key))
		if k != "" && k[0] != '_' {
			vars["KEEL_"+k] = a.Value.String()
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	return journal.Send(r.Message, pri, vars)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{level: h.level, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *journalHandler) WithGroup(string) slog.Handler { return h }
