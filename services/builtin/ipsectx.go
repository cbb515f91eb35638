package builtin

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/keelinit/keel/services"
)

// ipsecTx is the ipsec builtin as the Manager runs it: the ipsecService
// plus what makes its in-place reload part of a Manager reload's
// all-or-nothing (services.Undoer). It keeps the bytes of the ipsec_file
// the engine runs, read in the same read that the engine's configuration
// was parsed from, so that
//   - Undo, when a service after ipsec fails to apply in the same
//     Manager.Reload, reloads the previous file's bytes and rc.conf view
//     (the file on disk already holds the new ones), and
//   - pktgen mirrors the SAs the engine runs, not the file on disk.
//
// The bytes hold the keys the engine holds; they are zeroed when replaced,
// on Commit of a reload for the previous ones, and on Stop.
type ipsecTx struct {
	*ipsecService

	mu      sync.Mutex
	cur     []byte               // the running engine's ipsec_file
	curEnv  services.BuiltinEnv  // and the env it came with
	prev    []byte               // before the last Reload, until Commit or Undo
	prevEnv *services.BuiltinEnv // nil: nothing to undo
}

// Start starts the service and keeps the file it started from.
func (t *ipsecTx) Start(ctx context.Context, env services.BuiltinEnv) error {
	data, err := recorded(ctx, env, t.ipsecService.Start)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.cur)
	t.cur, t.curEnv = data, env
	t.dropPrevLocked()
	return nil
}

// Reload reloads in place (ipsecService.Reload, all or nothing by itself)
// and, when it applied, keeps what ran before for Undo.
func (t *ipsecTx) Reload(ctx context.Context, env services.BuiltinEnv) error {
	data, err := recorded(ctx, env, t.ipsecService.Reload)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropPrevLocked()
	prevEnv := t.curEnv
	t.prev, t.prevEnv = t.cur, &prevEnv
	t.cur, t.curEnv = data, env
	return nil
}

// recorded runs op (Start or Reload) on env with its ipsec_file recorded
// and returns the bytes op read, or op's error (and nothing kept).
func recorded(ctx context.Context, env services.BuiltinEnv, op func(context.Context, services.BuiltinEnv) error) ([]byte, error) {
	rec, renv := recording(env)
	if err := op(ctx, renv); err != nil {
		rec.zero()
		return nil, err
	}
	return rec.take(), nil
}

// Undo reloads the configuration that ran before the last Reload: the
// previous ipsec_file bytes and rc.conf view. If that fails, the
// configuration of the last Reload keeps running (ipsecService.Reload is
// all or nothing) and the previous one is dropped.
func (t *ipsecTx) Undo(ctx context.Context) error {
	t.mu.Lock()
	prev, penv := t.prev, t.prevEnv
	t.mu.Unlock()
	if penv == nil {
		return nil
	}
	env := *penv
	env.Root = overlay(env, prev)
	if err := t.ipsecService.Reload(ctx, env); err != nil {
		t.Commit() // the new configuration keeps running (or none)
		return fmt.Errorf("ipsec: back to the previous configuration: %w", err)
	}
	env.Log.Info("reload undone: the previous configuration runs again")
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.cur)
	t.cur, t.curEnv = prev, *penv
	t.prev, t.prevEnv = nil, nil
	return nil
}

// Commit drops (zeroes) the configuration Undo would have gone back to.
func (t *ipsecTx) Commit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropPrevLocked()
}

func (t *ipsecTx) dropPrevLocked() {
	clear(t.prev)
	t.prev, t.prevEnv = nil, nil
}

// Stop stops the service and zeroes the bytes kept.
func (t *ipsecTx) Stop(ctx context.Context) error {
	err := t.ipsecService.Stop(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.cur)
	t.cur = nil
	t.dropPrevLocked()
	return err
}

// runningRoot returns env's Root with ipsec_file replaced by the bytes the
// engine runs, when the service runs (pktgen's view of the SAs); env's
// Root otherwise.
func (t *ipsecTx) runningRoot(env services.BuiltinEnv) fs.FS {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur == nil || t.curEnv.Config.Get("ipsec_file") != env.Config.Get("ipsec_file") {
		return env.Root
	}
	return overlay(env, bytes.Clone(t.cur))
}

// fileRel is the root-relative path of env's ipsec_file, as readConfig
// reads it.
func fileRel(env services.BuiltinEnv) string {
	return strings.TrimPrefix(path.Clean("/"+env.Config.Get("ipsec_file")), "/")
}

// recordFS is a root whose ReadFile of one file keeps a copy of what it
// read (readConfig zeroes its own).
type recordFS struct {
	fs.FS
	rel  string
	mu   sync.Mutex
	data []byte
}

// recording returns env with its Root recording ipsec_file.
func recording(env services.BuiltinEnv) (*recordFS, services.BuiltinEnv) {
	r := &recordFS{FS: env.Root, rel: fileRel(env)}
	env.Root = r
	return r, env
}

// ReadFile reads name from the underlying root, keeping a copy of the
// recorded file.
func (r *recordFS) ReadFile(name string) ([]byte, error) {
	data, err := fs.ReadFile(r.FS, name)
	if err == nil && name == r.rel {
		r.mu.Lock()
		clear(r.data)
		r.data = bytes.Clone(data)
		r.mu.Unlock()
	}
	return data, err
}

// take returns the recorded bytes and forgets them.
func (r *recordFS) take() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.data
	r.data = nil
	return d
}

func (r *recordFS) zero() { clear(r.take()) }

// overlayFS is a root whose ipsec_file reads as data (a fresh copy per
// read) and every other file as in the underlying root.
type overlayFS struct {
	fs.FS
	rel  string
	data []byte
}

// overlay returns env's Root with ipsec_file reading as data.
func overlay(env services.BuiltinEnv, data []byte) fs.FS {
	return &overlayFS{FS: env.Root, rel: fileRel(env), data: data}
}

// ReadFile returns a copy of the overlaid bytes for the overlaid file.
func (o *overlayFS) ReadFile(name string) ([]byte, error) {
	if name == o.rel {
		return bytes.Clone(o.data), nil
	}
	return fs.ReadFile(o.FS, name)
}
