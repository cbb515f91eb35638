package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keelinit/keel/services"
)

// securityManager is a Manager over a one-service root (service "a", not
// started), without a notify socket.
func securityManager(t *testing.T) *services.Manager {
	return testManager(t, map[string]string{"etc/rc.d/a": "# PROVIDE: a\n\nname=a\ntype=oneshot\ncommand=/bin/true\n"})
}

// testManager is a Manager, not booted and without a notify socket, over a
// root holding files (path: content; all executable, as legacy scripts
// must be).
func testManager(t *testing.T, files map[string]string) *services.Manager {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := services.New(services.Options{Root: os.DirFS(root), RootDir: root, RuntimeDir: t.TempDir(), NoNotify: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// TestEveryMutatingRouteChecksPeer classifies every route: the core
// routes and routes mounted with Handle (any method but GET/HEAD, and a
// pattern without a method) refuse a caller that is neither root, keeld's
// uid nor in the control group, and a connection whose peer credentials
// could not be read, without running the handler; read-only routes serve
// everyone who can connect.
func TestEveryMutatingRouteChecksPeer(t *testing.T) {
	if os.Getuid() == 4242 {
		t.Skip("test uid collides with the stranger uid")
	}
	m := securityManager(t)
	var shutdowns, mounted atomic.Int32
	s := NewServer(m, Options{Group: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Shutdown: func() { shutdowns.Add(1) }})
	count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mounted.Add(1); WriteJSON(w, 200, "ok") })
	for _, p := range []string{"GET /x/get", "HEAD /x/head", "POST /x/post", "PUT /x/put", "DELETE /x/delete", "PATCH /x/patch", "/x/any"} {
		s.Handle(p, count)
	}
	stranger := Peer{UID: 4242, GID: 4242, PID: -1}
	me := Peer{UID: os.Getuid(), GID: os.Getgid(), PID: os.Getpid()}
	tests := []struct {
		method, path string
		mutating     bool
	}{
		{"GET", "/v1/services", false},
		{"GET", "/v1/services/a", false},
		{"GET", "/v1/boot", false},
		{"GET", "/v1/boot/status", false},
		{"GET", "/v1/graph", false},
		{"GET", "/x/get", false},
		{"HEAD", "/x/head", false},
		{"POST", "/v1/services/a/start", true},
		{"POST", "/v1/services/a/stop", true},
		{"POST", "/v1/services/a/restart", true},
		{"POST", "/v1/services/a/reload", true},
		{"POST", "/v1/services/a/bogus", true},
		{"POST", "/v1/reload", true},
		{"POST", "/v1/shutdown", true},
		{"POST", "/x/post", true},
		{"PUT", "/x/put", true},
		{"DELETE", "/x/delete", true},
		{"PATCH", "/x/patch", true},
		{"POST", "/x/any", true},
		{"GET", "/x/any", true}, // no method in the pattern: privileged
	}
	for _, tt := range tests {
		for _, who := range []struct {
			name string
			peer *Peer
		}{{"stranger", &stranger}, {"no credentials", nil}} {
			ctx := context.Background()
			if who.peer != nil {
				ctx = context.WithValue(ctx, peerKey{}, *who.peer)
			}
			before := mounted.Load()
			req := httptest.NewRequestWithContext(ctx, tt.method, tt.path, strings.NewReader("{}"))
			rec := httptest.NewRecorder()
			s.mux.ServeHTTP(rec, req)
			refused := rec.Code == http.StatusForbidden
			if refused != tt.mutating {
				t.Errorf("%s %s as %s: status %d, want refused=%v", tt.method, tt.path, who.name, rec.Code, tt.mutating)
			}
			if tt.mutating && mounted.Load() != before {
				t.Errorf("%s %s as %s: handler ran although refused", tt.method, tt.path, who.name)
			}
		}
	}
	if shutdowns.Load() != 0 {
		t.Fatal("an unprivileged caller shut keeld down")
	}
	for _, st := range m.Status() {
		if st.State != services.StateInactive {
			t.Errorf("an unprivileged caller changed %s to %s", st.Name, st.State)
		}
	}
	// keeld's own uid may change state.
	req := httptest.NewRequestWithContext(context.WithValue(context.Background(), peerKey{}, me), "POST", "/x/post", nil)
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("keeld's uid refused: %d %s", rec.Code, rec.Body)
	}
}

// FuzzDecodeBody: control API request bodies (from any member of the
// socket group) decode into the request types without panicking, reject
// unknown fields and anything after the JSON value (encoding/json's Valid
// is the reference), and never read more than MaxBody. Seed corpus:
// testdata/fuzz/FuzzDecodeBody plus the table below.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"name":"aesni"}`, `{"name":"aesni","force":true}`, `{"name":1}`, `{"nam":"x"}`, `[]`, `null`, ``,
		`{"name":"a"}{"name":"b"}`, `{"name":"aesni"}{"x":1}`, `{"name":"aesni"} x`, `{"name":"aesni"}` + "\n\t ", `{"name":"aesni"}]`, `{"name":"\u0000\ud800"}`, strings.Repeat(`[`, 10000), `{"name":"` + strings.Repeat("x", 1<<20) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v struct {
			Name  string `json:"name"`
			Force bool   `json:"force,omitempty"`
		}
		r := httptest.NewRequest("POST", "/v1/modules/load", bytes.NewReader(body))
		err := DecodeBody(r, &v)
		if err != nil {
			return
		}
		// Reference: encoding/json's own check that the body is exactly
		// one JSON value.
		if !json.Valid(body) {
			t.Fatalf("body %q is not a single JSON value, yet it decoded", body)
		}
		if len(body) > MaxBody {
			t.Fatalf("a %d-byte JSON body decoded (limit %d)", len(body), MaxBody)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) == nil {
			for k := range obj {
				if !strings.EqualFold(k, "name") && !strings.EqualFold(k, "force") {
					t.Fatalf("unknown field %q accepted", k)
				}
			}
		}
	})
}

// TestDecodeBodyOneValue: a body is exactly one JSON value with known
// fields; trailing whitespace is fine, a second value or stray bytes are
// refused with an error that says so.
func TestDecodeBodyOneValue(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string // "" means accepted
	}{
		{`{"name":"aesni"}`, ""},
		{"{\"name\":\"aesni\"}\n \t\r\n", ""},
		{`{"name":"aesni"}{"x":1}`, "after the JSON value at offset 16"},
		{`{"name":"aesni"} {"name":"b"}`, "after the JSON value at offset 16"},
		{`{"name":"aesni"}x`, "after the JSON value"},
		{`{"name":"aesni"}]`, "after the JSON value"},
		{`{"name":"aesni","x":1}`, `unknown field "x"`},
		{``, "EOF"},
		{`{"name":"` + strings.Repeat("x", MaxBody) + `"}`, "too large"},
	}
	for _, tt := range tests {
		var v struct {
			Name string `json:"name"`
		}
		err := DecodeBody(httptest.NewRequest("POST", "/", strings.NewReader(tt.body)), &v)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%.40q: %v", tt.body, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%.40q: error %v, want one containing %q", tt.body, err, tt.wantErr)
		}
	}
}
