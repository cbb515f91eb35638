// Package device is the emulated virtio-crypto device. It runs in its own
// process (cmd/keel-virtio-device, or a re-exec of a binary that calls
// virtio.RunDeviceIfRequested), receives the shared region and the
// eventfds over a unix socket, and serves the virtqueues with real crypto
// from the standard library.
package device

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/crypto/virtio/ring"
	"github.com/keelinit/keel/crypto/virtio/spec"
)

// SocketFD is the descriptor on which a device process finds its socket.
const SocketFD = 3

// Main serves the socket inherited as SocketFD and exits the process: 0
// when the driver closes the socket, 1 on a setup error. It never returns.
func Main() {
	f := os.NewFile(SocketFD, "virtio-crypto-socket")
	if err := Serve(f); err != nil {
		fmt.Fprintln(os.Stderr, "keel-virtio-device:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type sessKind int

const (
	kindCipher sessKind = iota
	kindChain
	kindMAC
	kindAEAD
)

type session struct {
	mu      sync.Mutex
	kind    sessKind
	dir     uint32
	order   uint32
	block   cipher.Block
	mac     hash.Hash
	hashLen int
	aead    cipher.AEAD
	keys    [][]byte // private copies, zeroed on destroy
}

type queue struct {
	d     *dev
	q     *ring.Queue
	reg   spec.QueueRegion
	kick  *os.File
	call  *os.File
	ctrl  bool
	last  uint16 // next avail position to consume
	used  uint16 // next used position to fill
	kbuf  [8]byte
	callv [8]byte
}

type dev struct {
	mem    []byte
	reg    spec.Region
	queues []*queue

	smu      sync.RWMutex
	sessions map[uint64]*session
	nextID   uint64
	maxSess  int

	fault atomic.Uint32

	requests, ctrlRequests, kicks, interrupts atomic.Uint64
}

// Serve runs the device on the socket: it waits for the setup message,
// maps the region, serves every queue, and returns nil when the driver
// closes the socket.
func Serve(sock *os.File) error {
	fc, err := net.FileConn(sock)
	sock.Close()
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	conn, ok := fc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("socket: not a unix socket")
	}
	defer conn.Close()
	buf := make([]byte, 256)
	msg, fds, err := spec.Recv(conn, buf)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	cfg, err := spec.DecodeSetup(msg)
	if err != nil {
		closeFDs(fds)
		return err
	}
	reg, err := cfg.Layout()
	if err != nil {
		closeFDs(fds)
		return err
	}
	if want := 1 + 2*len(reg.Queues); len(fds) != want {
		closeFDs(fds)
		return fmt.Errorf("setup: %d descriptors, want %d", len(fds), want)
	}
	// A region file shorter than the layout would map pages that fault
	// (SIGBUS) when a queue touches them: refuse it up front.
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		closeFDs(fds)
		return fmt.Errorf("setup: fstat region: %w", err)
	}
	if st.Size < int64(reg.Size) {
		closeFDs(fds)
		return fmt.Errorf("setup: region file of %d bytes, the layout needs %d", st.Size, reg.Size)
	}
	mem, err := unix.Mmap(fds[0], 0, reg.Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(fds[0])
	if err != nil {
		closeFDs(fds[1:])
		return fmt.Errorf("setup: mmap region: %w", err)
	}
	// The region stays mapped until the process exits: the queue
	// goroutines use it until then.
	d := &dev{mem: mem, reg: reg, sessions: map[uint64]*session{}, maxSess: cfg.MaxSessions, nextID: 1}
	if d.maxSess <= 0 {
		d.maxSess = 65536
	}
	for i, qr := range reg.Queues {
		q, err := ring.New(mem, qr.Ring)
		if err != nil {
			return fmt.Errorf("setup: queue %d: %w", i, err)
		}
		d.queues = append(d.queues, &queue{
			d: d, q: q, reg: qr,
			kick: os.NewFile(uintptr(fds[1+2*i]), fmt.Sprintf("kick%d", i)),
			call: os.NewFile(uintptr(fds[2+2*i]), fmt.Sprintf("call%d", i)),
			ctrl: i == len(reg.Queues)-1,
		})
	}
	for _, q := range d.queues {
		go q.serve()
	}
	if err := spec.Send(conn, spec.EncodeMsg(spec.MsgReady, 0)); err != nil {
		return err
	}
	for {
		msg, fds, err := spec.Recv(conn, buf)
		closeFDs(fds)
		if err != nil {
			// The driver closed the socket (or died): the device goes away.
			return nil
		}
		switch spec.MsgType(msg) {
		case spec.MsgFault:
			f := spec.MsgArg(msg)
			if f == spec.FaultExit {
				os.Exit(3)
			}
			d.fault.Store(f)
		case spec.MsgStats:
			var ru unix.Rusage
			unix.Getrusage(unix.RUSAGE_SELF, &ru)
			st := spec.Stats{
				UserNs: uint64(ru.Utime.Nano()), SysNs: uint64(ru.Stime.Nano()),
				Requests: d.requests.Load(), CtrlRequests: d.ctrlRequests.Load(),
				Kicks: d.kicks.Load(), Interrupts: d.interrupts.Load(),
			}
			if err := spec.Send(conn, spec.EncodeStats(st)); err != nil {
				return nil
			}
		}
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// serve consumes the queue: it processes every available request, fills
// the used ring, publishes it and interrupts once per batch (unless the
// driver set VIRTQ_AVAIL_F_NO_INTERRUPT), asks for no kicks while it
// works (VIRTQ_USED_F_NO_NOTIFY), and sleeps on the kick eventfd when the
// queue is empty.
func (q *queue) serve() {
	binary.LittleEndian.PutUint64(q.callv[:], 1)
	for {
		if q.d.fault.Load() == spec.FaultStall {
			time.Sleep(time.Millisecond)
			continue
		}
		q.q.SetUsedFlags(ring.UsedFNoNotify)
		for q.d.fault.Load() != spec.FaultStall {
			avail := q.q.AvailIdx()
			if avail == q.last {
				break
			}
			for q.last != avail {
				head := q.q.Avail(q.last)
				n := q.process(head)
				q.q.SetUsed(q.used, uint32(head), n)
				q.used++
				q.last++
			}
			q.q.PublishUsed(q.used)
			if q.q.AvailFlags()&ring.AvailFNoInterrupt == 0 {
				q.d.interrupts.Add(1)
				if _, err := q.call.Write(q.callv[:]); err != nil {
					os.Exit(0) // driver gone
				}
			}
		}
		q.q.SetUsedFlags(0)
		if q.q.AvailIdx() != q.last || q.d.fault.Load() == spec.FaultStall {
			continue
		}
		if _, err := q.kick.Read(q.kbuf[:]); err != nil {
			os.Exit(0)
		}
		q.d.kicks.Add(1)
	}
}

// buf returns the guest memory of a descriptor, or nil if it lies outside
// the region.
func (q *queue) buf(d ring.Desc) []byte {
	end := d.Addr + uint64(d.Len)
	if end < d.Addr || end > uint64(len(q.d.mem)) {
		return nil
	}
	return q.d.mem[d.Addr:end:end]
}

// process handles the request whose chain starts at head and returns the
// number of bytes written into device-writable memory.
func (q *queue) process(head uint16) uint32 {
	d0 := q.q.Desc(head)
	if d0.Flags&ring.DescFNext == 0 || d0.Flags&ring.DescFWrite != 0 {
		return 0
	}
	d1 := q.q.Desc(d0.Next)
	if d1.Flags&ring.DescFWrite == 0 {
		return 0
	}
	out, in := q.buf(d0), q.buf(d1)
	if out == nil || len(in) == 0 {
		return 0
	}
	if q.ctrl {
		q.d.ctrlRequests.Add(1)
		return q.d.control(out, in)
	}
	q.d.requests.Add(1)
	n, st := q.d.data(out, in)
	in[len(in)-1] = st
	if st != spec.StatusOK && st != spec.StatusBadMsg {
		n = 0
	}
	return uint32(n + 1)
}

// control handles a control request.
func (d *dev) control(out, in []byte) uint32 {
	if len(out) < spec.CtrlReqLen {
		in[len(in)-1] = spec.StatusBadMsg
		return uint32(len(in))
	}
	op := binary.LittleEndian.Uint32(out)
	if spec.IsDestroy(op) {
		st := d.destroy(spec.DestroyID(out))
		in[0] = st
		return 1
	}
	if len(in) < spec.SessionInputLen {
		return 0
	}
	id, st := d.create(out)
	binary.LittleEndian.PutUint64(in[0:], id)
	binary.LittleEndian.PutUint32(in[8:], uint32(st))
	binary.LittleEndian.PutUint32(in[12:], 0)
	return spec.SessionInputLen
}

func hashFor(algo uint32) (func() hash.Hash, int) {
	switch algo {
	case spec.MACHMACSHA1:
		return sha1.New, sha1.Size
	case spec.MACHMACSHA256:
		return sha256.New, sha256.Size
	case spec.MACHMACSHA384:
		return sha512.New384, sha512.Size384
	case spec.MACHMACSHA512:
		return sha512.New, sha512.Size
	}
	return nil, 0
}

func keep(s *session, k []byte) []byte {
	c := append([]byte(nil), k...)
	s.keys = append(s.keys, c)
	return c
}

// create handles CREATE_SESSION for the cipher, MAC and AEAD services.
func (d *dev) create(out []byte) (uint64, uint8) {
	c, err := spec.DecodeCreate(out)
	if err != nil {
		return 0, spec.StatusBadMsg
	}
	s := &session{}
	newMAC := func() uint8 {
		hf, size := hashFor(c.MACAlgo)
		if hf == nil {
			return spec.StatusNotSupp
		}
		if c.HashLen == 0 || int(c.HashLen) > size {
			return spec.StatusBadMsg
		}
		if len(c.AuthKey) == 0 {
			return spec.StatusKeyRejected
		}
		s.mac = hmac.New(hf, keep(s, c.AuthKey))
		s.hashLen = int(c.HashLen)
		return spec.StatusOK
	}
	switch c.Opcode {
	case spec.OpCipherCreateSession:
		if c.CipherAlgo != spec.CipherAESCBC {
			return 0, spec.StatusNotSupp
		}
		if c.Dir != spec.DirEncrypt && c.Dir != spec.DirDecrypt {
			return 0, spec.StatusBadMsg
		}
		b, err := aes.NewCipher(keep(s, c.CipherKey))
		if err != nil {
			return 0, spec.StatusKeyRejected
		}
		s.block, s.dir, s.kind = b, c.Dir, kindCipher
		if c.SymOp == spec.SymOpChaining {
			if c.ChainOrder != spec.ChainCipherThenHash && c.ChainOrder != spec.ChainHashThenCipher {
				return 0, spec.StatusBadMsg
			}
			if st := newMAC(); st != spec.StatusOK {
				return 0, st
			}
			s.kind, s.order = kindChain, c.ChainOrder
		}
	case spec.OpMACCreateSession:
		if st := newMAC(); st != spec.StatusOK {
			return 0, st
		}
		s.kind = kindMAC
	case spec.OpAEADCreateSession:
		if c.TagLen != 16 {
			return 0, spec.StatusNotSupp
		}
		switch c.AEADAlgo {
		case spec.AEADGCM:
			b, err := aes.NewCipher(keep(s, c.AEADKey))
			if err != nil {
				return 0, spec.StatusKeyRejected
			}
			s.aead, _ = cipher.NewGCM(b)
		case spec.AEADChaCha20Poly1305:
			a, err := chacha20poly1305.New(keep(s, c.AEADKey))
			if err != nil {
				return 0, spec.StatusKeyRejected
			}
			s.aead = a
		default:
			return 0, spec.StatusNotSupp
		}
		s.kind, s.dir = kindAEAD, c.Dir
	default:
		return 0, spec.StatusNotSupp
	}
	d.smu.Lock()
	defer d.smu.Unlock()
	if len(d.sessions) >= d.maxSess {
		s.zero()
		return 0, spec.StatusNoSpc
	}
	id := d.nextID
	d.nextID++
	d.sessions[id] = s
	return id, spec.StatusOK
}

func (s *session) zero() {
	for _, k := range s.keys {
		clear(k)
	}
	s.keys = nil
}

func (d *dev) destroy(id uint64) uint8 {
	d.smu.Lock()
	s, ok := d.sessions[id]
	delete(d.sessions, id)
	d.smu.Unlock()
	if !ok {
		return spec.StatusInvSess
	}
	s.mu.Lock()
	s.zero()
	s.mu.Unlock()
	return spec.StatusOK
}

// data handles one data request; it returns the bytes written before the
// status byte and the status.
func (d *dev) data(out, in []byte) (int, uint8) {
	var o spec.OpReq
	if spec.DecodeOp(out, &o) != nil {
		return 0, spec.StatusBadMsg
	}
	if d.fault.Load() == spec.FaultFail {
		return 0, spec.StatusErr
	}
	d.smu.RLock()
	s := d.sessions[o.SessionID]
	d.smu.RUnlock()
	if s == nil {
		return 0, spec.StatusInvSess
	}
	rest := out[spec.OpReqLen:]
	take := func(n uint32) []byte {
		if uint64(n) > uint64(len(rest)) {
			return nil
		}
		b := rest[:n:n]
		rest = rest[n:]
		return b
	}
	iv := take(o.IVLen)
	aad := take(o.AADLen)
	src := take(o.SrcLen)
	if iv == nil || aad == nil || src == nil || uint64(o.DstLen)+uint64(o.HashLen)+1 > uint64(len(in)) {
		return 0, spec.StatusBadMsg
	}
	dst := in[:o.DstLen]
	res := in[o.DstLen : o.DstLen+o.HashLen]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		return 0, spec.StatusInvSess // destroyed meanwhile
	}
	switch s.kind {
	case kindCipher, kindChain:
		want := uint32(spec.OpCipherEncrypt)
		if s.dir == spec.DirDecrypt {
			want = spec.OpCipherDecrypt
		}
		if o.Opcode != want || len(iv) != aes.BlockSize || o.DstLen != o.SrcLen ||
			o.CipherLen%aes.BlockSize != 0 || uint64(o.CipherOff)+uint64(o.CipherLen) > uint64(len(src)) {
			return 0, spec.StatusBadMsg
		}
		if s.kind == kindChain && (o.HashLen != uint32(s.hashLen)) {
			return 0, spec.StatusBadMsg
		}
		if s.kind == kindCipher && o.HashLen != 0 {
			return 0, spec.StatusBadMsg
		}
		if s.kind == kindChain && s.order == spec.ChainHashThenCipher {
			s.mac.Reset()
			s.mac.Write(src)
			copy(res, s.mac.Sum(nil))
		}
		copy(dst, src)
		seg := dst[o.CipherOff : o.CipherOff+o.CipherLen]
		if s.dir == spec.DirEncrypt {
			cipher.NewCBCEncrypter(s.block, iv).CryptBlocks(seg, seg)
		} else {
			cipher.NewCBCDecrypter(s.block, iv).CryptBlocks(seg, seg)
		}
		if s.kind == kindChain && s.order == spec.ChainCipherThenHash {
			s.mac.Reset()
			s.mac.Write(dst)
			copy(res, s.mac.Sum(nil))
		}
		return int(o.DstLen + o.HashLen), spec.StatusOK
	case kindMAC:
		if o.Opcode != spec.OpMAC || o.DstLen != 0 || o.HashLen != uint32(s.hashLen) {
			return 0, spec.StatusBadMsg
		}
		s.mac.Reset()
		s.mac.Write(src)
		copy(res, s.mac.Sum(nil))
		return int(o.HashLen), spec.StatusOK
	case kindAEAD:
		if len(iv) != s.aead.NonceSize() || o.HashLen != 16 {
			return 0, spec.StatusBadMsg
		}
		if s.dir == spec.DirEncrypt {
			if o.Opcode != spec.OpAEADEncrypt || o.DstLen != o.SrcLen {
				return 0, spec.StatusBadMsg
			}
			sealed := s.aead.Seal(dst[:0], iv, src, aad)
			copy(res, sealed[len(src):])
			return int(o.DstLen + o.HashLen), spec.StatusOK
		}
		tag := take(16)
		if o.Opcode != spec.OpAEADDecrypt || tag == nil || o.DstLen != o.SrcLen {
			return 0, spec.StatusBadMsg
		}
		ct := make([]byte, 0, len(src)+16)
		ct = append(append(ct, src...), tag...)
		if _, err := s.aead.Open(dst[:0], iv, ct, aad); err != nil {
			clear(dst)
			return 0, spec.StatusBadMsg
		}
		return int(o.DstLen), spec.StatusOK
	}
	return 0, spec.StatusNotSupp
}
