package glxsb

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelinit/keel/crypto"
)

// Fault selects a failure injected into the emulated device.
type Fault int32

// Faults.
const (
	// FaultNone clears any injected fault. Clearing FaultHang lets a hung
	// operation complete late, which the driver must discard.
	FaultNone Fault = iota
	// FaultError makes every operation complete with a device error and no
	// output, until cleared.
	FaultError
	// FaultHang makes the device stop raising completion interrupts: the
	// operation in the slot never finishes (until cleared).
	FaultHang
	// FaultVanish removes the device (a surprise removal). It is permanent.
	FaultVanish
)

// String names the fault.
func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultError:
		return "error"
	case FaultHang:
		return "hang"
	case FaultVanish:
		return "vanish"
	}
	return "fault(?)"
}

// maxCompensation caps the emulator lateness absorbed per interrupt: a
// scheduler time slice on a loaded machine. Longer stalls of the emulator
// count as lost device time.
const maxCompensation = 5 * time.Millisecond

var (
	errSlotBusy = errors.New("glxsb: operation slot busy")
	errDevice   = errors.New("glxsb: device reported an operation error")
)

// devOp is one operation as the device sees it: a DMA copy of the data
// (buf) that the device transforms, never the caller's buffer.
type devOp struct {
	sess *session
	req  *crypto.Request
	enc  bool
	buf  []byte // device-owned working copy of req.Data
	iv   [16]byte
	err  error
	// queued is when the driver accepted the request.
	queued time.Time
}

// DeviceStats are counters of the emulated device.
type DeviceStats struct {
	Ops   uint64
	Bytes uint64
	// ModelBusy is the sum of the modelled operation times.
	ModelBusy time.Duration
	// Lateness is the total time by which the emulator noticed operation
	// deadlines late (scheduling noise of the emulation, not charged to the
	// driver), and MaxLateness the largest single delay.
	Lateness    time.Duration
	MaxLateness time.Duration
}

// device emulates the Geode LX Security Block: one operation slot, AES-128
// in CBC mode, at most maxOp bytes per operation, with a modelled setup
// latency and throughput.
//
// Timing model: an operation started at model time S completes at
// S + setup + n/throughput. The device goroutine does the real AES on its
// own copy, then waits (spinning: sleeping is far too coarse for 50 µs
// operations) until that deadline and raises the interrupt. The emulator
// may notice a deadline late (it is a goroutine on a shared machine); that
// lateness L is recorded, and a start issued D after the interrupt was
// delivered is placed at model time deadline + D, i.e. the emulator's
// own noise is not charged to the driver, while everything the driver
// does between interrupt and next start is. The compensation is capped at
// maxCompensation, so that a long preemption of the emulator is charged as
// lost device time rather than letting the device run faster than its
// model afterwards. Blocking and queued drivers are measured on this same
// model.
type device struct {
	bytesPerNs float64
	setup      time.Duration
	maxOp      int

	slot chan *devOp // capacity 1: the single operation slot
	stop chan struct{}
	wg   sync.WaitGroup

	// intr is the driver's interrupt handler. It runs on the device
	// goroutine and may call start for the next operation.
	intr func(op *devOp)
	// gone is the driver's surprise-removal handler.
	gone func()

	fault   atomic.Int32
	unhang  chan struct{} // signalled when a hang is cleared
	vanishd atomic.Bool

	busy atomic.Bool
	// lastDeadline/lastIntr describe the latest interrupt (model time of
	// completion, real time of delivery); nanoseconds since epoch.
	lastDeadline atomic.Int64
	lastIntr     atomic.Int64

	statsMu sync.Mutex
	stats   DeviceStats
}

func newDevice(throughputMBps float64, setup time.Duration, maxOp int) *device {
	return &device{
		bytesPerNs: throughputMBps * 1e6 / 1e9,
		setup:      setup,
		maxOp:      maxOp,
		slot:       make(chan *devOp, 1),
		stop:       make(chan struct{}),
		unhang:     make(chan struct{}, 1),
	}
}

// cost is the modelled time of an n-byte operation.
func (d *device) cost(n int) time.Duration {
	return d.setup + time.Duration(float64(n)/d.bytesPerNs)
}

func (d *device) run() {
	d.wg.Add(1)
	go d.loop()
}

func (d *device) shutdown() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	d.wg.Wait()
}

// start places op in the slot. Only the driver calls it, under its own lock,
// so errSlotBusy indicates a driver bug; crypto.ErrDeviceGone means the
// device has vanished.
func (d *device) start(op *devOp) error {
	if d.vanishd.Load() {
		return crypto.ErrDeviceGone
	}
	if !d.busy.CompareAndSwap(false, true) {
		return errSlotBusy
	}
	now := time.Now().UnixNano()
	// Model start time: see the type comment.
	s := now
	if li := d.lastIntr.Load(); li != 0 {
		if late := li - d.lastDeadline.Load(); late > 0 {
			s = now - min(late, int64(maxCompensation))
		}
	}
	// Never start before the operation existed (a zero queued time means
	// it was waiting before the last interrupt), and note it in the op.
	if !op.queued.IsZero() {
		if q := op.queued.UnixNano(); s < q {
			s = q
		}
	}
	op.queued = time.Unix(0, s)
	d.slot <- op // capacity 1 and busy was false: never blocks
	return nil
}

func (d *device) loop() {
	defer d.wg.Done()
	for {
		var op *devOp
		select {
		case op = <-d.slot:
		case <-d.stop:
			return
		}
		n := len(op.buf)
		cost := d.cost(n)
		deadline := op.queued.Add(cost)

		f := Fault(d.fault.Load())
		switch f {
		case FaultVanish:
			d.vanish()
			continue
		case FaultHang:
			// The operation sits in the slot; the interrupt never comes
			// unless the fault is cleared.
			select {
			case <-d.unhang:
			case <-d.stop:
				return
			}
			if d.vanishd.Load() {
				continue
			}
		case FaultError:
			op.err = errDevice
		}
		if op.err == nil {
			d.process(op)
		}
		spinUntil(deadline)
		now := time.Now()
		late := now.Sub(deadline)
		if late < 0 {
			late = 0
		}
		d.statsMu.Lock()
		d.stats.Ops++
		d.stats.Bytes += uint64(n)
		d.stats.ModelBusy += cost
		d.stats.Lateness += late
		if late > d.stats.MaxLateness {
			d.stats.MaxLateness = late
		}
		d.statsMu.Unlock()
		d.lastDeadline.Store(deadline.UnixNano())
		d.lastIntr.Store(now.UnixNano())
		d.busy.Store(false)
		d.intr(op)
	}
}

// process runs AES-128-CBC over the device's copy, block by block as the
// hardware does (and without allocating).
func (d *device) process(op *devOp) {
	b := op.sess.block
	iv := op.iv
	buf := op.buf
	if op.enc {
		for i := 0; i+16 <= len(buf); i += 16 {
			blk := buf[i : i+16]
			subtleXOR16(blk, iv[:])
			b.Encrypt(blk, blk)
			copy(iv[:], blk)
		}
		return
	}
	var prev [16]byte
	for i := 0; i+16 <= len(buf); i += 16 {
		blk := buf[i : i+16]
		copy(prev[:], blk)
		b.Decrypt(blk, blk)
		subtleXOR16(blk, iv[:])
		iv = prev
	}
}

func subtleXOR16(dst, src []byte) {
	_ = dst[15]
	_ = src[15]
	for i := 0; i < 16; i++ {
		dst[i] ^= src[i]
	}
}

// vanish removes the device and tells the driver (as a hot-unplug event
// would).
func (d *device) vanish() {
	if d.vanishd.CompareAndSwap(false, true) {
		go d.gone()
	}
}

// inject sets the fault mode.
func (d *device) inject(f Fault) {
	old := Fault(d.fault.Swap(int32(f)))
	switch {
	case f == FaultVanish:
		d.vanish()
		// Release a hung operation so the goroutine observes the vanish.
		select {
		case d.unhang <- struct{}{}:
		default:
		}
	case old == FaultHang && f != FaultHang:
		select {
		case d.unhang <- struct{}{}:
		default:
		}
	}
}

func (d *device) snapshot() DeviceStats {
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	return d.stats
}

// spinUntil waits until t. Operations last tens of microseconds, far below
// the timer resolution a loaded machine gives a sleeper, so the wait spins,
// sleeping only for the part of a long wait beyond 1 ms.
func spinUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		if d > 2*time.Millisecond {
			time.Sleep(d - time.Millisecond)
		}
	}
}
