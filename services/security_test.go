package services

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/services/notify"
)

// countingHandler counts and keeps the messages logged through it.
type countingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// TestNotifyFloodBounded: the notify socket is world-writable, so a local
// user can flood it with datagrams from a pid that belongs to no service,
// and with malformed ones. Each is rejected, and the warnings they cause
// are bounded (burst per window), so the flood cannot grow keeld's log.
func TestNotifyFloodBounded(t *testing.T) {
	h := &countingHandler{}
	root := writeRoot(t, tree{"etc/rc.d/a": svc("a", "", "name=a\ntype=oneshot\ncommand=/bin/true\n")})
	m, err := New(Options{Root: os.DirFS(root), RootDir: root, RuntimeDir: t.TempDir(), Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	fi, err := os.Stat(m.notify.Path())
	if err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("notify socket mode %v %v, want 0666", fi.Mode(), err)
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: m.notify.Path(), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 400
	for i := range n {
		msg := "READY=1\nSTATUS=forged"
		if i%2 == 1 {
			msg = "no equals sign"
		}
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	// The forged sender is us: no service owns this pid. Wait for the
	// first warnings, then give the reader time to drain the queue.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && h.count("notify:") < notifyWarnBurst {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	got := h.count("notify:")
	if got == 0 || got > notifyWarnBurst {
		t.Fatalf("%d notify warnings for %d rejected datagrams, want 1..%d", got, n, notifyWarnBurst)
	}
	if h.count("belongs to no service") == 0 || h.count("malformed") == 0 {
		t.Errorf("warnings do not say why datagrams were rejected: %v", h.msgs)
	}
	for _, st := range m.Status() {
		if st.StatusText != "" {
			t.Errorf("%s: forged STATUS accepted: %q", st.Name, st.StatusText)
		}
	}
	// Direct calls: however many, at most a burst is logged per window.
	before := h.count("notify:")
	for range 10 * notifyWarnBurst {
		m.onNotify(notify.Message{PID: os.Getpid(), UID: 12345, Fields: map[string]string{"READY": "1"}})
	}
	if d := h.count("notify:") - before; d > notifyWarnBurst {
		t.Errorf("%d warnings logged for %d forged messages within one window", d, 10*notifyWarnBurst)
	}
}

// TestLogLimiter: burst events per window, then silence; the first event
// of a later window is allowed and reports how many were suppressed.
func TestLogLimiter(t *testing.T) {
	l := logLimiter{burst: 3, per: time.Second}
	t0 := time.Unix(1000, 0)
	tests := []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0}, {10 * time.Millisecond, true, 0}, {20 * time.Millisecond, true, 0},
		{30 * time.Millisecond, false, 0}, {999 * time.Millisecond, false, 0},
		{time.Second, true, 2}, {time.Second + 1, true, 0}, {time.Second + 2, true, 0},
		{time.Second + 3, false, 0},
		{-time.Hour, true, 1}, // clock stepped back: a new window
	}
	for i, tt := range tests {
		ok, s := l.allow(t0.Add(tt.at))
		if ok != tt.ok || s != tt.suppressed {
			t.Errorf("event %d at %v: allow = %v, %d; want %v, %d", i, tt.at, ok, s, tt.ok, tt.suppressed)
		}
	}
}

// TestSanitizeStatus: STATUS= text loses control characters (terminal
// escapes) and is cut to MaxStatusText bytes on a rune boundary.
func TestSanitizeStatus(t *testing.T) {
	long := strings.Repeat("é", MaxStatusText) // 2 bytes per rune
	tests := []struct{ in, want string }{
		{"serving 3 clients", "serving 3 clients"},
		{"\x1b[2J\x1b]0;pwned\x07ok", " [2J ]0;pwned ok"},
		{"a\tb\rc\x00d\u0085e", "a b c d e"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{long, long[:MaxStatusText]},
		{"x" + long, "x" + long[:MaxStatusText-2]},
	}
	for _, tt := range tests {
		if got := sanitizeStatus(tt.in); got != tt.want {
			t.Errorf("sanitizeStatus(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := sanitizeStatus(tt.in); len(got) > MaxStatusText {
			t.Errorf("sanitizeStatus(%.20q...) is %d bytes", tt.in, len(got))
		}
	}
}
