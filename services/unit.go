package services

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keelinit/keel/internal/childproc"
	"github.com/keelinit/keel/services/rcconf"
)

// Builtin is a service implemented in Go (type=builtin). The Manager calls
// Start and Stop serialised per service; Status may be called at any time.
type Builtin interface {
	// Settings returns extra effective settings derived from the
	// configuration (e.g. kld_list, a hash of ipsec_file), so that a reload
	// restarts the builtin when they change.
	Settings(env BuiltinEnv) map[string]string
	// Start brings the service up and returns when it is ready, or an
	// error. ctx carries the start timeout.
	Start(ctx context.Context, env BuiltinEnv) error
	// Stop brings it down. It is called only after a successful Start.
	Stop(ctx context.Context) error
	// Status is a one-line STATUS= text.
	Status() string
}

// Degrader is implemented by builtins that can run degraded: up, but not
// doing all of their job (ipsec with SAs that have no crypto provider, or
// whose nonce ledger cannot be written). Degraded returns why, or "" when
// the builtin is whole. It is called for every status read, so it must
// be cheap and must not block.
type Degrader interface {
	Degraded() string
}

// Reloader is implemented by builtins that can apply a configuration
// change in place (keelctl reload NAME) instead of being restarted.
type Reloader interface {
	Reload(ctx context.Context, env BuiltinEnv) error
}

// BuiltinEnv is what a builtin gets from the Manager.
type BuiltinEnv struct {
	Name   string
	Config *rcconf.Config // the service's rc.conf view
	Root   fs.FS          // the configuration root (etc/... inside)
	Log    *slog.Logger   // goes to keeld's log and the service's log lines
}

// proc is one running process of a daemon.
type proc struct {
	pid     int
	started time.Time
	// exited is closed once the process has exited (not when its output
	// closes: a descendant may hold that open) and its pid is untracked.
	exited    chan struct{}
	state     *os.ProcessState
	waitErr   error
	ready     chan struct{}
	readyOnce sync.Once
}

func (p *proc) markReady() { p.readyOnce.Do(func() { close(p.ready) }) }

// unit is the runtime state of one service.
type unit struct {
	m    *Manager
	name string
	ring logRing

	op sync.Mutex // serialises start/stop/restart

	mu         sync.Mutex
	def        *Definition
	state      State
	reason     string
	since      time.Time
	startDur   time.Duration
	restarts   int
	statusText string
	proc       *proc
	builtin    Builtin
	gen        int // bumped by every user stop/start, cancels pending restarts
	failStreak int
	extend     func(time.Duration) // EXTEND_TIMEOUT_USEC while starting

	statusCache scriptStatusCache // of scriptStatus, for Detail
}

func (u *unit) set(st State, reason string) {
	u.mu.Lock()
	u.state, u.reason, u.since = st, reason, time.Now()
	u.mu.Unlock()
}

func (u *unit) snapshot() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := Status{Name: u.name, Type: u.def.Type, State: u.state, Since: u.since, Duration: u.startDur,
		Reason: u.reason, Restarts: u.restarts, StatusText: u.statusText}
	if u.proc != nil && u.state != StateStopped && u.state != StateFailed {
		s.PID = u.proc.pid
	}
	if u.builtin != nil && (u.state == StateRunning || u.state == StateStarting) {
		s.StatusText = u.builtin.Status()
	}
	if d, ok := u.builtin.(Degrader); ok && u.state == StateRunning {
		s.Degraded = d.Degraded()
	}
	return s
}

func (u *unit) getDef() *Definition {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.def
}

// getBuiltin returns the running builtin, or nil.
func (u *unit) getBuiltin() Builtin {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.builtin
}

func (u *unit) active() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state.Active() || u.state == StateStarting
}

// start brings the unit up: required files, modules, start_precmd, then
// the type-specific start and readiness, all within start_timeout.
// A disabled unit is "done" without running.
func (u *unit) start(ctx context.Context) error {
	u.op.Lock()
	defer u.op.Unlock()
	d := u.getDef()
	if !d.Enabled {
		u.set(StateDisabled, disabledReason(d))
		if d.Err != nil {
			u.logf(slog.LevelWarn, "disabled, and its rc.d file is invalid: %v", d.Err)
		}
		return nil
	}
	if d.Err != nil {
		u.set(StateFailed, d.Err.Error())
		u.logf(slog.LevelError, "%v", d.Err)
		return d.Err
	}
	u.mu.Lock()
	u.gen++
	u.mu.Unlock()
	t0 := time.Now()
	u.set(StateStarting, "")
	ctx, cancel := u.startContext(ctx, d.StartTimeout)
	defer cancel()
	err := u.doStart(ctx, d)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrStartTimeout) && !errors.Is(err, ErrStartTimeout) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	dur := time.Since(t0)
	u.mu.Lock()
	u.startDur = dur
	u.mu.Unlock()
	if err != nil {
		u.set(StateFailed, err.Error())
		u.logf(slog.LevelError, "failed to start after %v: %v", dur.Round(time.Microsecond), err)
		return err
	}
	st := StateRunning
	if d.Type == TypeOneshot || d.Type == TypeScript {
		st = StateExited
	}
	u.set(st, "")
	u.logf(slog.LevelInfo, "started in %v%s", dur.Round(time.Microsecond), u.pidSuffix())
	return nil
}

// startContext returns a context cancelled with ErrStartTimeout after
// timeout, a deadline that EXTEND_TIMEOUT_USEC from the service can push
// back (never forward) while the start is in progress.
func (u *unit) startContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t0 := time.Now()
	var mu sync.Mutex
	deadline := t0.Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		cancel(fmt.Errorf("%w after %v", ErrStartTimeout, time.Since(t0).Round(time.Millisecond)))
	})
	u.mu.Lock()
	u.extend = func(ext time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if nd := time.Now().Add(ext); nd.After(deadline) {
			deadline = nd
			timer.Reset(ext)
		}
	}
	u.mu.Unlock()
	return ctx, func() {
		timer.Stop()
		u.mu.Lock()
		u.extend = nil
		u.mu.Unlock()
		cancel(nil)
	}
}

func (u *unit) pidSuffix() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.proc != nil && u.state == StateRunning {
		return fmt.Sprintf(" (pid %d)", u.proc.pid)
	}
	return ""
}

func disabledReason(d *Definition) string {
	if d.SkipReason != "" {
		return d.SkipReason
	}
	if v, ok := d.Config.Lookup(d.Rcvar); ok {
		return fmt.Sprintf("%s=%q", d.Rcvar, v.Value)
	}
	return d.Rcvar + " is not set"
}

func (u *unit) doStart(ctx context.Context, d *Definition) error {
	for _, f := range d.RequiredFiles {
		if err := u.m.checkFile(f); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrRequiredFile, f, err)
		}
	}
	if len(d.RequiredModules) > 0 {
		if u.m.opts.LoadModules == nil {
			return fmt.Errorf("required_modules %v: no module loader", d.RequiredModules)
		}
		if err := u.m.opts.LoadModules(ctx, d.RequiredModules); err != nil {
			return fmt.Errorf("required_modules: %w", err)
		}
	}
	if len(d.StartPrecmd) > 0 {
		if err := u.runAux(ctx, d, "start_precmd", d.StartPrecmd); err != nil {
			return err
		}
	}
	switch d.Type {
	case TypeBuiltin:
		b := u.m.opts.Builtins[d.Name]
		if b == nil {
			return fmt.Errorf("%w %q", ErrNoBuiltin, d.Name)
		}
		if err := b.Start(ctx, u.env(d)); err != nil {
			return err
		}
		u.mu.Lock()
		u.builtin = b
		u.mu.Unlock()
		return nil
	case TypeOneshot:
		if d.Command == "" {
			return nil // a milestone such as DAEMON or NETWORKING
		}
		return u.runAux(ctx, d, "command", d.Argv())
	case TypeScript:
		return u.runAux(ctx, d, "start", append(d.Argv(), "start"))
	case TypeDaemon:
		p, err := u.spawnDaemon(ctx, d)
		if err == nil {
			go u.supervise(p)
		}
		return err
	}
	return fmt.Errorf("%w: type %q", ErrBadService, d.Type)
}

func (u *unit) env(d *Definition) BuiltinEnv {
	return BuiltinEnv{Name: d.Name, Config: d.Config, Root: u.m.opts.Root,
		Log: slog.New(&ringHandler{u: u, next: u.m.log.Handler().WithAttrs([]slog.Attr{slog.String("service", d.Name)})})}
}

// runAux runs argv to completion and fails on a non-zero exit.
func (u *unit) runAux(ctx context.Context, d *Definition, what string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%s: empty command", what)
	}
	c, err := childproc.Start(u.command(d, argv))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	select {
	case <-c.Exited():
		if ps, err := c.State(); err != nil {
			return fmt.Errorf("%s %s: %s", what, argv[0], exitText(ps, err))
		}
		return nil
	case <-ctx.Done():
		if !killGroupAndWait(c.Pid, c.Exited()) {
			return fmt.Errorf("%s %s: %w; killed, but not gone %v later", what, argv[0], ctx.Err(), killWait)
		}
		return fmt.Errorf("%s %s: %w", what, argv[0], ctx.Err())
	}
}

func exitText(ps *os.ProcessState, err error) string {
	if ps == nil {
		return err.Error()
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + unixSignalName(ws.Signal())
	}
	return "exited with status " + strconv.Itoa(ps.ExitCode())
}

func (u *unit) command(d *Definition, argv []string) *exec.Cmd {
	if d.Type == TypeScript && len(argv) > 1 && argv[1] == d.Path && u.m.opts.RootDir != "" {
		argv = slices.Clone(argv)
		argv[1] = filepath.Join(u.m.opts.RootDir, d.Path)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = u.m.childEnv(d)
	w := &lineWriter{u: u}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = childAttr()
	cmd.Dir = "/"
	return cmd
}

// spawnDaemon starts the process and waits for readiness: READY=1 with
// notify=yes, else the pidfile when one is set, else the process being up.
// The caller supervises the returned process.
func (u *unit) spawnDaemon(ctx context.Context, d *Definition) (*proc, error) {
	if d.Pidfile != "" {
		_ = os.Remove(d.Pidfile)
	}
	p, err := u.spawn(d)
	if err != nil {
		return nil, err
	}
	var tick <-chan time.Time
	if !d.Notify && d.Pidfile != "" {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	} else if !d.Notify {
		p.markReady()
	}
	for {
		select {
		case <-p.ready:
			return p, nil
		case <-tick:
			if pidfileReady(d.Pidfile) {
				p.markReady()
			}
		case <-p.exited:
			return nil, fmt.Errorf("%s %s before it was ready", d.Command, exitText(p.state, p.waitErr))
		case <-ctx.Done():
			_ = killGroupAndWait(p.pid, p.exited)
			u.mu.Lock()
			u.proc = nil
			u.mu.Unlock()
			what := "process up"
			if d.Notify {
				what = "READY=1"
			} else if d.Pidfile != "" {
				what = "pidfile " + d.Pidfile
			}
			return nil, fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

func pidfileReady(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid > 0 && syscall.Kill(pid, 0) == nil
}

func (u *unit) spawn(d *Definition) (*proc, error) {
	c, err := childproc.Start(u.command(d, d.Argv()))
	if err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	p := &proc{pid: c.Pid, started: time.Now(), exited: make(chan struct{}), ready: make(chan struct{})}
	u.mu.Lock()
	u.proc = p
	u.mu.Unlock()
	u.m.trackPID(p.pid, u)
	go func() {
		p.state, p.waitErr = c.State()
		u.m.untrackPID(p.pid)
		close(p.exited)
	}()
	return p, nil
}

// MaxRestartFailures is how many consecutive restarts of a crashing
// daemon are attempted (with exponential backoff) before it is left failed.
// A daemon that stayed up for 10 s starts a new count.
const MaxRestartFailures = 10

// supervise watches the daemon's main process and applies the restart
// policy, for as long as the unit keeps being restarted.
func (u *unit) supervise(p *proc) {
	for p != nil {
		p = u.superviseOnce(p)
	}
}

// superviseOnce waits for p to exit and, per the restart policy, restarts
// the daemon with exponential backoff. It returns the new process, or nil
// when supervision ends.
func (u *unit) superviseOnce(p *proc) *proc {
	<-p.exited
	u.mu.Lock()
	if u.proc != p || u.state == StateStopping || u.state == StateStopped {
		u.mu.Unlock()
		return nil
	}
	d, gen := u.def, u.gen
	if time.Since(p.started) > 10*time.Second {
		u.failStreak = 0
	}
	u.mu.Unlock()
	clean := p.state != nil && p.state.Success()
	why := "main process " + exitText(p.state, p.waitErr)
	if !(d.Restart == RestartAlways || d.Restart == RestartOnFailure && !clean) {
		st := StateFailed
		if clean {
			st = StateStopped
		}
		u.set(st, why)
		u.logf(slog.LevelWarn, "%s", why)
		return nil
	}
	for {
		u.mu.Lock()
		u.failStreak++
		streak := u.failStreak
		u.mu.Unlock()
		if streak > MaxRestartFailures {
			u.set(StateFailed, fmt.Sprintf("%s; gave up after %d restarts", why, MaxRestartFailures))
			u.logf(slog.LevelError, "%s; gave up after %d restarts", why, MaxRestartFailures)
			return nil
		}
		backoff := d.RestartBackoff << min(streak-1, 20)
		if backoff > MaxRestartBackoff || backoff <= 0 {
			backoff = MaxRestartBackoff
		}
		u.set(StateStarting, fmt.Sprintf("%s; restarting in %v", why, backoff))
		u.logf(slog.LevelWarn, "%s; restarting in %v (restart=%s)", why, backoff, d.Restart)
		select {
		case <-time.After(backoff):
		case <-u.m.stopping:
			return nil
		}
		np, err := u.restartProc(d, gen)
		if err == errSuperseded {
			return nil
		}
		if err == nil {
			return np
		}
		why = "restart: " + err.Error()
	}
}

var errSuperseded = errors.New("superseded by a stop or start")

func (u *unit) restartProc(d *Definition, gen int) (*proc, error) {
	u.op.Lock()
	defer u.op.Unlock()
	u.mu.Lock()
	if u.gen != gen || u.state != StateStarting {
		u.mu.Unlock()
		return nil, errSuperseded
	}
	u.restarts++
	u.mu.Unlock()
	ctx, cancel := u.startContext(context.Background(), d.StartTimeout)
	defer cancel()
	np, err := u.spawnDaemon(ctx, d)
	if err != nil {
		u.logf(slog.LevelError, "restart failed: %v", err)
		return nil, err
	}
	u.set(StateRunning, "")
	u.logf(slog.LevelInfo, "restarted%s", u.pidSuffix())
	return np, nil
}

// scriptStatus runs "/bin/sh script status" for a legacy script and
// returns its first output line and exit code, within 2 s (plus 1 s for a
// descendant that keeps the output open). Readers go through
// cachedScriptStatus.
func (u *unit) scriptStatus(ctx context.Context) (string, int) {
	d := u.getDef()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	argv := append(d.Argv(), "status")
	if u.m.opts.RootDir != "" {
		argv[1] = filepath.Join(u.m.opts.RootDir, d.Path)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = u.m.childEnv(d)
	cmd.Dir = "/"
	cmd.SysProcAttr = childAttr()
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid, syscall.SIGKILL) }
	out, err := childproc.Output(cmd)
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // the script exited 0; a descendant of it kept the output open
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return line, ee.ExitCode()
		}
		return err.Error(), -1
	}
	return line, 0
}

// reload applies the unit's current definition in place (Reloader).
func (u *unit) reload(ctx context.Context) error {
	u.op.Lock()
	defer u.op.Unlock()
	u.mu.Lock()
	b, d := u.builtin, u.def
	u.mu.Unlock()
	r, ok := b.(Reloader)
	if !ok {
		return fmt.Errorf("%s cannot reload in place", u.name)
	}
	err := r.Reload(ctx, u.env(d))
	if errors.Is(err, ErrStopped) {
		u.mu.Lock()
		u.builtin = nil
		u.mu.Unlock()
		u.set(StateFailed, err.Error())
		u.logf(slog.LevelError, "reload: %v", err)
	}
	return err
}

// stop brings the unit down: builtin Stop, stop_signal to a daemon's
// process group (SIGKILL after stop_timeout), script stop; then
// stop_postcmd.
func (u *unit) stop(ctx context.Context) error {
	u.op.Lock()
	defer u.op.Unlock()
	u.mu.Lock()
	u.gen++
	st := u.state
	d := u.def
	p := u.proc
	b := u.builtin
	wasUp := st == StateRunning || st == StateExited || st == StateStarting
	if !wasUp {
		u.mu.Unlock()
		return nil
	}
	u.state, u.since = StateStopping, time.Now()
	u.mu.Unlock()
	t0 := time.Now()
	var err error
	switch d.Type {
	case TypeBuiltin:
		if b != nil {
			sctx, cancel := context.WithTimeout(ctx, d.StopTimeout)
			err = b.Stop(sctx)
			cancel()
			u.mu.Lock()
			u.builtin = nil
			u.mu.Unlock()
		}
	case TypeDaemon:
		if p != nil {
			err = stopProc(ctx, p, d.StopSignal, d.StopTimeout)
		}
	case TypeScript:
		sctx, cancel := context.WithTimeout(ctx, d.StopTimeout)
		err = u.runAux(sctx, d, "stop", append(d.Argv(), "stop"))
		cancel()
	}
	if len(d.StopPostcmd) > 0 {
		sctx, cancel := context.WithTimeout(ctx, d.StopTimeout)
		if perr := u.runAux(sctx, d, "stop_postcmd", d.StopPostcmd); perr != nil {
			err = errors.Join(err, perr)
		}
		cancel()
	}
	if d.Pidfile != "" && d.Type == TypeDaemon {
		_ = os.Remove(d.Pidfile)
	}
	reason := ""
	if err != nil {
		reason = "stop: " + err.Error()
	}
	u.set(StateStopped, reason)
	u.mu.Lock()
	u.proc = nil
	u.mu.Unlock()
	u.logf(slog.LevelInfo, "stopped in %v", time.Since(t0).Round(time.Microsecond))
	return err
}

// killWait bounds the wait for a process to be reaped after SIGKILL (it
// can hang in uninterruptible sleep).
const killWait = time.Second

// stopProc sends sig to p's process group and waits for p to exit, until
// timeout or ctx's deadline, whichever comes first; then it sends SIGKILL
// and waits at most killWait more.
func stopProc(ctx context.Context, p *proc, sig syscall.Signal, timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	t0 := time.Now()
	_ = killGroup(p.pid, sig)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var why string
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
		why = fmt.Sprintf("did not exit within %v of %s", timeout, unixSignalName(sig))
	case <-ctx.Done():
		why = fmt.Sprintf("still running %v after %s: %v", time.Since(t0).Round(time.Millisecond), unixSignalName(sig), context.Cause(ctx))
	}
	if !killGroupAndWait(p.pid, p.exited) {
		return fmt.Errorf("%s; killed, but not gone %v later", why, killWait)
	}
	return errors.New(why + "; killed")
}

// killGroupAndWait sends SIGKILL to pid's process group and waits at most
// killWait for exited to close; it reports whether it did.
func killGroupAndWait(pid int, exited <-chan struct{}) bool {
	_ = killGroup(pid, syscall.SIGKILL)
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-exited:
		return true
	case <-t.C:
		return false
	}
}

// ringHandler tees a builtin's log records into the unit's log lines.
type ringHandler struct {
	u    *unit
	next slog.Handler
}

func (h *ringHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h *ringHandler) Handle(ctx context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Time.Format("15:04:05.000") + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		sb.WriteString(" " + a.String())
		return true
	})
	h.u.ring.add(sb.String())
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}
func (h *ringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &ringHandler{u: h.u, next: h.next.WithAttrs(as)}
}
func (h *ringHandler) WithGroup(g string) slog.Handler {
	return &ringHandler{u: h.u, next: h.next.WithGroup(g)}
}
