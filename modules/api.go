// Package modules loads Keel's plugins the way a kernel loads modules
// (kld style): modules register at compile time from init(), declare
// versioned hard dependencies and soft ordering, are reference-counted,
// refuse an unsafe unload, and emit Loaded/Unloading/Unloaded events.
package modules

import (
	"context"
	"errors"
	"time"
)

// Kind classifies a module.
type Kind string

// Kinds.
const (
	KindCryptoProvider Kind = "crypto-provider"
	KindEngine         Kind = "engine"
	KindService        Kind = "service"
)

// Dependency is a hard dependency (MODULE_DEPEND): the named module must be
// loaded first, with Min <= version <= Max (Max 0 means no upper bound).
// Preferred is informational, as in FreeBSD.
type Dependency struct {
	Name      string
	Min       int
	Preferred int
	Max       int
}

// Module is a module descriptor, registered once from init().
type Module struct {
	Name    string
	Version int // MODULE_VERSION
	Kind    Kind
	Depends []Dependency
	// Pre orders this module after the named modules when they are loaded
	// in the same call or already loaded; it never pulls them in
	// (modprobe softdep "pre:").
	Pre []string
	// Post orders this module before the named modules under the same
	// conditions (softdep "post:").
	Post []string
	// Description is a one-line summary for kldstat-like output.
	Description string
	// Load is called once when the module is loaded. The ctx is the one
	// given to Loader.Load, so hooks can find their environment in it
	// (e.g. crypto.FromContext). An error aborts the load.
	Load func(ctx context.Context) error
	// Unload is called once before the module leaves, after subscribers
	// were sent Unloading. Returning an error refuses the unload unless it
	// is forced; wrap ErrBusy to say the module is in use (Loader.Unload
	// then returns a *BusyError). UnloadFromContext(ctx) tells the hook
	// whether the unload is forced and which modules leave with it. Nil
	// hooks do nothing.
	Unload func(ctx context.Context) error
	// Quiesce is FreeBSD's MOD_QUIESCE: before any Unload hook of an
	// unforced unload runs, each module leaving is asked whether it can
	// go together with leaving (every module of the unload, itself
	// included). An error wrapping ErrBusy (the module is in use) refuses
	// the whole unload before anything changed. A forced unload skips it.
	// Nil means the module can always go.
	Quiesce func(ctx context.Context, leaving []string) error
}

// UnloadContext describes the unload an Unload or Quiesce hook runs in.
type UnloadContext struct {
	// Leaving are the modules this unload removes, sorted.
	Leaving []string
	// Forced is true for kldunload -f (Force) and for the unloads that
	// roll back a failed load: the hook's refusal will be overridden.
	Forced bool
}

type unloadCtxKey struct{}

// UnloadFromContext returns the UnloadContext of the hook's ctx; false
// outside a Loader's Unload and Quiesce hooks.
func UnloadFromContext(ctx context.Context) (UnloadContext, bool) {
	u, ok := ctx.Value(unloadCtxKey{}).(UnloadContext)
	return u, ok
}

func withUnload(ctx context.Context, u UnloadContext) context.Context {
	return context.WithValue(ctx, unloadCtxKey{}, u)
}

// State is a module's lifecycle state.
type State string

// States. Stat rows show StateLoading, StateLoaded or StateUnloading: a
// module leaves the table when it is unloaded or its load fails, so
// StateUnloaded, StateFailed and StateDegraded are only for callers' own
// displays (e.g. a loaded crypto provider module whose device died and
// whose provider the framework dropped is shown failed, with a Reason).
const (
	StateLoading   State = "loading"
	StateLoaded    State = "loaded"
	StateUnloading State = "unloading"
	StateUnloaded  State = "unloaded"
	StateFailed    State = "failed"
	StateDegraded  State = "degraded"
)

// EventType is the kind of Event.
type EventType int

// Event types.
const (
	Loaded EventType = iota + 1
	Unloading
	Unloaded
)

// Event reports a module state change. Events are delivered to each
// subscriber in the order they happened, none lost.
type Event struct {
	Type    EventType
	Module  string
	Kind    Kind
	Version int
	Time    time.Time
	// Snapshot is true for the synthetic Loaded events a late subscriber
	// asked for to learn the current state.
	Snapshot bool
	// Forced is true on the Unloading and Unloaded events of a forced
	// unload (Unload with Force, or a dependent removed by one).
	Forced bool
	// Aborted is true on a Loaded event that follows an Unloading event
	// when the unload was refused (the Unload hook failed): the module is
	// still loaded and usable.
	Aborted bool
}

// Stat is one kldstat-like row (see Loader.Stat).
type Stat struct {
	// ID is assigned increasingly as modules are loaded, never reused.
	ID int
	// Refs is 1 for the user reference (Explicit) plus one per loaded or
	// loading module that depends on this one.
	Refs      int
	Name      string
	Version   int
	Kind      Kind
	State     State
	LoadedAt  time.Time
	DependsOn []string
	// Holders are the loaded (or loading) modules that depend on this one,
	// sorted.
	Holders []string
	// Explicit is true when the module was requested by name (Load,
	// LoadList) rather than only pulled in as a dependency; it then holds
	// one of Refs.
	Explicit bool
	// Description is the module's one-line summary.
	Description string
	// Reason says why State is failed or degraded (set by callers that
	// show such states); empty otherwise.
	Reason string `json:",omitempty"`
}

// Sentinel errors, checked with errors.Is.
var (
	ErrUnknown    = errors.New("unknown module")
	ErrVersion    = errors.New("module version mismatch")
	ErrCycle      = errors.New("module dependency cycle")
	ErrBusy       = errors.New("module busy")
	ErrExist      = errors.New("module already loaded") // informational, like EEXIST
	ErrNotLoaded  = errors.New("module not loaded")
	ErrLoadFailed = errors.New("module load failed")
)
