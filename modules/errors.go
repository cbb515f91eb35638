package modules

import (
	"errors"
	"fmt"
	"strings"
)

// ErrReentrant is returned when a Load or Unload hook calls back into the
// Loader running it (the call could wait for itself forever).
var ErrReentrant = errors.New("module hook called back into its loader")

// UnknownError reports a module name missing from the catalog. It matches
// ErrUnknown with errors.Is.
type UnknownError struct {
	Name       string   // the unknown name
	RequiredBy string   // the module that depends on it; "" if requested directly
	Known      []string // every registered name, sorted
}

// Error renders e.g. `unknown module "foo" required by ipsec (known: aesni, crypto)`.
func (e *UnknownError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown module %q", e.Name)
	if e.RequiredBy != "" {
		fmt.Fprintf(&b, " required by %s", e.RequiredBy)
	}
	if len(e.Known) == 0 {
		b.WriteString(" (no modules are registered)")
	} else {
		fmt.Fprintf(&b, " (known: %s)", strings.Join(e.Known, ", "))
	}
	return b.String()
}

// Is reports whether target is ErrUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknown }

// VersionError reports a hard dependency whose registered version is
// outside the declared range. It matches ErrVersion with errors.Is.
type VersionError struct {
	Module string // the dependent module
	Dep    Dependency
	Have   int // the registered version of Dep.Name
}

// Error renders e.g. "ipsec requires crypto >= 2, have 1" (or "<= 3" when
// the upper bound is the one violated).
func (e *VersionError) Error() string {
	if e.Have < e.Dep.Min {
		return fmt.Sprintf("%s requires %s >= %d, have %d", e.Module, e.Dep.Name, e.Dep.Min, e.Have)
	}
	return fmt.Sprintf("%s requires %s <= %d, have %d", e.Module, e.Dep.Name, e.Dep.Max, e.Have)
}

// Is reports whether target is ErrVersion.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// CycleError reports hard dependency cycles. Each cycle is a path in
// "requires" direction that starts and ends with the same module, rotated to
// start at its alphabetically first member. It matches ErrCycle.
type CycleError struct {
	Cycles [][]string
}

// Error renders e.g. "dependency cycle: a -> b -> a".
func (e *CycleError) Error() string {
	parts := make([]string, len(e.Cycles))
	for i, c := range e.Cycles {
		parts[i] = strings.Join(c, " -> ")
	}
	return "dependency cycle: " + strings.Join(parts, "; ")
}

// Is reports whether target is ErrCycle.
func (e *CycleError) Is(target error) bool { return target == ErrCycle }

// BusyError reports a refused unload. It matches ErrBusy with errors.Is.
// Either Holders is non-empty (loaded or loading modules depend on Module)
// or Err is the error of Module's Unload hook, which wraps ErrBusy.
type BusyError struct {
	Module  string
	Holders []string // sorted
	Err     error
}

// Error renders e.g. "crypto is busy: held by aesni, ipsec".
func (e *BusyError) Error() string {
	if len(e.Holders) > 0 {
		return fmt.Sprintf("%s is busy: held by %s", e.Module, strings.Join(e.Holders, ", "))
	}
	return fmt.Sprintf("%s is busy: %v", e.Module, e.Err)
}

// Is reports whether target is ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Unwrap returns the hook's error, if any.
func (e *BusyError) Unwrap() error { return e.Err }

// HookError reports a Load or Unload hook that failed or panicked. A failed
// Load hook matches ErrLoadFailed with errors.Is; Unwrap returns the hook's
// own error.
type HookError struct {
	Module string
	Op     string // "load" or "unload"
	Err    error
}

// Error renders e.g. "aesni: load hook: cpu lacks AES-NI".
func (e *HookError) Error() string { return fmt.Sprintf("%s: %s hook: %v", e.Module, e.Op, e.Err) }

// Is reports whether target is ErrLoadFailed for a load hook.
func (e *HookError) Is(target error) bool { return target == ErrLoadFailed && e.Op == "load" }

// Unwrap returns the hook's error.
func (e *HookError) Unwrap() error { return e.Err }
