// Package glxsb is a crypto provider for the AMD Geode LX Security Block,
// driving an emulated device (see device.go): one operation slot,
// AES-128-CBC only, at most 16 KB per operation, with a modelled throughput
// and setup latency. The device really encrypts, with crypto/aes.
//
// The security block has no HMAC engine. Like FreeBSD's glxsb(4), which
// hashes in software around the hardware cipher (glxsb_hash.c), the driver
// claims AES-128-CBC with each ESP HMAC and computes the HMAC on the CPU,
// in its completion goroutine, so that the slot is refilled first.
//
// The driver (the fix of FreeBSD PR kern/132622) keeps a bounded FIFO of
// requests and feeds the slot back to back from the device's completion
// interrupt; completions are delivered asynchronously; a full FIFO is
// reported as backpressure (Submit accepts a prefix) and the driver never
// blocks its caller. Options.Blocking reproduces the old driver for
// comparison: one request at a time, and a refusal (the ERESTART of the
// original) while busy, followed by an unblock notification.
package glxsb

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha512"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelinit/keel/crypto"
)

// MaxOp is the largest operation the security block accepts, in bytes.
const MaxOp = 16384

// Defaults of Options.
const (
	DefaultThroughputMBps = 45.0
	DefaultSetupLatency   = 20 * time.Microsecond
	DefaultQueueLen       = 256
	DefaultOpTimeout      = time.Second
)

// Options configure a Provider and its emulated device. The zero value
// gives the defaults.
type Options struct {
	// Name is the provider name (default "glxsb").
	Name string
	// Priority is the static tie-break hint shown in ProviderInfo.
	Priority int
	// ThroughputMBps is the modelled device throughput in MB/s (10^6
	// bytes per second); default 45.
	ThroughputMBps float64
	// SetupLatency is the modelled fixed cost of one operation; default
	// 20 µs. A negative value means none.
	SetupLatency time.Duration
	// QueueLen bounds the requests the driver holds (queued, in the slot
	// or completing); default 256. Beyond it Submit applies backpressure.
	QueueLen int
	// Blocking selects the old single-request driver of kern/132622:
	// Submit accepts one request only when nothing is outstanding and
	// refuses (returns 0) otherwise; OnUnblock is called when it becomes
	// free again. Off by default.
	Blocking bool
	// OnUnblock is called (from the completion goroutine, without locks
	// held) in Blocking mode each time the driver becomes free: the
	// crypto_unblock of the original. It must not block.
	OnUnblock func()
	// OpTimeout is how long the slot may stay busy before the driver
	// declares the device hung; default 1 s.
	OpTimeout time.Duration
	// OnFault is called once, from its own goroutine, when the device
	// hangs or vanishes, after every outstanding request has been queued
	// for completion with StatusError (Data and ICV untouched). The module
	// wires it to Framework.ReportFault.
	OnFault func(err error)
}

// Stats are driver and device counters.
type Stats struct {
	Device    DeviceStats
	Accepted  uint64
	Completed uint64
	// Refused counts Submit calls that accepted nothing because the FIFO
	// was full (queued mode) or the driver was busy (Blocking mode: the
	// ERESTART count).
	Refused uint64
	// Failed counts requests completed with StatusError.
	Failed uint64
}

// Provider is the glxsb crypto provider. Its methods are safe for
// concurrent use. After Close it accepts no sessions or requests.
type Provider struct {
	opts Options
	info crypto.ProviderInfo
	dev  *device

	mu          sync.Mutex
	fifo        []*devOp // ring buffer of capacity QueueLen
	fhead, flen int
	slotOp      *devOp // live operation in the slot (nil if none or abandoned)
	devBusy     bool   // the device holds an operation (maybe abandoned)
	slotStart   time.Time
	outstanding int
	dead        error
	closing     bool
	free        []*devOp
	idle        chan struct{} // closed when outstanding drops to 0 while closing

	cmu     sync.Mutex
	cq      []*devOp
	cspare  []*devOp
	cwake   chan struct{}
	sumBuf  [sha512.Size]byte
	doneBuf []*crypto.Request

	stop      chan struct{}
	wg        sync.WaitGroup
	faultOnce sync.Once
	closeOnce sync.Once

	accepted, completed, refused, failed atomic.Uint64
}

// New creates a provider and starts its emulated device. Close stops it.
func New(opts Options) (*Provider, error) {
	if opts.Name == "" {
		opts.Name = "glxsb"
	}
	if opts.ThroughputMBps == 0 {
		opts.ThroughputMBps = DefaultThroughputMBps
	}
	if opts.ThroughputMBps < 0 {
		return nil, fmt.Errorf("glxsb: options: ThroughputMBps %g is negative", opts.ThroughputMBps)
	}
	switch {
	case opts.SetupLatency == 0:
		opts.SetupLatency = DefaultSetupLatency
	case opts.SetupLatency < 0:
		opts.SetupLatency = 0
	}
	if opts.QueueLen == 0 {
		opts.QueueLen = DefaultQueueLen
	}
	if opts.QueueLen < 0 {
		return nil, fmt.Errorf("glxsb: options: QueueLen %d is negative", opts.QueueLen)
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	mode := "queued"
	if opts.Blocking {
		mode = "blocking"
	}
	p := &Provider{
		opts:  opts,
		fifo:  make([]*devOp, opts.QueueLen),
		cwake: make(chan struct{}, 1),
		stop:  make(chan struct{}),
		info: crypto.ProviderInfo{
			Name:     opts.Name,
			Kind:     crypto.KindHardware,
			Priority: opts.Priority,
			Emulated: true,
			Params: map[string]string{
				"model":            "AMD Geode LX Security Block",
				"throughput_mbps":  strconv.FormatFloat(opts.ThroughputMBps, 'g', -1, 64),
				"setup_latency_us": strconv.FormatFloat(float64(opts.SetupLatency)/float64(time.Microsecond), 'g', -1, 64),
				"max_op_bytes":     strconv.Itoa(MaxOp),
				"slots":            "1",
				"queue_len":        strconv.Itoa(opts.QueueLen),
				"driver_mode":      mode,
				"hmac":             "cpu",
			},
		},
	}
	p.dev = newDevice(opts.ThroughputMBps, opts.SetupLatency, MaxOp)
	p.dev.intr = p.intr
	p.dev.gone = p.deviceGone
	p.dev.run()
	p.wg.Add(2)
	go p.completer()
	go p.watchdog()
	return p, nil
}

// Info describes the provider; Emulated is true and Params holds the
// device model.
func (p *Provider) Info() crypto.ProviderInfo {
	info := p.info
	info.Params = make(map[string]string, len(p.info.Params))
	for k, v := range p.info.Params {
		info.Params[k] = v
	}
	return info
}

var auths = []crypto.Auth{crypto.AuthHMACSHA1_96, crypto.AuthHMACSHA256_128, crypto.AuthHMACSHA384_192, crypto.AuthHMACSHA512_256}

// Capabilities lists AES-128-CBC with each ESP HMAC, at most MaxOp bytes.
func (p *Provider) Capabilities() []crypto.Capability {
	caps := make([]crypto.Capability, 0, len(auths))
	for _, a := range auths {
		caps = append(caps, crypto.Capability{Alg: crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: a}, MaxData: MaxOp})
	}
	return caps
}

// InjectFault sets the emulated device's fault mode (for tests and
// benchmarks).
func (p *Provider) InjectFault(f Fault) { p.dev.inject(f) }

// Stats returns a snapshot of the counters.
func (p *Provider) Stats() Stats {
	return Stats{
		Device:    p.dev.snapshot(),
		Accepted:  p.accepted.Load(),
		Completed: p.completed.Load(),
		Refused:   p.refused.Load(),
		Failed:    p.failed.Load(),
	}
}

// NewSession creates an AES-128-CBC+HMAC session. The keys are copied.
// It fails with crypto.ErrUnsupported for any other algorithm, with
// crypto.ErrKeySize for bad keys, and with crypto.ErrDeviceGone or
// crypto.ErrClosed when the device is dead or the provider closed.
func (p *Provider) NewSession(sp crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	if sp.Alg.Cipher != crypto.CipherAESCBC || sp.Alg.KeyBits != 128 || sp.Alg.Auth.Hash() == nil {
		return nil, fmt.Errorf("glxsb: %v: %w", sp.Alg, crypto.ErrUnsupported)
	}
	if err := sp.CheckParams(); err != nil {
		return nil, fmt.Errorf("glxsb: %w", err)
	}
	if done == nil {
		return nil, fmt.Errorf("glxsb: %v: nil completion func", sp.Alg)
	}
	p.mu.Lock()
	dead, closing := p.dead, p.closing
	p.mu.Unlock()
	if dead != nil {
		return nil, dead
	}
	if closing {
		return nil, fmt.Errorf("glxsb: %w", crypto.ErrClosed)
	}
	block, err := aes.NewCipher(sp.CipherKey)
	if err != nil {
		return nil, fmt.Errorf("glxsb: %v: %w", sp.Alg, crypto.ErrKeySize)
	}
	return &session{
		p:      p,
		alg:    sp.Alg,
		block:  block,
		mac:    hmac.New(sp.Alg.Auth.Hash(), sp.AuthKey),
		icvLen: sp.Alg.ICVLen(),
		done:   done,
	}, nil
}

// session is a glxsb session. The AES key schedule (crypto/aes) and the
// HMAC state (crypto/hmac) are stdlib objects that cannot be zeroed; Close
// drops them. The mac is used only by the completion goroutine.
type session struct {
	p      *Provider
	alg    crypto.Algorithm
	block  cipher.Block
	mac    hash.Hash
	icvLen int
	done   crypto.CompletionFunc

	// guarded by p.mu
	closed      bool
	outstanding int
	idle        chan struct{}
}

func (s *session) validate(r *crypto.Request) error {
	switch {
	case len(r.Data)%16 != 0:
		return fmt.Errorf("glxsb: request: data length %d is not a multiple of 16: %w", len(r.Data), crypto.ErrInvalidRequest)
	case len(r.Data) > MaxOp:
		return fmt.Errorf("glxsb: request: data length %d exceeds %d: %w", len(r.Data), MaxOp, crypto.ErrInvalidRequest)
	case len(r.IV) != 16:
		return fmt.Errorf("glxsb: request: IV length %d, want 16: %w", len(r.IV), crypto.ErrInvalidRequest)
	case len(r.ICV) != s.icvLen:
		return fmt.Errorf("glxsb: request: ICV length %d, want %d: %w", len(r.ICV), s.icvLen, crypto.ErrInvalidRequest)
	}
	return nil
}

// Submit queues a prefix of reqs (see crypto.Session). In queued mode it
// accepts up to the FIFO's free room; in Blocking mode it accepts at most
// one request and only when nothing is outstanding. It never blocks. On a
// dead device it accepts the requests and completes them with StatusError
// (crypto.ErrDeviceGone or crypto.ErrTimeout), so the framework retries
// them elsewhere. After Close it accepts nothing.
func (s *session) Submit(reqs []*crypto.Request) int {
	if len(reqs) == 0 {
		return 0
	}
	p := s.p
	p.mu.Lock()
	if s.closed || p.closing {
		p.mu.Unlock()
		return 0
	}
	room := p.opts.QueueLen - p.outstanding
	var queued time.Time
	if p.opts.Blocking {
		room = 0
		if p.outstanding == 0 {
			room = 1
		}
	} else {
		queued = time.Now()
	}
	n := min(len(reqs), room)
	if n == 0 {
		p.mu.Unlock()
		p.refused.Add(1)
		return 0
	}
	for _, r := range reqs[:n] {
		op := p.getOpLocked()
		op.sess, op.req, op.enc, op.queued = s, r, r.Dir == crypto.Encrypt, queued
		p.outstanding++
		s.outstanding++
		switch {
		case p.dead != nil:
			op.err = p.dead
		default:
			op.err = s.validate(r)
		}
		if op.err == nil {
			op.buf = append(op.buf[:0], r.Data...)
			copy(op.iv[:], r.IV)
		}
		p.enqueueLocked(op)
	}
	p.mu.Unlock()
	p.accepted.Add(uint64(n))
	return n
}

func (p *Provider) getOpLocked() *devOp {
	if k := len(p.free); k > 0 {
		op := p.free[k-1]
		p.free = p.free[:k-1]
		return op
	}
	return &devOp{}
}

// enqueueLocked puts op behind everything accepted before it: into the slot
// if the device is idle and nothing waits, else into the FIFO. Requests
// that already carry an error go through the FIFO too, so that completions
// stay in submission order.
func (p *Provider) enqueueLocked(op *devOp) {
	if p.flen == 0 && op.err != nil && p.slotOp == nil {
		p.pushDoneLocked(op)
		return
	}
	if p.flen == 0 && !p.devBusy && op.err == nil {
		if !p.startLocked(op) {
			p.deviceFailedLocked(errVanished)
		}
		return
	}
	p.fifo[(p.fhead+p.flen)%len(p.fifo)] = op
	p.flen++
}

// startLocked hands op to the device. When the device refuses (it has
// vanished), op goes back to the head of the FIFO and startLocked reports
// false: the caller must call deviceFailedLocked once every request
// accepted before op has been passed to completion, so that completions
// stay in submission order.
func (p *Provider) startLocked(op *devOp) bool {
	if err := p.dev.start(op); err != nil {
		p.fhead = (p.fhead - 1 + len(p.fifo)) % len(p.fifo)
		p.fifo[p.fhead] = op
		p.flen++
		return false
	}
	p.slotOp, p.devBusy, p.slotStart = op, true, time.Now()
	return true
}

// errVanished is the fault reported when the device refuses an operation.
var errVanished = fmt.Errorf("glxsb: device refused an operation: %w", crypto.ErrDeviceGone)

// startNextLocked feeds the slot from the FIFO, passing failed requests
// straight to completion.
func (p *Provider) startNextLocked() {
	for p.flen > 0 && (!p.devBusy || p.dead != nil) {
		op := p.fifo[p.fhead]
		p.fifo[p.fhead] = nil
		p.fhead = (p.fhead + 1) % len(p.fifo)
		p.flen--
		if op.err != nil || p.dead != nil {
			if op.err == nil {
				op.err = p.dead
			}
			p.pushDoneLocked(op)
			continue
		}
		if !p.startLocked(op) {
			p.deviceFailedLocked(errVanished) // drains the FIFO, op first
			return
		}
	}
}

func (p *Provider) pushDoneLocked(op *devOp) {
	p.cmu.Lock()
	p.cq = append(p.cq, op)
	p.cmu.Unlock()
	select {
	case p.cwake <- struct{}{}:
	default:
	}
}

// intr is the device's completion interrupt. It runs on the device
// goroutine: it hands the finished operation to the completion goroutine
// and refills the slot at once.
func (p *Provider) intr(op *devOp) {
	p.mu.Lock()
	p.devBusy = false
	live := p.slotOp == op
	if live {
		p.slotOp = nil
	}
	// Otherwise op was abandoned (timeout, or its session closed): a late
	// completion is discarded and op, referenced by nobody else, dropped.
	//
	// Refill the slot before waking the completion goroutine (which may
	// cost a thread wake-up), when the next request is startable; failed
	// requests behind op are passed on after it, keeping the order.
	refused := false
	if !p.opts.Blocking && p.dead == nil && p.flen > 0 && p.fifo[p.fhead].err == nil {
		next := p.fifo[p.fhead]
		p.fifo[p.fhead] = nil
		p.fhead = (p.fhead + 1) % len(p.fifo)
		p.flen--
		if !p.startLocked(next) {
			refused = true
		}
	}
	if live {
		p.pushDoneLocked(op)
	}
	if refused {
		p.deviceFailedLocked(errVanished)
	}
	if !p.opts.Blocking && p.dead == nil {
		p.startNextLocked()
	}
	p.mu.Unlock()
}

// abandonSlotLocked fails the live operation in the slot without waiting
// for the device. The device keeps the original devOp (it may still write
// its buffer); a copy carries the request to completion.
func (p *Provider) abandonSlotLocked(err error) {
	op := p.slotOp
	if op == nil {
		return
	}
	p.slotOp = nil
	p.pushDoneLocked(&devOp{sess: op.sess, req: op.req, err: err})
}

// deviceFailedLocked marks the device dead and fails everything
// outstanding, in order.
func (p *Provider) deviceFailedLocked(err error) {
	if p.dead != nil {
		return
	}
	p.dead = err
	p.abandonSlotLocked(err)
	p.startNextLocked() // drains the FIFO with p.dead
	if f := p.opts.OnFault; f != nil {
		p.faultOnce.Do(func() { go f(err) })
	}
}

func (p *Provider) deviceGone() {
	p.mu.Lock()
	p.deviceFailedLocked(fmt.Errorf("glxsb: device vanished: %w", crypto.ErrDeviceGone))
	p.mu.Unlock()
}

func (p *Provider) watchdog() {
	defer p.wg.Done()
	period := max(p.opts.OpTimeout/4, time.Millisecond)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.slotOp != nil && time.Since(p.slotStart) > p.opts.OpTimeout {
			p.deviceFailedLocked(fmt.Errorf("glxsb: operation got no completion within %v: %w", p.opts.OpTimeout, crypto.ErrTimeout))
		}
		p.mu.Unlock()
	}
}

// completer delivers completions: HMAC on the CPU, copy-out of the
// device's result, then the session callback, in device order, batched per
// run of requests of one session.
func (p *Provider) completer() {
	defer p.wg.Done()
	for {
		select {
		case <-p.cwake:
		case <-p.stop:
			return
		}
		for {
			p.cmu.Lock()
			batch := p.cq
			p.cq = p.cspare[:0]
			p.cmu.Unlock()
			if len(batch) == 0 {
				p.cspare = batch
				break
			}
			p.deliver(batch)
			for i := range batch {
				batch[i] = nil
			}
			p.cspare = batch[:0]
		}
	}
}

func (p *Provider) deliver(batch []*devOp) {
	var failed uint64
	for _, op := range batch {
		p.finish(op)
		if op.req.Status == crypto.StatusError {
			failed++
		}
	}
	for i := 0; i < len(batch); {
		s := batch[i].sess
		p.doneBuf = p.doneBuf[:0]
		j := i
		for ; j < len(batch) && batch[j].sess == s; j++ {
			p.doneBuf = append(p.doneBuf, batch[j].req)
		}
		s.done(p.doneBuf)
		i = j
	}
	clear(p.doneBuf)
	p.completed.Add(uint64(len(batch)))
	p.failed.Add(failed)

	var unblock bool
	p.mu.Lock()
	for _, op := range batch {
		s := op.sess
		s.outstanding--
		p.outstanding--
		if s.outstanding == 0 && s.idle != nil {
			close(s.idle)
			s.idle = nil
		}
		op.sess, op.req, op.err = nil, nil, nil
		p.free = append(p.free, op)
	}
	if p.outstanding == 0 {
		if p.idle != nil {
			close(p.idle)
			p.idle = nil
		}
		unblock = p.opts.Blocking
	}
	p.mu.Unlock()
	if unblock && p.opts.OnUnblock != nil {
		p.opts.OnUnblock()
	}
}

// finish sets the request's result. A failed request keeps Data and ICV
// unmodified; decryption verifies the ICV over the untouched ciphertext
// before the plaintext is copied in.
func (p *Provider) finish(op *devOp) {
	r := op.req
	if op.err != nil {
		r.Status, r.Err = crypto.StatusError, op.err
		return
	}
	m := op.sess.mac
	m.Reset()
	m.Write(r.AAD)
	m.Write(r.IV)
	if op.enc {
		copy(r.Data, op.buf)
		m.Write(r.Data)
		m.Write(r.AuthTrailer)
		copy(r.ICV, m.Sum(p.sumBuf[:0]))
		r.Status, r.Err = crypto.StatusOK, nil
		return
	}
	m.Write(r.Data)
	m.Write(r.AuthTrailer)
	sum := m.Sum(p.sumBuf[:0])
	if !hmac.Equal(sum[:op.sess.icvLen], r.ICV) {
		r.Status, r.Err = crypto.StatusAuthFailed, nil
		return
	}
	copy(r.Data, op.buf)
	r.Status, r.Err = crypto.StatusOK, nil
}

// failSessionLocked hands back s's requests that the device has not
// finished: they complete with err, in order.
func (p *Provider) failSessionLocked(s *session, err error) {
	if p.slotOp != nil && p.slotOp.sess == s {
		p.abandonSlotLocked(err)
	}
	// Rebuild the FIFO without s's operations, failing them in order.
	n := p.flen
	for i := 0; i < n; i++ {
		op := p.fifo[p.fhead]
		p.fifo[p.fhead] = nil
		p.fhead = (p.fhead + 1) % len(p.fifo)
		p.flen--
		if op.sess == s {
			if op.err == nil {
				op.err = err
			}
			p.pushDoneLocked(op)
			continue
		}
		p.fifo[(p.fhead+p.flen)%len(p.fifo)] = op
		p.flen++
	}
	if !p.opts.Blocking && p.dead == nil {
		p.startNextLocked()
	}
}

// Close waits until every request accepted by the session has completed.
// If ctx ends first, the requests the device has not finished are handed
// back, completed with StatusError wrapping crypto.ErrDeviceGone (Data and
// ICV untouched), and Close still returns only after their completion was
// delivered. Submit after Close accepts nothing. Close is idempotent.
func (s *session) Close(ctx context.Context) error {
	p := s.p
	p.mu.Lock()
	s.closed = true
	if s.outstanding == 0 {
		p.mu.Unlock()
		return nil
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.failSessionLocked(s, fmt.Errorf("glxsb: session closed with the request in flight: %w", crypto.ErrDeviceGone))
	p.mu.Unlock()
	<-idle
	return nil
}

// Close unloads the provider: it stops accepting sessions and requests,
// lets the device drain what is outstanding until ctx ends, then hands the
// rest back with StatusError (crypto.ErrDeviceGone), waits for their
// completions to be delivered, and stops the device. Requests are never
// dropped. Close is idempotent.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	var idle chan struct{}
	if p.outstanding > 0 {
		if p.idle == nil {
			p.idle = make(chan struct{})
		}
		idle = p.idle
	}
	p.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			p.mu.Lock()
			err := fmt.Errorf("glxsb: unloading: %w", crypto.ErrDeviceGone)
			p.abandonSlotLocked(err)
			if p.dead == nil {
				p.dead = err
			}
			p.startNextLocked()
			p.mu.Unlock()
			<-idle
		}
	}
	p.closeOnce.Do(func() {
		close(p.stop)
		p.wg.Wait()
		// Release a hung device goroutine, then stop it.
		p.dev.inject(FaultNone)
		p.dev.shutdown()
	})
	return nil
}
