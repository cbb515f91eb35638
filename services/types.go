// Package services is Keel's boot orchestrator: it reads rc.conf and rc.d,
// orders services with rcorder, starts them as a DAG (each service as soon
// as everything it requires is done), supervises daemons, serves the
// sd_notify protocol to its children and stops everything in reverse order.
//
// A Manager owns all runtime state. Its methods are safe for concurrent use
// from the control API, signal handlers and the boot goroutine.
package services

import (
	"errors"
	"time"
)

// Type is the kind of an rc.d service (the Keel extension type=).
type Type string

// Service types.
const (
	// TypeOneshot runs command to completion; exit 0 means done ("exited").
	TypeOneshot Type = "oneshot"
	// TypeDaemon runs command as a supervised long-lived process.
	TypeDaemon Type = "daemon"
	// TypeBuiltin is implemented in Go and registered with the Manager.
	TypeBuiltin Type = "builtin"
	// TypeScript is an executable shell script run as /bin/sh script start|stop|status.
	TypeScript Type = "script"
)

// RestartPolicy says when a crashed daemon is restarted (restart=).
type RestartPolicy string

// Restart policies.
const (
	RestartNo        RestartPolicy = "no"
	RestartOnFailure RestartPolicy = "on-failure"
	RestartAlways    RestartPolicy = "always"
)

// State is a service's runtime state as shown by keelctl status.
type State string

// States.
const (
	StateInactive State = "inactive" // not started yet (or stopped)
	StateDisabled State = "disabled" // its rcvar is not set to yes
	StateWaiting  State = "waiting"  // waiting for its requirements
	StateStarting State = "starting"
	StateRunning  State = "running" // a daemon or builtin that is ready
	StateExited   State = "exited"  // a oneshot or script that completed
	StateFailed   State = "failed"
	StateBlocked  State = "blocked" // a requirement failed
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
)

// Active reports whether s counts as active for LSB status (exit 0).
func (s State) Active() bool { return s == StateRunning || s == StateExited }

// Sentinel errors, checked with errors.Is.
var (
	ErrUnknownService = errors.New("unknown service")
	ErrBadService     = errors.New("invalid rc.d service")
	ErrStartTimeout   = errors.New("start timed out")
	ErrRequiredFile   = errors.New("required file missing")
	ErrNoBuiltin      = errors.New("no such builtin")
	ErrShuttingDown   = errors.New("keeld is shutting down")
	ErrNotPermitted   = errors.New("operation not permitted")
	ErrBlocked        = errors.New("blocked by a failed requirement")
	ErrExited         = errors.New("process exited")
	// ErrStopped, wrapped in the error of a Reloader's Reload, says that
	// the reload failed, could not restore the running configuration and
	// left the builtin stopped (its Stop is not called again): the
	// Manager marks the service failed with the error as its reason.
	ErrStopped = errors.New("reload could not be rolled back; the service stopped")
)

// Status is one row of keelctl status.
type Status struct {
	Name     string        `json:"name"`
	Type     Type          `json:"type"`
	State    State         `json:"state"`
	PID      int           `json:"pid,omitempty"`
	Since    time.Time     `json:"since,omitzero"`
	Duration time.Duration `json:"start_duration_ns,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	Restarts int           `json:"restarts,omitempty"`
	// StatusText is the last STATUS= sent over sd_notify, or a builtin's status.
	StatusText string `json:"status_text,omitempty"`
	// Degraded, set only while the service is running, says why it runs
	// but does not do all of its job (a builtin's Degrader): keelctl
	// shows the state as "running (degraded)", and the metric
	// keel_service_degraded is 1. State stays running, so that
	// supervision and LSB status treat it as up.
	Degraded string `json:"degraded,omitempty"`
}

// Detail is keelctl status NAME.
type Detail struct {
	Status
	Path       string            `json:"path"`
	Provides   []string          `json:"provides,omitempty"`
	Requires   []string          `json:"requires,omitempty"`    // services this one waits for
	RequiredBy []string          `json:"required_by,omitempty"` // services that wait for this one
	Command    []string          `json:"command,omitempty"`     // argv
	Rcvar      string            `json:"rcvar,omitempty"`
	Settings   map[string]string `json:"settings,omitempty"` // effective settings
	Log        []string          `json:"log,omitempty"`      // last log lines
	Keywords   []string          `json:"keywords,omitempty"`
}

// Span is one service's start interval in the boot timeline.
type Span struct {
	Name     string        `json:"name"`
	State    State         `json:"state"`
	Start    time.Duration `json:"start_ns"` // since boot start; when it began starting
	Ready    time.Duration `json:"ready_ns"` // since boot start; when it was done
	Requires []string      `json:"requires,omitempty"`
}

// Timeline is the boot record used by keelctl boot plot and critical-chain.
type Timeline struct {
	Started  time.Time     `json:"started"`
	Finished time.Duration `json:"finished_ns"` // boot duration; 0 while booting
	Spans    []Span        `json:"spans"`
}
