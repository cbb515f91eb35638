package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/keelinit/keel/services"
)

// Options configure a Server.
type Options struct {
	// Group is the gid whose members may change state (besides root and
	// keeld's own uid); -1 for none.
	Group int
	// Logger for refused calls; nil means slog.Default().
	Logger *slog.Logger
	// Shutdown is called (once, asynchronously) by POST /v1/shutdown.
	Shutdown func()
	// Limits bound the open connections; zero fields take DefaultLimits.
	Limits Limits
	// IdleTimeout closes a keep-alive connection idle for that long;
	// 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadTimeout bounds reading a request, headers and body; 0 means
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds a read-only call from its start to the end of
	// its answer; 0 means DefaultWriteTimeout. State-changing calls of
	// permitted peers are not bounded (a reload waits for the services it
	// restarts); the client's own timeout applies to them.
	WriteTimeout time.Duration
}

// Default timeouts of the control API's connections.
const (
	DefaultIdleTimeout  = 30 * time.Second
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	readHeaderTimeout   = 10 * time.Second
)

// Server serves the control API for a Manager. Mount extra endpoints with
// Handle before Serve. Serve may be called for several listeners.
type Server struct {
	m     *services.Manager
	opts  Options
	mux   *http.ServeMux
	srv   *http.Server
	conns *connLimiter
}

// NewServer builds the API for m.
func NewServer(m *services.Manager, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{m: m, opts: opts, mux: http.NewServeMux(), conns: newConnLimiter(opts.Limits, opts.Logger)}
	// net/http's own messages (a malformed request, a connection's
	// error) can be provoked once per request by any reader, so they go
	// to the debug level rather than flood the log.
	s.srv = &http.Server{Handler: s.mux, ConnContext: connContext, ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout: orDefault(opts.ReadTimeout, DefaultReadTimeout), WriteTimeout: orDefault(opts.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout: orDefault(opts.IdleTimeout, DefaultIdleTimeout), MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)}
	s.routes()
	return s
}

// Handle mounts h at pattern (a net/http ServeMux pattern with a method,
// e.g. "GET /v1/crypto"). Patterns whose method is not GET or HEAD are
// state-changing and pass the permission check first.
func (s *Server) Handle(pattern string, h http.Handler) {
	method, _, _ := cutSpace(pattern)
	if method != "GET" && method != "HEAD" {
		h = s.privileged(h)
	}
	s.mux.Handle(pattern, h)
}

func cutSpace(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Serve serves l until Close, admitting connections within the Limits
// (counted over all listeners).
func (s *Server) Serve(l net.Listener) error {
	err := s.srv.Serve(limitListener{Listener: l, l: s.conns})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Limits returns the connection limits in force (defaults filled in).
func (s *Server) Limits() Limits { return s.conns.lim }

// ConnStats reports the open and refused connections.
func (s *Server) ConnStats() ConnStats { return s.conns.stats() }

// Close stops serving, waiting up to ctx for in-flight calls.
func (s *Server) Close(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Listen creates the control socket at path with mode 0660, owned by gid
// when gid >= 0, replacing a stale socket.
func Listen(path string, gid int) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another keeld is listening", path)
		}
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("chown %s to gid %d: %w", path, gid, err)
		}
	}
	return l, nil
}

// connContext attaches the peer credentials read when the connection was
// accepted (by a limitListener).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.peer)
	}
	return ctx
}

// mayChange reports whether p may call state-changing endpoints.
func (s *Server) mayChange(p Peer) bool {
	if p.UID == 0 || p.UID == os.Getuid() {
		return true
	}
	if s.opts.Group < 0 {
		return false
	}
	return p.GID == s.opts.Group || slices.Contains(p.Groups, s.opts.Group)
}

func (s *Server) privileged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PeerFrom(r.Context())
		if !ok || !s.mayChange(p) {
			s.opts.Logger.Warn("control: refused state-changing call", "path", r.URL.Path, "uid", p.UID, "pid", p.PID)
			WriteError(w, http.StatusForbidden, fmt.Errorf("%s %s: uid %d may not change state (need root, uid %d or group %d)", r.Method, r.URL.Path, p.UID, os.Getuid(), s.opts.Group))
			return
		}
		// A permitted change may take long (a reload restarts services):
		// lift the write deadline that bounds everyone else. (net/http
		// clears the read deadline itself once the request is read.)
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

// BootInfo is GET /v1/boot/status: whether boot finished and the catalog
// problems.
type BootInfo struct {
	Booted   bool     `json:"booted"`
	Stopping bool     `json:"stopping"`
	Problems []string `json:"problems,omitempty"`
	PID      int      `json:"pid"`
}

func (s *Server) routes() {
	m := s.m
	s.Handle("GET /v1/services", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, 200, m.Status())
	}))
	s.Handle("GET /v1/services/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := m.Detail(r.PathValue("name"), IntParam(r, "lines", 10))
		if err != nil {
			WriteError(w, http.StatusNotFound, err)
			return
		}
		WriteJSON(w, 200, d)
	}))
	s.Handle("POST /v1/services/{name}/{action}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var err error
		switch r.PathValue("action") {
		case "start":
			err = m.Start(r.Context(), name)
		case "stop":
			err = m.Stop(r.Context(), name)
		case "restart":
			err = m.Restart(r.Context(), name)
		case "reload":
			err = m.ReloadService(r.Context(), name)
		default:
			WriteError(w, http.StatusNotFound, fmt.Errorf("unknown action %q", r.PathValue("action")))
			return
		}
		if errors.Is(err, services.ErrUnknownService) {
			WriteError(w, http.StatusNotFound, err)
			return
		}
		if err != nil {
			WriteError(w, http.StatusConflict, err)
			return
		}
		d, _ := m.Detail(name, 10)
		WriteJSON(w, 200, d)
	}))
	s.Handle("POST /v1/reload", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := m.Reload(r.Context())
		if err != nil {
			// The error, and the result with every error listed and what
			// was rolled back.
			WriteJSON(w, http.StatusConflict, struct {
				Error
				services.ReloadResult
			}{Error{err.Error()}, res})
			return
		}
		WriteJSON(w, 200, res)
	}))
	s.Handle("POST /v1/shutdown", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusAccepted, map[string]string{"status": "shutting down"})
		if s.opts.Shutdown != nil {
			go s.opts.Shutdown()
		}
	}))
	s.Handle("GET /v1/boot", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, 200, m.Timeline())
	}))
	s.Handle("GET /v1/boot/status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := BootInfo{Problems: m.Problems(), PID: os.Getpid()}
		select {
		case <-m.Booted():
			info.Booted = true
		default:
		}
		select {
		case <-m.Stopping():
			info.Stopping = true
		default:
		}
		WriteJSON(w, 200, info)
	}))
	s.Handle("GET /v1/graph", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/vnd.graphviz")
		_, _ = w.Write([]byte(m.Graph()))
	}))
}

// MaxBody is the largest request body DecodeBody reads.
const MaxBody = 1 << 20

// DecodeBody decodes a JSON request body into v. The body must be exactly
// one JSON value (trailing whitespace allowed) of at most MaxBody bytes,
// with no field that v does not have; otherwise the error says which rule
// was broken.
func DecodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON value at offset %d", end)
	}
	return nil
}
