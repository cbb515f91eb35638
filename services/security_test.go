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

// TestBadConfigNamesWhere: a bad rc.conf or rc.d value is reported with
// the file and line that set it (rc.conf when the value comes from there,
// not the rc.d file that uses it) and the field, never with a made-up
// position, and a broken rc.conf fails the load as a whole.
func TestBadConfigNamesWhere(t *testing.T) {
	a := svc("a", "", "name=a\ncommand=/bin/true\n")
	tests := []struct {
		name    string
		files   tree
		loadErr string // error of LoadCatalog, or "" and defErr for a
		defErr  string
	}{
		{"rc.conf syntax", tree{"etc/rc.conf": "x=1\nfoo=\"unterminated\n", "etc/rc.d/a": a}, "etc/rc.conf:2:5: ", ""},
		{"rc.conf command substitution", tree{"etc/rc.conf": "x=1\nfoo=$(reboot)\n", "etc/rc.d/a": a}, "etc/rc.conf:2:5: command substitution is not allowed", ""},
		{"rc.d field", tree{"etc/rc.d/a": svc("a", "", "name=a\ntype=weird\ncommand=/bin/true\n")}, "", "etc/rc.d/a:4: type: "},
		{"rc.d value from rc.conf", tree{"etc/rc.conf": "x=1\ny=2\ntype=weird\n", "etc/rc.d/a": a}, "", "etc/rc.conf:3: type: "},
		{"rc.d missing field", tree{"etc/rc.d/a": svc("a", "", "name=a\n")}, "", "etc/rc.d/a: command: "},
		{"rc.d bad duration", tree{"etc/rc.d/a": svc("a", "", "name=a\ncommand=/bin/true\nstart_timeout=forever\n")}, "", "etc/rc.d/a:5: start_timeout: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeRoot(t, tt.files)
			cat, err := LoadCatalog(os.DirFS(root), nil)
			if tt.loadErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.loadErr) || cat != nil {
					t.Fatalf("LoadCatalog = %v, %v; want no catalog and an error containing %q", cat != nil, err, tt.loadErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range cat.Defs {
				if d.Name != "a" {
					continue
				}
				if d.Err == nil || !strings.HasPrefix(d.Err.Error(), tt.defErr) {
					t.Errorf("a: %v, want prefix %q", d.Err, tt.defErr)
				}
				return
			}
			t.Fatal("no definition for a")
		})
	}
}

// TestServiceOutputSanitized: what a service prints reaches the log ring
// (and so keelctl status on an operator's terminal) without terminal
// escapes or control characters; clean lines pass unchanged and without
// allocating.
func TestServiceOutputSanitized(t *testing.T) {
	m := &Manager{log: slog.New(&countingHandler{})}
	u := &unit{m: m, name: "svc"}
	w := &lineWriter{u: u}
	_, _ = w.Write([]byte("plain line\nwin line\r\n\x1b]0;owned\x07\x1b[2Jcleared\n\tindented\xff\xc2\x9b1m\n"))
	want := []string{"plain line", "win line", `\x1b]0;owned\x07\x1b[2Jcleared`, "\tindented\uFFFD\\x9b1m"}
	got := u.ring.last(0)
	if len(got) != len(want) {
		t.Fatalf("ring %q, want %d lines", got, len(want))
	}
	for i := range want {
		// Ring lines are "hh:mm:ss.mmm " + line.
		if line := got[i][13:]; line != want[i] {
			t.Errorf("line %d = %q, want %q", i, line, want[i])
		}
	}
	clean := "a perfectly ordinary line\twith a tab and ünïcode"
	if n := testing.AllocsPerRun(100, func() { _ = sanitizeLine(clean) }); n != 0 || sanitizeLine(clean) != clean {
		t.Errorf("clean line: %v allocs, %q", n, sanitizeLine(clean))
	}
}
