package virtio

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/virtio/device"
	"github.com/keelinit/keel/crypto/virtio/ring"
	"github.com/keelinit/keel/crypto/virtio/spec"
	"github.com/keelinit/keel/internal/childproc"
)

// RunDeviceIfRequested turns the current process into the device when it
// was started as one (environment ChildEnv=1): it then serves the device
// and exits, never returning. Otherwise it returns at once and records
// that this binary can be re-executed as the device, which Start uses as
// a fallback when no keel-virtio-device binary is found. keeld's main (and
// TestMain of packages that start devices) call it first thing.
func RunDeviceIfRequested() {
	if os.Getenv(ChildEnv) == "1" {
		device.Main()
	}
	selfExecOK.Store(true)
}

var selfExecOK atomic.Bool

// locate finds the device binary; see Options.DevicePath.
func locate(o Options) (*exec.Cmd, error) {
	if o.DevicePath != "" {
		return exec.Command(o.DevicePath), nil
	}
	if p := os.Getenv(DeviceEnv); p != "" {
		return exec.Command(p), nil
	}
	self, selfErr := os.Executable()
	if selfErr == nil {
		sib := filepath.Join(filepath.Dir(self), DeviceBinary)
		if st, err := os.Stat(sib); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return exec.Command(sib), nil
		}
		if selfExecOK.Load() {
			c := exec.Command(self)
			c.Env = append(os.Environ(), ChildEnv+"=1")
			if os.Getenv("GORACE") == "" {
				// A -race binary otherwise sleeps 1 s at exit.
				c.Env = append(c.Env, "GORACE=atexit_sleep_ms=0")
			}
			return c, nil
		}
	}
	if p, err := exec.LookPath(DeviceBinary); err == nil {
		return exec.Command(p), nil
	}
	return nil, fmt.Errorf("virtio: no device binary: set Options.DevicePath or $%s, install %s next to the executable, or call virtio.RunDeviceIfRequested from main: %w", DeviceEnv, DeviceBinary, crypto.ErrDeviceGone)
}

type slotState uint8

const (
	slotFree slotState = iota
	slotInflight
	slotDone
)

type slotKind uint8

const (
	kindData slotKind = iota
	kindCtrl
)

// slot is the driver's record of one request slot (two descriptors and
// its buffer in the region).
type slot struct {
	state slotState
	kind  slotKind
	req   *crypto.Request
	sess  *session
	err   error
	t     int64 // submission time, ns since the provider's epoch
	// decoding of the result
	dir                crypto.Direction
	cipherOff, dataLen int
	dstLen, hashLen    int
	usedLen            uint32
	ctrlCB             func(in []byte, err error)
	ctrlInLen          int
	// leak: the slot was failed while the device still held it; it is
	// never reused.
	leak bool
}

// vq is the driver side of one virtqueue.
type vq struct {
	p     *Provider
	idx   int
	q     *ring.Queue
	reg   spec.QueueRegion
	kick  *os.File
	call  *os.File
	ctrl  bool
	half  int
	kickv [8]byte

	mu       sync.Mutex
	cond     *sync.Cond // control slots freed
	slots    []slot
	free     []uint16
	fifo     []uint16 // slots in submission order
	fhead    int
	flen     int
	avail    uint16
	dead     error
	stopping bool

	lastUsed uint16 // completion goroutine only (or the depth-1 poller)

	// completion goroutine scratch
	batch   []uint16
	doneBuf []*crypto.Request

	// depth-1 poll mode: the spin lock of the pre-977231e8d4 driver.
	spin atomic.Int32
}

// Provider is the virtio-crypto provider driving one emulated device
// process. Its methods are safe for concurrent use.
type Provider struct {
	opts  Options
	info  crypto.ProviderInfo
	epoch time.Time

	cmd  *exec.Cmd
	conn *net.UnixConn
	mem  []byte
	reg  spec.Region
	vqs  []*vq // data queues, then the control queue

	exited  chan struct{} // closed when the device process was reaped
	waitErr error
	statsCh chan spec.Stats
	statsMu sync.Mutex

	dieOnce   sync.Once
	deadErr   atomic.Pointer[error]
	closeOnce sync.Once
	closing   atomic.Bool
	wg        sync.WaitGroup
	stop      chan struct{}
	nextQ     atomic.Uint32

	batches, published, kicks, ctrlOps atomic.Uint64
}

func (p *Provider) now() int64 { return int64(time.Since(p.epoch)) }

// Start spawns the device process, hands it the shared region and the
// eventfds, and returns the provider once the device is ready. The
// provider is not registered anywhere: pass it to Framework.Register (the
// module does). Close stops the device.
func Start(ctx context.Context, o Options) (*Provider, error) {
	o.setDefaults()
	cfg := spec.Config{DataQueues: o.DataQueues, QueueSize: o.QueueSize, CtrlQueueSize: o.CtrlQueueSize, MaxData: o.MaxData, MaxSessions: o.MaxSessions}
	reg, err := cfg.Layout()
	if err != nil {
		return nil, fmt.Errorf("virtio: %w", err)
	}
	cmd, err := locate(o)
	if err != nil {
		return nil, err
	}
	p := &Provider{opts: o, epoch: time.Now(), reg: reg, exited: make(chan struct{}), statsCh: make(chan spec.Stats, 1), stop: make(chan struct{})}
	p.info = p.makeInfo()

	var fds []int // to close on return (the device holds its own copies)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	memfd, err := unix.MemfdCreate("keel-virtio-crypto", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("virtio: memfd_create: %w", err)
	}
	fds = append(fds, memfd)
	if err := unix.Ftruncate(memfd, int64(reg.Size)); err != nil {
		return nil, fmt.Errorf("virtio: ftruncate region: %w", err)
	}
	p.mem, err = unix.Mmap(memfd, 0, reg.Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("virtio: mmap region: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			p.teardown()
		}
	}()
	pass := []int{memfd}
	for i, qr := range reg.Queues {
		q, err := ring.New(p.mem, qr.Ring)
		if err != nil {
			return nil, fmt.Errorf("virtio: queue %d: %w", i, err)
		}
		kfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("virtio: eventfd: %w", err)
		}
		cfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			unix.Close(kfd)
			return nil, fmt.Errorf("virtio: eventfd: %w", err)
		}
		v := &vq{p: p, idx: i, q: q, reg: qr, ctrl: i == len(reg.Queues)-1, half: qr.SlotSize / 2,
			kick:  os.NewFile(uintptr(kfd), fmt.Sprintf("virtio-kick%d", i)),
			call:  os.NewFile(uintptr(cfd), fmt.Sprintf("virtio-call%d", i)),
			slots: make([]slot, qr.Slots), fifo: make([]uint16, qr.Slots)}
		v.cond = sync.NewCond(&v.mu)
		binary.LittleEndian.PutUint64(v.kickv[:], 1)
		for s := qr.Slots - 1; s >= 0; s-- {
			v.free = append(v.free, uint16(s))
		}
		p.vqs = append(p.vqs, v)
		pass = append(pass, kfd, cfd)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("virtio: socketpair: %w", err)
	}
	child := os.NewFile(uintptr(sp[1]), "virtio-device-socket")
	parent := os.NewFile(uintptr(sp[0]), "virtio-driver-socket")
	fc, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		child.Close()
		return nil, fmt.Errorf("virtio: socket: %w", err)
	}
	p.conn = fc.(*net.UnixConn)
	cmd.ExtraFiles = []*os.File{child} // fd 3 == device.SocketFD
	cmd.Stdout = o.DeviceOutput
	cmd.Stderr = o.DeviceOutput
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Started through childproc: keeld's orphan reaper leaves its exit
	// status to us, and its exit is seen even if its output stays open.
	c, err := childproc.Start(cmd)
	child.Close()
	if err != nil {
		return nil, fmt.Errorf("virtio: start device %s: %w", cmd.Path, err)
	}
	p.cmd = cmd
	go func() {
		_, p.waitErr = c.State()
		close(p.exited)
		p.die(fmt.Errorf("virtio: device process exited (%v): %w", p.waitErr, crypto.ErrDeviceGone))
	}()
	if err := spec.Send(p.conn, spec.EncodeSetup(cfg), pass...); err != nil {
		return nil, err
	}
	dl := time.Now().Add(o.StartTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	p.conn.SetReadDeadline(dl)
	msg, rfds, err := spec.Recv(p.conn, make([]byte, 64))
	for _, fd := range rfds {
		unix.Close(fd)
	}
	if err != nil || spec.MsgType(msg) != spec.MsgReady {
		return nil, fmt.Errorf("virtio: device did not become ready: %v: %w", err, crypto.ErrDeviceGone)
	}
	p.conn.SetReadDeadline(time.Time{})
	p.wg.Add(1)
	go p.reader()
	for _, v := range p.vqs {
		if v.ctrl && o.Mode == ModeDepth1Poll {
			// The poller reaps the control queue itself; no interrupts.
			v.q.SetAvailFlags(ring.AvailFNoInterrupt)
			continue
		}
		p.wg.Add(1)
		go v.completer()
	}
	p.wg.Add(1)
	go p.watchdog()
	ok = true
	return p, nil
}

func (p *Provider) makeInfo() crypto.ProviderInfo {
	mode := "async"
	if p.opts.Mode == ModeDepth1Poll {
		mode = "depth1-poll"
	}
	return crypto.ProviderInfo{
		Name: p.opts.Name, Kind: crypto.KindHardware, Priority: p.opts.Priority, Emulated: true,
		Params: map[string]string{
			"model":           "virtio-crypto (emulated device process)",
			"data_queues":     strconv.Itoa(p.opts.DataQueues),
			"queue_size":      strconv.Itoa(int(p.opts.QueueSize)),
			"ctrl_queue_size": strconv.Itoa(int(p.opts.CtrlQueueSize)),
			"max_data":        strconv.Itoa(p.opts.MaxData),
			"ctrl_mode":       mode,
			"transport":       "split virtqueues in memfd, eventfd kicks, SCM_RIGHTS setup",
		},
	}
}

// Info describes the provider; Emulated is true and Params holds the
// device model.
func (p *Provider) Info() crypto.ProviderInfo {
	info := p.info
	info.Params = make(map[string]string, len(p.info.Params)+1)
	for k, v := range p.info.Params {
		info.Params[k] = v
	}
	if p.cmd != nil && p.cmd.Process != nil {
		info.Params["device_pid"] = strconv.Itoa(p.cmd.Process.Pid)
	}
	return info
}

// Capabilities lists AES-CBC 128/192/256 with each HMAC (algorithm
// chaining), NULL with each HMAC (MAC service), AES-GCM 128/256 and
// ChaCha20-Poly1305 (AEAD service), each up to Options.MaxData bytes.
func (p *Provider) Capabilities() []crypto.Capability {
	var caps []crypto.Capability
	add := func(a crypto.Algorithm) {
		caps = append(caps, crypto.Capability{Alg: a, MaxData: p.opts.MaxData})
	}
	for _, kb := range []int{128, 192, 256} {
		for _, a := range allAuths {
			add(crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: kb, Auth: a})
		}
	}
	for _, a := range allAuths {
		add(crypto.Algorithm{Cipher: crypto.CipherNull, Auth: a})
	}
	add(crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128})
	add(crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 256})
	add(crypto.Algorithm{Cipher: crypto.CipherChaCha20Poly1305, KeyBits: 256})
	return caps
}

var allAuths = []crypto.Auth{crypto.AuthHMACSHA1_96, crypto.AuthHMACSHA256_128, crypto.AuthHMACSHA384_192, crypto.AuthHMACSHA512_256}

func macAlgo(a crypto.Auth) uint32 {
	switch a {
	case crypto.AuthHMACSHA1_96:
		return spec.MACHMACSHA1
	case crypto.AuthHMACSHA256_128:
		return spec.MACHMACSHA256
	case crypto.AuthHMACSHA384_192:
		return spec.MACHMACSHA384
	case crypto.AuthHMACSHA512_256:
		return spec.MACHMACSHA512
	}
	return 0
}

// Pid returns the device process id.
func (p *Provider) Pid() int { return p.cmd.Process.Pid }

// Stats are driver-side counters.
type Stats struct {
	// Batches counts data Submit calls that published requests; Published
	// the requests they published; Kicks the kicks actually sent (after
	// event suppression). Published/Kicks is the requests per kick.
	Batches, Published, Kicks uint64
	// CtrlOps counts control requests.
	CtrlOps uint64
}

// Stats returns the driver's counters.
func (p *Provider) Stats() Stats {
	return Stats{Batches: p.batches.Load(), Published: p.published.Load(), Kicks: p.kicks.Load(), CtrlOps: p.ctrlOps.Load()}
}

// DeviceStats asks the device process for its counters and CPU time.
func (p *Provider) DeviceStats(ctx context.Context) (spec.Stats, error) {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	if err := spec.Send(p.conn, spec.EncodeMsg(spec.MsgStats, 0)); err != nil {
		return spec.Stats{}, err
	}
	select {
	case s := <-p.statsCh:
		return s, nil
	case <-ctx.Done():
		return spec.Stats{}, ctx.Err()
	case <-p.exited:
		return spec.Stats{}, fmt.Errorf("virtio: device stats: %w", crypto.ErrDeviceGone)
	}
}

// InjectFault tells the device process to fail data requests
// (spec.FaultFail), stop consuming its queues (spec.FaultStall), exit
// (spec.FaultExit), or behave (spec.FaultNone).
func (p *Provider) InjectFault(f uint32) error {
	return spec.Send(p.conn, spec.EncodeMsg(spec.MsgFault, f))
}

// Signal sends sig to the device process (SIGKILL kills it, SIGSTOP
// stalls it, SIGCONT resumes it).
func (p *Provider) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// reader watches the socket: replies to stats requests, and EOF, which
// means the device died.
func (p *Provider) reader() {
	defer p.wg.Done()
	buf := make([]byte, 256)
	for {
		msg, fds, err := spec.Recv(p.conn, buf)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil {
			if !p.closing.Load() {
				p.die(fmt.Errorf("virtio: device socket closed (%v): %w", err, crypto.ErrDeviceGone))
			}
			return
		}
		if spec.MsgType(msg) == spec.MsgStatsReply {
			if s, err := spec.DecodeStats(msg); err == nil {
				select {
				case p.statsCh <- s:
				default:
				}
			}
		}
	}
}

// watchdog declares the device stalled when a request has waited longer
// than KickTimeout.
func (p *Provider) watchdog() {
	defer p.wg.Done()
	t := time.NewTicker(max(p.opts.KickTimeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		now := p.now()
		for _, v := range p.vqs {
			v.mu.Lock()
			stalled := false
			for k := 0; k < v.flen; k++ {
				s := &v.slots[v.fifo[(v.fhead+k)%len(v.fifo)]]
				if s.state == slotInflight {
					stalled = now-s.t > int64(p.opts.KickTimeout)
					break
				}
			}
			v.mu.Unlock()
			if stalled {
				p.die(fmt.Errorf("virtio: device queue %d gave no completion within %v: %w", v.idx, p.opts.KickTimeout, crypto.ErrTimeout))
				return
			}
		}
	}
}

// die marks the device dead: the process is killed, every queue fails its
// in-flight requests with StatusError (Data untouched: results only ever
// come from the shared region), and OnFault is told.
func (p *Provider) die(err error) {
	p.dieOnce.Do(func() {
		p.deadErr.Store(&err)
		if p.cmd != nil && p.cmd.Process != nil {
			p.cmd.Process.Kill()
		}
		for _, v := range p.vqs {
			v.mu.Lock()
			v.dead = err
			v.cond.Broadcast()
			v.mu.Unlock()
			v.wake()
		}
		if f := p.opts.OnFault; f != nil && !p.closing.Load() {
			go f(err)
		}
	})
}

// Dead returns the error that killed the device, or nil.
func (p *Provider) Dead() error {
	if e := p.deadErr.Load(); e != nil {
		return *e
	}
	return nil
}

// wake signals the queue's completion goroutine through its call eventfd,
// as the device would.
func (v *vq) wake() { v.call.Write(v.kickv[:]) }

// doKick notifies the device unless it asked for no kicks.
func (v *vq) doKick() {
	if v.q.UsedFlags()&ring.UsedFNoNotify != 0 {
		return
	}
	v.p.kicks.Add(1)
	v.kick.Write(v.kickv[:])
}

// Close stops the provider: no new sessions; outstanding requests drain
// until ctx ends, then are failed with StatusError (crypto.ErrDeviceGone);
// the device process is stopped and the region unmapped. Idempotent.
func (p *Provider) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		for _, v := range p.vqs {
			if err := v.waitIdle(ctx); err != nil {
				p.die(fmt.Errorf("virtio: unloading: %w", crypto.ErrDeviceGone))
				v.waitIdle(context.Background())
			}
		}
		p.conn.Close() // the device exits on EOF
		select {
		case <-p.exited:
		case <-time.After(2 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		p.teardown()
	})
	return nil
}

// teardown stops the goroutines and releases the region.
func (p *Provider) teardown() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	if p.conn != nil {
		p.conn.Close()
	}
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
	for _, v := range p.vqs {
		v.mu.Lock()
		v.stopping = true
		v.mu.Unlock()
		v.wake()
	}
	p.wg.Wait()
	for _, v := range p.vqs {
		v.kick.Close()
		v.call.Close()
	}
	if p.mem != nil {
		unix.Munmap(p.mem)
		p.mem = nil
	}
}

// waitIdle waits until the queue holds no request.
func (v *vq) waitIdle(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		v.mu.Lock()
		for v.flen > 0 && !v.stopping {
			v.cond.Wait()
		}
		v.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pushLocked appends slot i to the submission-order FIFO.
func (v *vq) pushLocked(i uint16) {
	v.fifo[(v.fhead+v.flen)%len(v.fifo)] = i
	v.flen++
}

// publishLocked makes slot i's two-descriptor chain available.
func (v *vq) publishLocked(i uint16, outLen, inLen int) {
	base := uint64(v.reg.Slot(int(i)))
	d0, d1 := 2*i, 2*i+1
	v.q.SetDesc(d0, ring.Desc{Addr: base, Len: uint32(outLen), Flags: ring.DescFNext, Next: d1})
	v.q.SetDesc(d1, ring.Desc{Addr: base + uint64(v.half), Len: uint32(inLen), Flags: ring.DescFWrite})
	v.q.SetAvail(v.avail, d0)
	v.avail++
}

func (v *vq) out(i uint16) []byte {
	b := v.reg.Slot(int(i))
	return v.p.mem[b : b+v.half]
}

func (v *vq) in(i uint16) []byte {
	b := v.reg.Slot(int(i)) + v.half
	return v.p.mem[b : b+v.half]
}

// completer is the queue's interrupt handler: it reaps the used ring,
// decodes results and delivers completions in submission order, with
// VIRTQ_AVAIL_F_NO_INTERRUPT set while it works.
func (v *vq) completer() {
	defer v.p.wg.Done()
	var buf [8]byte
	for {
		if _, err := v.call.Read(buf[:]); err != nil {
			return
		}
		v.q.SetAvailFlags(ring.AvailFNoInterrupt)
		for {
			if v.reap() {
				return
			}
			v.q.SetAvailFlags(0)
			if v.q.UsedIdx() == v.lastUsed {
				break
			}
			v.q.SetAvailFlags(ring.AvailFNoInterrupt)
		}
	}
}

// reap processes the used ring and delivers what completed, in order
// (failing everything still in flight if the device is dead or the queue
// stopping). It returns true when the queue is stopping.
func (v *vq) reap() bool {
	used := v.q.UsedIdx()
	for v.lastUsed != used {
		id, n := v.q.Used(v.lastUsed)
		v.lastUsed++
		i := uint16(id / 2)
		if id%2 != 0 || int(i) >= len(v.slots) {
			continue // garbage from the device
		}
		v.mu.Lock()
		s := &v.slots[i]
		if s.state == slotInflight {
			s.state, s.usedLen = slotDone, n
		}
		v.mu.Unlock()
	}
	v.mu.Lock()
	stopping := v.stopping
	dead := v.dead
	if stopping && dead == nil {
		// Never leave a request behind, even if the provider is torn down
		// with requests queued.
		dead = fmt.Errorf("virtio: provider closed: %w", crypto.ErrDeviceGone)
	}
	v.batch = v.batch[:0]
	for v.flen > 0 {
		i := v.fifo[v.fhead]
		s := &v.slots[i]
		if s.state == slotInflight {
			if dead == nil {
				break
			}
			s.err = dead
		}
		v.fhead = (v.fhead + 1) % len(v.fifo)
		v.flen--
		v.batch = append(v.batch, i)
	}
	v.mu.Unlock()
	if len(v.batch) > 0 {
		v.deliver(v.batch)
	}
	return stopping
}

// deliver finishes and completes the slots (outside the lock: the slots
// are still owned by this goroutine until freed below).
func (v *vq) deliver(batch []uint16) {
	for _, i := range batch {
		s := &v.slots[i]
		if s.kind == kindCtrl {
			v.finishCtrl(i, s)
			continue
		}
		v.finishData(i, s)
	}
	for k := 0; k < len(batch); {
		s := &v.slots[batch[k]]
		if s.kind == kindCtrl {
			k++
			continue
		}
		sess := s.sess
		v.doneBuf = v.doneBuf[:0]
		for ; k < len(batch) && v.slots[batch[k]].kind == kindData && v.slots[batch[k]].sess == sess; k++ {
			v.doneBuf = append(v.doneBuf, v.slots[batch[k]].req)
		}
		sess.done(v.doneBuf)
	}
	clear(v.doneBuf)
	v.mu.Lock()
	for _, i := range batch {
		s := &v.slots[i]
		if sess := s.sess; sess != nil {
			sess.outstanding--
			if sess.outstanding == 0 && sess.idle != nil {
				close(sess.idle)
				sess.idle = nil
			}
		}
		leak := s.leak
		*s = slot{}
		if !leak {
			v.free = append(v.free, i)
		}
	}
	v.cond.Broadcast()
	v.mu.Unlock()
}

func (v *vq) finishCtrl(i uint16, s *slot) {
	if s.err != nil {
		s.ctrlCB(nil, s.err)
		return
	}
	if int(s.usedLen) < s.ctrlInLen {
		s.ctrlCB(nil, fmt.Errorf("virtio: control request: device wrote %d of %d bytes", s.usedLen, s.ctrlInLen))
		return
	}
	s.ctrlCB(v.in(i)[:s.ctrlInLen], nil)
}
