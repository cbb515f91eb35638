package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// ReloadResult says what a configuration reload changed.
type ReloadResult struct {
	Restarted []string `json:"restarted,omitempty"`
	Reloaded  []string `json:"reloaded,omitempty"` // builtins that applied the change in place
	Started   []string `json:"started,omitempty"`
	Stopped   []string `json:"stopped,omitempty"`
	Unchanged int      `json:"unchanged"`
	// Errors are why the reload changed nothing: every error found in the
	// new configuration (ErrReloadInvalid), or the failure that made it
	// roll back (ErrRolledBack) and any failure of the rollback itself.
	Errors []string `json:"errors,omitempty"`
	// RolledBack are the services put back on their previous
	// configuration after a failure to apply (ErrRolledBack).
	RolledBack []string `json:"rolled_back,omitempty"`
	// Warnings are the new configuration's warnings that the running one
	// did not have (an unknown rc.conf variable...), worded as by Check.
	// They do not stop a reload.
	Warnings []string `json:"warnings,omitempty"`
}

// Errors of Reload, checked with errors.Is.
var (
	// ErrReloadInvalid: the new configuration has errors; nothing was
	// changed. ReloadResult.Errors lists them all.
	ErrReloadInvalid = errors.New("reload: configuration invalid, nothing changed")
	// ErrRolledBack: applying the new configuration failed in a way only
	// applying could show (a port in use, a daemon that exits); what the
	// reload had changed was put back (ReloadResult.RolledBack).
	ErrRolledBack = errors.New("reload: failed to apply, rolled back")
)

// Undoer is implemented by a Reloader that can take back its last
// in-place Reload. When a later service of the same Manager.Reload fails
// to apply, the Manager calls Undo, which restores the configuration that
// ran before that Reload; when the whole reload applied, it calls Commit,
// which lets go of what Undo would have needed (zeroing any key material
// kept for it).
type Undoer interface {
	Undo(ctx context.Context) error
	Commit()
}

// change is one service a reload restarts, reloads, starts or stops.
type change struct {
	name  string
	u     *unit       // nil for a new service until the reload applies
	def   *Definition // the new definition
	old   *Definition // nil for a new service
	wasUp bool
	// reload: apply in place with Reloader.
	reload bool
	// prev is the state to show again when a rollback stops a service
	// that was not up before.
	prev       State
	prevReason string
}

// Reload re-evaluates rc.conf and rc.d, in two steps.
//
// Validation: the new rc.conf chain, the rc.d file of every service whose
// definition changed, the builtins' own configuration of those services
// (Checker: ipsec_file for ipsec...) and the ordering (new rcorder
// errors) are checked first. If anything is invalid, nothing changes,
// and the error (ErrReloadInvalid) and ReloadResult.Errors list every
// error.
//
// Apply: services whose effective settings changed are restarted (a
// running builtin that implements Reloader applies the change in place
// instead), newly enabled ones started, disabled or removed ones stopped;
// the others are left alone, except active builtins that require a
// restarted service, which are restarted with it. When one of them fails
// to apply, the reload stops there and rolls back (ErrRolledBack): the
// services it had restarted, started or stopped are stopped and started
// again on their previous definition, in boot order, and the previous
// catalog is back. A builtin that had applied the change in place is
// undone when it implements Undoer; otherwise it keeps the new
// configuration, which passed its Check and applied (see
// ReloadResult.Errors): reapplying its old definition would pair its old
// rc.conf variables with the files it reads itself as they are now. A
// failing Reloader rolls itself back (see ErrStopped). Files that a
// daemon reads itself are not the Manager's: the rollback restarts it on
// its previous definition (command line, environment), with its files as
// they are on disk.
func (m *Manager) Reload(ctx context.Context) (ReloadResult, error) {
	// Once the reload applies, it finishes or rolls back whatever becomes
	// of the caller (a keelctl that gives up): never half. Shutdown still
	// cuts it short, since everything stops then anyway.
	ctx, cancel := m.untilShutdown(context.WithoutCancel(ctx))
	defer cancel()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	var res ReloadResult
	if m.isStopping() {
		return res, ErrShuttingDown
	}
	newCat, err := loadCatalog(m.opts)
	if err != nil {
		res.Errors = []string{err.Error()}
		return res, fmt.Errorf("%w: %w", ErrReloadInvalid, err)
	}
	old := m.Catalog()
	had := map[string]bool{}
	for _, f := range old.notices() {
		had[f.Text] = true
	}
	for _, f := range newCat.notices() {
		if f.Severity == SeverityWarning && !had[f.Text] {
			res.Warnings = append(res.Warnings, f.Text)
			m.log.Warn(f.Text)
		}
	}
	changes, removed := m.plan(old, newCat, &res)
	if bad := reloadErrors(m.opts, old, newCat, changes); len(bad) > 0 {
		for _, f := range bad {
			res.Errors = append(res.Errors, f.Text)
		}
		res.Unchanged = 0
		m.log.Error(fmt.Sprintf("%v: %d error(s)", ErrReloadInvalid, len(bad)))
		for _, f := range bad {
			m.log.Error(f.Text)
		}
		return res, fmt.Errorf("%w:\n%s", ErrReloadInvalid, strings.Join(res.Errors, "\n"))
	}
	var ordered []*change
	for _, i := range newCat.Order {
		if c, ok := changes[newCat.Defs[i].Name]; ok {
			ordered = append(ordered, c)
		}
	}
	// Stop what changed or went away, dependents first (reverse order).
	for i := len(removed) - 1; i >= 0; i-- {
		if err := removed[i].u.stop(ctx); err != nil {
			removed[i].u.logf(slog.LevelWarn, "stop: %v", err)
		}
		res.Stopped = append(res.Stopped, removed[i].name)
	}
	for i := len(ordered) - 1; i >= 0; i-- {
		if c := ordered[i]; c.wasUp && !c.reload {
			if err := c.u.stop(ctx); err != nil {
				c.u.logf(slog.LevelWarn, "stop: %v", err)
			}
		}
	}
	m.mu.Lock()
	for _, c := range removed {
		delete(m.units, c.name)
	}
	for _, c := range ordered {
		if c.u == nil {
			c.u = &unit{m: m, name: c.name, def: c.def, state: StateInactive}
			m.units[c.name] = c.u
		}
		c.u.mu.Lock()
		c.u.def = c.def
		c.u.mu.Unlock()
	}
	m.cat = newCat
	m.mu.Unlock()
	var undo []Undoer // in-place reloads to take back on a rollback
	for k, c := range ordered {
		var err error
		switch {
		case !c.def.Enabled:
			c.u.set(StateDisabled, disabledReason(c.def))
			if c.wasUp {
				res.Stopped = append(res.Stopped, c.name)
			}
		case c.reload:
			c.u.logf(slog.LevelInfo, "settings changed; reloading in place")
			if err = c.u.reload(ctx); err != nil {
				// The builtin kept (or restored) its running
				// configuration, unless it stopped (ErrStopped).
				if !errors.Is(err, ErrStopped) {
					c.u.logf(slog.LevelError, "reload failed, keeping the running configuration: %v", err)
				}
				break
			}
			if un, ok := c.u.getBuiltin().(Undoer); ok {
				undo = append(undo, un)
			}
			res.Reloaded = append(res.Reloaded, c.name)
		default:
			c.u.logf(slog.LevelInfo, "settings changed; starting")
			err = m.startLocked(ctx, c.name, map[string]bool{})
			if c.wasUp {
				res.Restarted = append(res.Restarted, c.name)
			} else {
				res.Started = append(res.Started, c.name)
			}
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", c.name, err)
			return m.rollback(ctx, old, ordered, k, removed, undo, res, err)
		}
	}
	for _, un := range undo {
		un.Commit()
	}
	m.log.Info("reload done", "restarted", res.Restarted, "reloaded", res.Reloaded, "started", res.Started, "stopped", res.Stopped, "unchanged", res.Unchanged)
	return res, nil
}

// plan compares the current catalog old with newCat: it returns the
// services to change by name and the services removed (with def nil),
// and counts the unchanged ones in res. It changes nothing.
func (m *Manager) plan(old, newCat *Catalog, res *ReloadResult) (map[string]*change, []*change) {
	changes := map[string]*change{}
	m.mu.RLock()
	for _, i := range newCat.Order {
		d := newCat.Defs[i]
		u, ok := m.units[d.Name]
		if !ok {
			changes[d.Name] = &change{name: d.Name, def: d, prev: StateInactive}
			continue
		}
		od := u.getDef()
		if od.Fingerprint() == d.Fingerprint() && od.Enabled == d.Enabled && (od.Err == nil) == (d.Err == nil) &&
			(od.Err == nil || od.Err.Error() == d.Err.Error()) {
			res.Unchanged++
			continue
		}
		u.mu.Lock()
		st, reason, b := u.state, u.reason, u.builtin
		u.mu.Unlock()
		c := &change{name: d.Name, u: u, def: d, old: od, wasUp: st.Active() || st == StateStarting, prev: st, prevReason: reason}
		if _, ok := b.(Reloader); ok && c.wasUp && d.Enabled && d.Err == nil && d.Type == TypeBuiltin && od.Type == TypeBuiltin {
			c.reload = true
		}
		changes[d.Name] = c
	}
	var removed []*change
	for _, d := range old.Defs {
		if _, ok := newCat.Lookup(d.Name); !ok {
			u := m.units[d.Name]
			removed = append(removed, &change{name: d.Name, u: u, old: u.getDef(), wasUp: u.active()})
		}
	}
	m.mu.RUnlock()
	// Builtins that require a restarted service restart with it
	// (builtinDependents is transitive), even those whose own change could
	// have been applied in place: what they hold a reference to stops.
	for name, c := range changes {
		if c.reload || !c.wasUp {
			continue
		}
		for _, dep := range m.builtinDependents(old, name) {
			if dc, ok := changes[dep]; ok {
				dc.reload = false
				continue
			}
			if j, ok := newCat.Lookup(dep); ok {
				u, _ := m.unit(dep)
				changes[dep] = &change{name: dep, u: u, def: newCat.Defs[j], old: u.getDef(), wasUp: true}
				res.Unchanged--
			}
		}
	}
	return changes, removed
}

// reloadErrors returns the errors that make the new catalog cat
// unacceptable for a reload from old: an rcorder error that old did not
// have, and the errors of the services that change (their rc.d file,
// their builtin's Check).
func reloadErrors(opts Options, old, cat *Catalog, changes map[string]*change) []Finding {
	had := map[string]bool{}
	for _, p := range old.Problems {
		had[p.Text] = true
	}
	var out []Finding
	for _, p := range cat.Problems {
		if p.Severity == SeverityError && !had[p.Text] {
			out = append(out, p)
		}
	}
	for _, f := range serviceFindings(opts, cat, func(d *Definition) bool { return changes[d.Name] != nil }) {
		if f.Severity == SeverityError {
			out = append(out, f)
		}
	}
	return out
}

// rollback takes back a reload that failed (err) applying ordered[failed]:
// it stops what the reload started (ordered[:failed+1], dependents first),
// undoes the in-place reloads undo, puts the previous catalog old and the
// previous definitions back (removed services included), and starts again,
// in old's boot order, every service of the reload that was up before.
func (m *Manager) rollback(ctx context.Context, old *Catalog, ordered []*change, failed int, removed []*change,
	undo []Undoer, res ReloadResult, err error) (ReloadResult, error) {
	m.log.Error(fmt.Sprintf("reload: %v; rolling back", err))
	errs := []error{err}
	for i := failed; i >= 0; i-- {
		if c := ordered[i]; !c.reload {
			if serr := c.u.stop(ctx); serr != nil {
				errs = append(errs, fmt.Errorf("rollback: %s: stop: %w", c.name, serr))
			}
		}
	}
	for i := len(undo) - 1; i >= 0; i-- {
		if uerr := undo[i].Undo(ctx); uerr != nil {
			errs = append(errs, fmt.Errorf("rollback: %w", uerr))
		}
	}
	m.mu.Lock()
	for _, c := range removed {
		m.units[c.name] = c.u
	}
	for _, c := range ordered {
		if c.old == nil {
			delete(m.units, c.name)
			continue
		}
		c.u.mu.Lock()
		c.u.def = c.old
		c.u.mu.Unlock()
	}
	m.cat = old
	m.mu.Unlock()
	byName := map[string]*change{}
	for _, c := range append(ordered, removed...) {
		byName[c.name] = c
	}
	for _, i := range old.Order {
		name := old.Defs[i].Name
		c := byName[name]
		switch {
		case c == nil || c.old == nil:
			continue
		case c.reload:
			// Undone above, or it rolled back by itself; one that
			// could not (ErrStopped) already tried its previous
			// configuration and stays failed with the reason.
			continue
		case !c.wasUp:
			c.u.set(c.prev, c.prevReason)
			continue
		}
		if serr := m.startLocked(ctx, name, map[string]bool{}); serr != nil {
			errs = append(errs, fmt.Errorf("rollback: %w", serr))
			continue
		}
		res.RolledBack = append(res.RolledBack, name)
	}
	res.Restarted, res.Reloaded, res.Started, res.Stopped = nil, nil, nil, nil
	for _, e := range errs {
		res.Errors = append(res.Errors, e.Error())
	}
	m.log.Error("reload rolled back", "restored", res.RolledBack)
	return res, fmt.Errorf("%w: %w", ErrRolledBack, errors.Join(errs...))
}
