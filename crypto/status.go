package crypto

import "time"

// ProviderState is a provider's admission state.
type ProviderState string

// Provider states.
const (
	// StateOK: admitted (self-tests and calibration passed); bindable.
	StateOK ProviderState = "ok"
	// StateQuarantined: a self-test or calibration failed; never bound.
	StateQuarantined ProviderState = "quarantined"
	// StateDegraded: the provider faulted (an error or a timeout) after
	// admission; bindings were moved away. It is selected only when no
	// provider in state ok supports the algorithm, and returns to ok only
	// by being deregistered and registered anew.
	StateDegraded ProviderState = "degraded"
	// StateUnloading: Deregister is migrating its bindings away.
	StateUnloading ProviderState = "unloading"
)

// SelfTestResult is the outcome of a provider's known-answer self-tests.
type SelfTestResult struct {
	// Passed is true when every vector of every claimed algorithm passed.
	Passed bool
	// Skipped is true when Options.SkipSelfTests was set.
	Skipped bool
	// Vectors is the number of vectors run (each encrypt, decrypt and
	// forgery check counts once per vector).
	Vectors int
	// FailedVector names the first failing vector, e.g.
	// "aes-gcm-16-128: GCM spec test case 3 (encrypt)"; empty if none.
	FailedVector string
	// Error describes the failure; it never contains key material.
	Error string
}

// Throughput is one calibration measurement.
type Throughput struct {
	Alg         Algorithm
	Size        int     // bytes of Data per request
	BytesPerSec float64 // measured through the provider's own Session
}

// CalibrationSizes are the request sizes measured at registration. The
// selection uses the largest (1420 bytes, a full-MTU ESP payload).
var CalibrationSizes = [...]int{64, 512, 1420}

// ProviderStatus is a snapshot of one provider for status output. It owns
// its slices and maps.
type ProviderStatus struct {
	Name         string
	Kind         Kind
	Priority     int
	Emulated     bool
	Params       map[string]string
	Capabilities []Capability
	State        ProviderState
	SelfTest     SelfTestResult
	// Throughput has one entry per claimed algorithm and calibration size,
	// in Capabilities order then size order.
	Throughput []Throughput
	// Sessions is the number of open sessions (bindings bound to it,
	// plus sessions of bindings still draining away from it).
	Sessions int64
	// RebindsIn and RebindsOut count bindings moved to and away from it.
	RebindsIn, RebindsOut uint64
	// Faults counts ReportFault calls, request errors and timeouts.
	Faults uint64
	// LastFault describes the latest fault; empty if none.
	LastFault string
}

// BindingStatus is a snapshot of one binding's counters.
type BindingStatus struct {
	ID  uint64
	Alg Algorithm
	// Label names the binding's user (Binding.SetLabel), or "".
	Label string
	// Provider is the current provider's name, or "" while unbound (no
	// admitted provider supports Alg).
	Provider string
	// Submitted counts accepted requests; Completed counts requests
	// delivered to the CompletionFunc (with any status); Retried counts
	// resubmissions after a provider error or timeout; Failed counts
	// delivered requests with StatusError; Rebinds counts session swaps.
	Submitted, Completed, Retried, Failed, Rebinds uint64
	// InFlight is the number of accepted requests not yet delivered.
	InFlight int
	// Closed is true after Close started.
	Closed bool
	// MaxSwapPause is the longest time a session swap (rebind) held
	// Submit off this binding: the traffic stop a rebind causes.
	MaxSwapPause time.Duration
	// Stale counts completions ignored because their attempt was no longer
	// current: duplicates, or a hung provider's late write-back after the
	// request was abandoned.
	Stale uint64
}
