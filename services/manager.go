package services

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keelinit/keel/internal/childproc"
	"github.com/keelinit/keel/services/notify"
)

// Options configure a Manager.
type Options struct {
	// Root is the configuration root: etc/defaults/rc.conf, etc/rc.conf,
	// etc/rc.d/... are read from it. Required.
	Root fs.FS
	// RootDir is the host directory behind Root, if any; required_files
	// and relative paths are resolved against it. Empty for an embedded
	// root, where required_files are checked inside Root.
	RootDir string
	// RuntimeDir holds the notify socket (and, by rc.conf convention,
	// pidfiles). It must exist.
	RuntimeDir string
	// Seed are built-in rc.conf variables evaluated before defaults/rc.conf.
	Seed map[string]string
	// Logger receives the boot log; nil means slog.Default().
	Logger *slog.Logger
	// Builtins implement type=builtin services, by service name.
	Builtins map[string]Builtin
	// LoadModules loads required_modules; nil makes such services fail.
	LoadModules func(ctx context.Context, names []string) error
	// NoNotify disables the sd_notify server (notify=yes services then
	// never become ready).
	NoNotify bool
	// OnProgress is called after every service finishes starting during
	// boot (e.g. to send EXTEND_TIMEOUT_USEC/STATUS= to systemd). Optional.
	OnProgress func(done, total int, name string)
}

// Manager runs the appliance. Create with New, then Boot; Shutdown stops
// everything. All methods are safe for concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.RWMutex
	cat      *Catalog
	units    map[string]*unit
	timeline Timeline
	stopped  []string // shutdown order, for status and tests

	notify   *notify.Server
	pidMu    sync.Mutex
	pids     map[int]*unit
	stopping chan struct{}
	stopOnce sync.Once
	booted   chan struct{}
	bootOnce sync.Once
	opMu     sync.Mutex // serialises reload, manual start/stop and shutdown
	// notifyWarn bounds the warnings about rejected notify datagrams.
	notifyWarn logLimiter
}

// New loads the catalog (rc.conf and rc.d) and starts the notify server.
// It does not start any service.
func New(opts Options) (*Manager, error) {
	if opts.Root == nil {
		return nil, errors.New("services: Options.Root is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{opts: opts, log: opts.Logger, units: map[string]*unit{}, pids: map[int]*unit{},
		stopping: make(chan struct{}), booted: make(chan struct{}),
		notifyWarn: logLimiter{burst: notifyWarnBurst, per: notifyWarnWindow}}
	cat, err := loadCatalog(opts)
	if err != nil {
		return nil, err
	}
	m.cat = cat
	for _, d := range cat.Defs {
		m.units[d.Name] = &unit{m: m, name: d.Name, def: d, state: StateInactive}
	}
	if !opts.NoNotify {
		if opts.RuntimeDir == "" {
			return nil, errors.New("services: Options.RuntimeDir is required for the notify socket")
		}
		s, err := notify.Listen(filepath.Join(opts.RuntimeDir, "notify.sock"), m.onNotify, func(err error) {
			m.notifyWarnf("notify: %v", err)
		})
		if err != nil {
			return nil, err
		}
		m.notify = s
	}
	return m, nil
}

// loadCatalog loads the catalog of opts (Root, Seed) with the settings
// of its builtins (Builtins) added, and a builtin missing from Builtins
// as the service's error.
func loadCatalog(opts Options) (*Catalog, error) {
	cat, err := LoadCatalog(opts.Root, opts.Seed)
	if err != nil {
		return nil, err
	}
	for i, d := range cat.Defs {
		if d.Type != TypeBuiltin || d.Err != nil {
			continue
		}
		b, ok := opts.Builtins[d.Name]
		if !ok {
			dd := *d
			dd.Err = fmt.Errorf("%s: %w %q (have %v)", cat.Chain.Name(d.Path), ErrNoBuiltin, d.Name, sortedKeys(opts.Builtins))
			cat.Defs[i] = &dd
			continue
		}
		dd := *d
		dd.Settings = maps.Clone(d.Settings)
		for k, v := range b.Settings(builtinEnv(opts, d)) {
			dd.Settings[k] = v
		}
		cat.Defs[i] = &dd
	}
	return cat, nil
}

// builtinEnv is the BuiltinEnv of the builtin service d.
func builtinEnv(opts Options, d *Definition) BuiltinEnv {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return BuiltinEnv{Name: d.Name, Config: d.Config, Root: opts.Root, Log: log}
}

// Catalog returns the current catalog.
func (m *Manager) Catalog() *Catalog {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.cat
}

// Problems returns the ordering warnings of the current catalog.
func (m *Manager) Problems() []string {
	var out []string
	for _, p := range m.Catalog().Problems {
		out = append(out, p.Text)
	}
	return out
}

func (m *Manager) unit(name string) (*unit, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	u, ok := m.units[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownService, name)
	}
	return u, nil
}

// Booted is closed when Boot has finished.
func (m *Manager) Booted() <-chan struct{} { return m.booted }

// Boot starts every service of the catalog as a DAG and returns when all
// are started, failed, blocked or disabled. It returns an error listing
// the failed services, if any; the appliance keeps running regardless.
// A Shutdown while Boot runs cancels the services still starting; Boot
// then returns and Shutdown stops what did start.
func (m *Manager) Boot(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	defer m.bootOnce.Do(func() { close(m.booted) })
	if m.isStopping() {
		return ErrShuttingDown
	}
	// Shutdown during boot cancels the services still starting or waiting.
	ctx, cancel := m.untilShutdown(ctx)
	defer cancel()
	cat := m.Catalog()
	units := make([]*unit, len(cat.Defs))
	m.mu.Lock()
	for i, d := range cat.Defs {
		units[i] = m.units[d.Name]
	}
	t0 := time.Now()
	m.timeline = Timeline{Started: t0}
	m.mu.Unlock()
	cat.logNotices(m.log)
	for _, u := range units {
		u.set(StateWaiting, "")
	}
	var doneN int
	var dmu sync.Mutex
	outs := RunDAG(ctx, cat.Deps, cat.Hard, func(ctx context.Context, i int) error {
		return units[i].start(ctx)
	}, func(i int, o Outcome) {
		if o.BlockedBy >= 0 {
			units[i].set(StateBlocked, "blocked by "+cat.Defs[o.BlockedBy].Name)
			units[i].logf(slog.LevelWarn, "not started: blocked by %s", cat.Defs[o.BlockedBy].Name)
		} else if o.Err == nil && len(o.AfterFailed) > 0 {
			units[i].startedAfterFailed(cat.names(o.AfterFailed))
		}
		if m.opts.OnProgress != nil {
			dmu.Lock()
			doneN++
			n := doneN
			dmu.Unlock()
			m.opts.OnProgress(n, len(units), cat.Defs[i].Name)
		}
	})
	spans := make([]Span, 0, len(outs))
	var failed []string
	for i, o := range outs {
		d := cat.Defs[i]
		st := units[i].snapshot().State
		sp := Span{Name: d.Name, State: st}
		for _, j := range cat.Deps[i] {
			sp.Requires = append(sp.Requires, cat.Defs[j].Name)
		}
		if o.Ran() && st != StateDisabled {
			sp.Start, sp.Ready = o.Start.Sub(t0), o.End.Sub(t0)
		}
		spans = append(spans, sp)
		if o.Err != nil && o.BlockedBy < 0 {
			failed = append(failed, d.Name)
		}
	}
	m.mu.Lock()
	m.timeline.Spans = spans
	m.timeline.Finished = time.Since(t0)
	m.mu.Unlock()
	if len(failed) > 0 {
		return fmt.Errorf("boot: %d service(s) failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// Timeline returns the boot timeline.
func (m *Manager) Timeline() Timeline {
	m.mu.RLock()
	defer m.mu.RUnlock()
	tl := m.timeline
	tl.Spans = slices.Clone(tl.Spans)
	return tl
}

// Status returns one row per service, in rcorder boot order.
func (m *Manager) Status() []Status {
	cat := m.Catalog()
	out := make([]Status, 0, len(cat.Defs))
	for _, i := range cat.Order {
		if u, err := m.unit(cat.Defs[i].Name); err == nil {
			out = append(out, u.snapshot())
		}
	}
	return out
}

// Detail returns the status of one service with its relations and last
// log lines (at most lines; 0 means 10).
func (m *Manager) Detail(name string, lines int) (Detail, error) {
	u, err := m.unit(name)
	if err != nil {
		return Detail{}, err
	}
	if lines <= 0 {
		lines = 10
	}
	cat := m.Catalog()
	i, _ := cat.Lookup(name)
	d := u.getDef()
	det := Detail{Status: u.snapshot(), Path: d.Path, Provides: d.Provides, Command: d.Argv(), Rcvar: d.Rcvar,
		Settings: d.Settings, Log: u.ring.last(lines), Keywords: d.Keywords}
	if d.Type == TypeScript && det.State == StateExited && m.opts.RootDir != "" {
		// service(8)-style: ask the script itself.
		line, code := u.cachedScriptStatus()
		det.StatusText = line
		if code != 0 {
			det.Reason = fmt.Sprintf("%s status exited %d", d.Path, code)
		}
	}
	for _, j := range cat.Deps[i] {
		det.Requires = append(det.Requires, cat.Defs[j].Name)
	}
	for _, j := range cat.RequiredBy(i) {
		det.RequiredBy = append(det.RequiredBy, cat.Defs[j].Name)
	}
	return det, nil
}

// Graph returns the DOT rendering of the current catalog.
func (m *Manager) Graph() string { return m.Catalog().DOT() }

// Start starts a service, first starting any requirement that is not
// active. A disabled service is refused.
func (m *Manager) Start(ctx context.Context, name string) error {
	ctx, cancel := m.untilShutdown(ctx)
	defer cancel()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.startLocked(ctx, name, map[string]bool{})
}

func (m *Manager) startLocked(ctx context.Context, name string, seen map[string]bool) error {
	if m.isStopping() {
		return ErrShuttingDown
	}
	u, err := m.unit(name)
	if err != nil {
		return err
	}
	if seen[name] {
		return nil
	}
	seen[name] = true
	d := u.getDef()
	if !d.Enabled {
		return fmt.Errorf("%s: disabled (%s)", name, disabledReason(d))
	}
	cat := m.Catalog()
	i, _ := cat.Lookup(name)
	var after []int
	for _, j := range cat.Deps[i] {
		dep := cat.Defs[j]
		du, _ := m.unit(dep.Name)
		if !dep.Enabled || du.active() {
			continue
		}
		if err := m.startLocked(ctx, dep.Name, seen); err != nil {
			if !cat.Hard(i, j) {
				after = append(after, j) // REQUIRE orders; it does not forbid
				continue
			}
			u.set(StateBlocked, "blocked by "+dep.Name)
			return fmt.Errorf("%s: requisite %s: %w", name, dep.Name, err)
		}
	}
	if u.active() {
		return nil
	}
	if err := u.start(ctx); err != nil {
		return err
	}
	if len(after) > 0 {
		u.startedAfterFailed(cat.names(after))
	}
	return nil
}

// Stop stops a service after stopping the active services bound to it:
// those that list it as requisite, and builtins that require it (they
// hold in-process references to it, as in Restart). Other services that
// merely REQUIRE it, for ordering, stay up.
func (m *Manager) Stop(ctx context.Context, name string) error {
	ctx, cancel := m.untilShutdown(ctx)
	defer cancel()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.stopLocked(ctx, name, map[string]bool{})
}

func (m *Manager) stopLocked(ctx context.Context, name string, seen map[string]bool) error {
	u, err := m.unit(name)
	if err != nil {
		return err
	}
	if seen[name] {
		return nil
	}
	seen[name] = true
	cat := m.Catalog()
	i, _ := cat.Lookup(name)
	var errs []error
	for _, j := range cat.RequiredBy(i) {
		if !cat.Hard(j, i) && cat.Defs[j].Type != TypeBuiltin {
			continue
		}
		if du, _ := m.unit(cat.Defs[j].Name); du != nil && du.active() {
			errs = append(errs, m.stopLocked(ctx, cat.Defs[j].Name, seen))
		}
	}
	errs = append(errs, u.stop(ctx))
	return errors.Join(errs...)
}

// Restart stops then starts a service. Active builtins that require it
// (which hold in-process references to it) are restarted with it; other
// dependents stay up.
func (m *Manager) Restart(ctx context.Context, name string) error {
	ctx, cancel := m.untilShutdown(ctx)
	defer cancel()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	u, err := m.unit(name)
	if err != nil {
		return err
	}
	deps := m.builtinDependents(m.Catalog(), name)
	for i := len(deps) - 1; i >= 0; i-- {
		if du, err := m.unit(deps[i]); err == nil {
			_ = du.stop(ctx)
		}
	}
	if err := u.stop(ctx); err != nil {
		u.logf(slog.LevelWarn, "restart: %v", err)
	}
	err = m.startLocked(ctx, name, map[string]bool{})
	for _, dn := range deps {
		if err == nil {
			err = m.startLocked(ctx, dn, map[string]bool{})
		}
	}
	return err
}

// ReloadService asks a running service to reload: a Reloader builtin
// re-applies its configuration, a daemon gets SIGHUP, a script runs
// "reload"; others are restarted.
func (m *Manager) ReloadService(ctx context.Context, name string) error {
	ctx, cancel := m.untilShutdown(ctx)
	defer cancel()
	u, err := m.unit(name)
	if err != nil {
		return err
	}
	u.mu.Lock()
	d, p, b, st := u.def, u.proc, u.builtin, u.state
	u.mu.Unlock()
	if st != StateRunning && st != StateExited {
		return fmt.Errorf("%s is %s", name, st)
	}
	switch {
	case d.Type == TypeDaemon && p != nil:
		u.logf(slog.LevelInfo, "reload: sending SIGHUP to %d", p.pid)
		return killGroup(p.pid, 1)
	case d.Type == TypeBuiltin && b != nil:
		if _, ok := b.(Reloader); ok {
			u.logf(slog.LevelInfo, "reload")
			err := u.reload(ctx)
			if un, ok := u.getBuiltin().(Undoer); ok && err == nil {
				un.Commit() // nothing after it to roll back for
			}
			return err
		}
	case d.Type == TypeScript:
		return u.runAux(ctx, d, "reload", append(d.Argv(), "reload"))
	}
	return m.Restart(ctx, name)
}

// builtinDependents returns the active builtin services that require
// name, transitively, in boot order. Builtins hold in-process references to
// what they require (the crypto framework, the IPsec engine), so they are
// restarted with it.
func (m *Manager) builtinDependents(cat *Catalog, name string) []string {
	i, ok := cat.Lookup(name)
	if !ok {
		return nil
	}
	want := map[int]bool{}
	queue := []int{i}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, j := range cat.RequiredBy(x) {
			d := cat.Defs[j]
			if want[j] || d.Type != TypeBuiltin {
				continue
			}
			if u, err := m.unit(d.Name); err != nil || !u.active() {
				continue
			}
			want[j] = true
			queue = append(queue, j)
		}
	}
	var out []string
	for _, j := range cat.Order {
		if want[j] {
			out = append(out, cat.Defs[j].Name)
		}
	}
	return out
}

func (m *Manager) isStopping() bool {
	select {
	case <-m.stopping:
		return true
	default:
		return false
	}
}

// untilShutdown returns ctx, cancelled with ErrShuttingDown as well when
// Shutdown begins: an operation that holds opMu (boot, a manual start or
// stop, a reload) then ends promptly, instead of running out its start
// and stop timeouts while Shutdown waits for opMu.
func (m *Manager) untilShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-m.stopping:
			cancel(ErrShuttingDown)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Stopping is closed when Shutdown begins.
func (m *Manager) Stopping() <-chan struct{} { return m.stopping }

// Shutdown stops every service in reverse dependency order (a service
// stops only after every service that requires it has stopped, in
// parallel otherwise) and closes the notify server. Later calls return
// immediately with nil. Pending restarts are cancelled. ctx's deadline
// bounds the whole shutdown: every stop_timeout is cut short by it, and a
// daemon still running then is killed.
func (m *Manager) Shutdown(ctx context.Context) error {
	first := false
	m.stopOnce.Do(func() { close(m.stopping); first = true })
	if !first {
		return nil
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	cat := m.Catalog()
	n := len(cat.Defs)
	rdeps := make([][]int, n)
	for i, ds := range cat.Deps {
		for _, d := range ds {
			rdeps[d] = append(rdeps[d], i)
		}
	}
	units := make([]*unit, n)
	for i, d := range cat.Defs {
		units[i], _ = m.unit(d.Name)
	}
	m.log.Info("shutdown: stopping services in reverse order")
	var smu sync.Mutex
	var errs []error
	// RunDAG must visit every unit even past the deadline (so that each is
	// at least killed), hence WithoutCancel; each stop gets ctx itself, so
	// that its deadline bounds every stop_timeout.
	RunDAG(context.WithoutCancel(ctx), rdeps, nil, func(_ context.Context, i int) error {
		u := units[i]
		if u == nil {
			return nil
		}
		wasUp := u.active()
		if err := u.stop(ctx); err != nil {
			smu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", u.name, err))
			smu.Unlock()
		}
		if wasUp {
			m.mu.Lock()
			m.stopped = append(m.stopped, u.name)
			m.mu.Unlock()
		}
		return nil // keep going: a failed stop must not block the rest
	}, nil)
	if m.notify != nil {
		_ = m.notify.Close()
	}
	m.log.Info("shutdown complete", "stopped", len(m.StopOrder()))
	return errors.Join(errs...)
}

// StopOrder returns the services stopped by Shutdown, in order.
func (m *Manager) StopOrder() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.stopped)
}

// checkFile checks a required file, always relative to the root: under
// RootDir when set, else inside Root.
func (m *Manager) checkFile(p string) error {
	if m.opts.RootDir != "" {
		_, err := os.Stat(filepath.Join(m.opts.RootDir, p))
		return err
	}
	_, err := fs.Stat(m.opts.Root, strings.TrimPrefix(filepath.Clean(p), "/"))
	return err
}

func (m *Manager) childEnv(d *Definition) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID", "INVOCATION_ID", "JOURNAL_STREAM":
			continue
		}
		env = append(env, kv)
	}
	if m.notify != nil {
		env = append(env, "NOTIFY_SOCKET="+m.notify.Path())
	}
	env = append(env, "KEEL_SERVICE="+d.Name, "KEEL_RUNTIME_DIR="+m.opts.RuntimeDir)
	return env
}

func (m *Manager) trackPID(pid int, u *unit) {
	m.pidMu.Lock()
	m.pids[pid] = u
	m.pidMu.Unlock()
}

func (m *Manager) untrackPID(pid int) {
	m.pidMu.Lock()
	delete(m.pids, pid)
	m.pidMu.Unlock()
}

// owner finds the service whose main process is pid or an ancestor of pid.
func (m *Manager) owner(pid int) *unit {
	for range 32 {
		m.pidMu.Lock()
		u := m.pids[pid]
		m.pidMu.Unlock()
		if u != nil {
			return u
		}
		pp, ok := childproc.ParentPID(pid)
		if !ok || pp <= 1 || pp == os.Getpid() {
			return nil
		}
		pid = pp
	}
	return nil
}

func (m *Manager) onNotify(msg notify.Message) {
	u := m.owner(msg.PID)
	if u == nil {
		m.notifyWarnf("notify: message from pid %d (uid %d) that belongs to no service; ignored", msg.PID, msg.UID)
		return
	}
	if !msg.SenderAlive() {
		// Checked after the lookup: the sender was reaped, so the pid
		// may name another process now, and the lookup may have found that one.
		m.notifyWarnf("notify: message from pid %d (uid %d), which exited before it was handled (its pid may be reused); ignored", msg.PID, msg.UID)
		return
	}
	u.mu.Lock()
	p := u.proc
	d := u.def
	if s, ok := msg.Fields["STATUS"]; ok {
		u.statusText = sanitizeStatus(s)
	}
	u.mu.Unlock()
	if msg.Ready() && p != nil {
		if !d.Notify {
			u.logf(slog.LevelDebug, "READY=1 from pid %d (notify=no, ignored for readiness)", msg.PID)
		}
		p.markReady()
	}
	if v, ok := msg.Fields["EXTEND_TIMEOUT_USEC"]; ok {
		if usec, err := strconv.ParseUint(v, 10, 63); err == nil {
			u.mu.Lock()
			ext := u.extend
			u.mu.Unlock()
			if ext != nil {
				ext(time.Duration(usec) * time.Microsecond)
				u.logf(slog.LevelDebug, "start timeout extended by %v", time.Duration(usec)*time.Microsecond)
			}
		}
	}
	if msg.Fields["STOPPING"] == "1" {
		u.logf(slog.LevelInfo, "service reports STOPPING=1")
	}
}

// notifyWarnf logs a warning about a rejected notify datagram, at most
// notifyWarnBurst per notifyWarnWindow; the next logged one says how many
// were suppressed.
func (m *Manager) notifyWarnf(format string, args ...any) {
	ok, suppressed := m.notifyWarn.allow(time.Now())
	if !ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if suppressed > 0 {
		msg += fmt.Sprintf(" (%d similar warnings suppressed)", suppressed)
	}
	m.log.Warn(msg)
}

// Close shuts down (if not done yet) and releases the notify socket.
func (m *Manager) Close() error { return m.Shutdown(context.Background()) }
