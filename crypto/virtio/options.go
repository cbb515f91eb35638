// Package virtio is a crypto provider for a virtio-crypto device (virtio
// 1.2, section 5.9) emulated in a separate process.
//
// The driver (this package) and the device (package device, run as
// cmd/keel-virtio-device or as a re-exec of the current binary) share one
// memfd region holding N data virtqueues and one control virtqueue in the
// split-ring layout (package ring) plus the request buffers; each queue
// has a kick and a call eventfd, passed to the device over a unix socket
// with SCM_RIGHTS, vhost-user style. The device does the crypto with the
// standard library.
//
// Control requests (CREATE_SESSION / DESTROY_SESSION) are asynchronous:
// many are in flight and each completes through a callback from the
// control queue's interrupt handler (the design of Linux commit
// 977231e8d4). ModeDepth1Poll keeps the earlier design for comparison: one
// control request at a time under a spin lock, busy-polling the used ring.
// Data requests are written to the rings in batches, with one kick per
// Submit (and none while the device says it is polling).
//
// The driver detects a dead device (socket EOF, process exit, or a request
// older than Options.KickTimeout), fails its in-flight requests with
// StatusError (their Data and ICV untouched: results only ever come from
// the shared region), and calls Options.OnFault, which the module wires to
// Framework.ReportFault followed by Deregister.
package virtio

import (
	"io"
	"time"
)

// Names used to find or start the device process.
const (
	// DeviceBinary is the device program's file name, looked for next to
	// the running executable and then in $PATH.
	DeviceBinary = "keel-virtio-device"
	// DeviceEnv names an environment variable holding the device
	// program's path; it overrides the search.
	DeviceEnv = "KEEL_VIRTIO_DEVICE"
	// ChildEnv=1 in a process's environment makes RunDeviceIfRequested
	// run the device instead of returning.
	ChildEnv = "KEEL_VIRTIO_DEVICE_CHILD"
)

// Mode selects the control-queue driver design.
type Mode int

// Modes.
const (
	// ModeAsync: many control requests in flight, completion by callback.
	ModeAsync Mode = iota
	// ModeDepth1Poll: one control request at a time under a spin lock,
	// busy-polling for the answer (the benchmark baseline).
	ModeDepth1Poll
)

// Options configure a Provider. The zero value gives the defaults.
type Options struct {
	// Name is the provider name (default "virtio").
	Name string
	// Priority is the static tie-break hint.
	Priority int
	// DevicePath is the device program. If empty: $KEEL_VIRTIO_DEVICE,
	// then keel-virtio-device next to os.Executable(), then a re-exec of
	// os.Executable() if the program called RunDeviceIfRequested, then
	// keel-virtio-device in $PATH.
	DevicePath string
	// DeviceOutput receives the device process's stdout and stderr
	// (default: discarded).
	DeviceOutput io.Writer
	// DataQueues is the number of data virtqueues (default 2).
	DataQueues int
	// QueueSize is the descriptor count per data queue (default 256, so
	// 128 requests in flight per queue).
	QueueSize uint16
	// CtrlQueueSize is the control queue's descriptor count (default 128).
	CtrlQueueSize uint16
	// MaxData is the largest payload per request (default 16384).
	//
	// DataQueues, QueueSize, CtrlQueueSize and MaxData size the shared
	// region; Start fails with an error wrapping spec.ErrRegionTooLarge
	// when it would exceed spec.MaxRegionSize (1 GiB; the defaults need
	// 8.2 MiB).
	MaxData int
	// MaxSessions bounds the device's session table (default 65536);
	// each Keel session uses two device sessions (one per direction)
	// except NULL+HMAC, which uses one.
	MaxSessions int
	// Mode selects the control-queue design (default ModeAsync).
	Mode Mode
	// KickTimeout is how long a request may wait for the device before it
	// is declared stalled, killed and failed over (default 2 s).
	KickTimeout time.Duration
	// StartTimeout bounds the device's start-up (default 10 s).
	StartTimeout time.Duration
	// OnFault is called once, from its own goroutine, when the device dies
	// or stalls, after every in-flight request has been queued for
	// completion with StatusError. It is not called for Close.
	OnFault func(err error)
}

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "virtio"
	}
	if o.DataQueues == 0 {
		o.DataQueues = 2
	}
	if o.QueueSize == 0 {
		o.QueueSize = 256
	}
	if o.CtrlQueueSize == 0 {
		o.CtrlQueueSize = 128
	}
	if o.MaxData == 0 {
		o.MaxData = 16384
	}
	if o.KickTimeout <= 0 {
		o.KickTimeout = 2 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
}
