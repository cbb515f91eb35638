package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestMayChange(t *testing.T) {
	me := os.Getuid()
	tests := []struct {
		name  string
		group int
		peer  Peer
		want  bool
	}{
		{"root", -1, Peer{UID: 0, GID: 0, PID: 1}, true},
		{"keeld's own uid", -1, Peer{UID: me, PID: 1}, true},
		{"stranger, no group", -1, Peer{UID: 4242, GID: 4242, PID: -1}, me == 4242},
		{"primary gid in group", 777, Peer{UID: 4242, GID: 777, PID: -1}, true},
		{"other gid", 777, Peer{UID: 4242, GID: 778, PID: -1}, false},
		{"supplementary groups without it", 99999, Peer{UID: 4242, GID: 1, PID: os.Getpid(), Groups: []int{1, 2, 99998}}, false},
		{"supplementary group member", 99999, Peer{UID: 4242, GID: 1, PID: -1, Groups: []int{5, 99999}}, true},
	}
	for _, tt := range tests {
		s := &Server{opts: Options{Group: tt.group}}
		if got := s.mayChange(tt.peer); got != tt.want {
			t.Errorf("%s: mayChange(%+v) = %v, want %v", tt.name, tt.peer, got, tt.want)
		}
	}
}

func TestClientErrorsAndPeerCred(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /forbidden", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusForbidden, errors.New("no"))
	})
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, errors.New("no such thing"))
	})
	mux.HandleFunc("GET /peer", func(w http.ResponseWriter, r *http.Request) {
		p, ok := PeerFrom(r.Context())
		if !ok {
			WriteError(w, 500, errors.New("no peer"))
			return
		}
		WriteJSON(w, 200, p)
	})
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := Listen(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
	if _, err := Listen(sock, -1); err == nil {
		t.Error("second Listen on a live socket succeeded")
	}
	srv := &http.Server{Handler: mux, ConnContext: connContext, ErrorLog: nil}
	go srv.Serve(limitListener{Listener: l, l: newConnLimiter(Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))})
	defer srv.Close()
	c := NewClient(sock)
	ctx := context.Background()
	if err := c.Get(ctx, "/forbidden", nil, nil); !errors.Is(err, ErrPermission) {
		t.Errorf("forbidden: %v", err)
	}
	if err := c.Get(ctx, "/missing", nil, nil); !errors.Is(err, ErrNotFound) || err.Error() != "not found: no such thing" {
		t.Errorf("missing: %v", err)
	}
	var p Peer
	groups, _ := os.Getgroups()
	if err := c.Get(ctx, "/peer", nil, &p); err != nil || p.PID != os.Getpid() || p.UID != os.Getuid() || !slices.Equal(p.Groups, groups) {
		t.Errorf("peer %+v %v, want pid %d uid %d groups %v", p, err, os.Getpid(), os.Getuid(), groups)
	}
	if err := NewClient(filepath.Join(dir, "none.sock")).Get(ctx, "/peer", nil, nil); err == nil {
		t.Error("no server: no error")
	}
}
