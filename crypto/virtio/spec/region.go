package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/keelinit/keel/crypto/virtio/ring"
)

// Config sizes the device: its queues and the shared region. The driver
// chooses it and sends it to the device in the setup message.
type Config struct {
	// DataQueues is the number of data virtqueues (1..16).
	DataQueues int
	// QueueSize is the descriptor count of each data queue (a power of
	// two); each request uses two descriptors, so QueueSize/2 requests
	// can be in flight per queue.
	QueueSize uint16
	// CtrlQueueSize is the descriptor count of the control queue.
	CtrlQueueSize uint16
	// MaxData is the largest request payload.
	MaxData int
	// MaxSessions bounds the device's session table (beyond it
	// CREATE_SESSION answers NOSPC); 0 means 65536.
	MaxSessions int
}

// Limits of a data request beyond its payload (a slot reserves room for
// them).
const (
	MaxAAD     = 64 // additional authenticated data
	MaxTrailer = 16 // ESP authentication trailer (ESN high bits)
	maxIV      = 16
	maxHash    = 64
	ctrlSlot   = 512
)

// QueueRegion locates one queue and its request slots in the region.
type QueueRegion struct {
	Ring ring.Layout
	// Slot i occupies [SlotBase+i*SlotSize, +SlotSize): the device-readable
	// half first (descriptor 2i), then the device-writable half at
	// SlotSize/2 (descriptor 2i+1).
	SlotBase int
	SlotSize int
	Slots    int
}

// Slot returns the offset of slot i.
func (q QueueRegion) Slot(i int) int { return q.SlotBase + i*q.SlotSize }

// Region is the layout of the shared memory: queues 0..DataQueues-1 are
// data queues, the last one is the control queue (as in the spec).
type Region struct {
	Cfg    Config
	Queues []QueueRegion
	Size   int
}

// MaxRegionSize caps the shared region: Layout refuses a Config whose
// region would be larger, with an error wrapping ErrRegionTooLarge. The
// device maps the whole region, so the cap bounds what a setup message can
// make it map (the unchecked limits alone allow 16 queues of 16384 slots
// of 2 MiB, about 512 GiB).
//
// Derivation: the largest configuration Keel's data path can use has 16
// data queues (the maximum), 256 requests in flight per queue (QueueSize
// 512, twice the default) and 64 KiB payloads (MaxData 65536: an IP
// datagram is at most 65535 bytes), plus a control queue of 32768
// descriptors (the ring maximum); that region is 523 MiB (514 MiB of data
// slots, 16*256 of 2*65792 bytes; 8 MiB of control slots, 16384 of 512
// bytes; and the rings). The cap is the next power of two, 1 GiB, which
// also admits e.g. 16 queues of 2048 descriptors at the default 16 KiB
// MaxData (521 MiB). The defaults need 8.2 MiB.
const MaxRegionSize = 1 << 30

// ErrRegionTooLarge is wrapped by Layout's error for a Config whose
// region exceeds MaxRegionSize.
var ErrRegionTooLarge = errors.New("virtio-crypto: shared region too large")

// dataSlotSize is the size of one data slot (both halves) for maxData.
func dataSlotSize(maxData int) int {
	half := (OpReqLen + maxIV + MaxAAD + maxIV + maxData + MaxTrailer + maxHash + 63) &^ 63
	return 2 * half
}

// Layout computes the region for c. It fails for out-of-range values and,
// with an error wrapping ErrRegionTooLarge, for a region larger than
// MaxRegionSize. In a region it returns, the queues are laid out in order
// without overlapping (each queue's slots follow its ring), every part
// ends within Size, and Size is a multiple of 4096 at most MaxRegionSize.
// MaxSessions is not checked. Layout is a pure function of c.
func (c Config) Layout() (Region, error) {
	if c.DataQueues < 1 || c.DataQueues > 16 {
		return Region{}, fmt.Errorf("virtio-crypto: config: %d data queues, want 1..16", c.DataQueues)
	}
	if c.MaxData < 64 || c.MaxData > 1<<20 {
		return Region{}, fmt.Errorf("virtio-crypto: config: max data %d, want 64..1048576", c.MaxData)
	}
	// The slots alone must fit under the cap; checking them first, in
	// 64-bit arithmetic, keeps the offsets below from overflowing an int
	// on 32-bit platforms.
	dataSlot := dataSlotSize(c.MaxData)
	slotBytes := uint64(c.DataQueues)*uint64(c.QueueSize/2)*uint64(dataSlot) + uint64(c.CtrlQueueSize/2)*ctrlSlot
	if slotBytes > MaxRegionSize {
		return Region{}, c.tooLarge(slotBytes)
	}
	r := Region{Cfg: c}
	off := 0
	add := func(name string, size uint16, slotSize int) error {
		l, err := ring.LayoutAt(off, size)
		if err != nil {
			return fmt.Errorf("virtio-crypto: config: %s: %w", name, err)
		}
		q := QueueRegion{Ring: l, SlotBase: (l.End + 63) &^ 63, SlotSize: slotSize, Slots: int(size) / 2}
		r.Queues = append(r.Queues, q)
		off = q.SlotBase + q.Slots*q.SlotSize
		return nil
	}
	for range c.DataQueues {
		if err := add("data queue", c.QueueSize, dataSlot); err != nil {
			return Region{}, err
		}
	}
	if err := add("control queue", c.CtrlQueueSize, ctrlSlot); err != nil {
		return Region{}, err
	}
	r.Size = (off + 4095) &^ 4095
	if r.Size > MaxRegionSize {
		return Region{}, c.tooLarge(uint64(r.Size))
	}
	return r, nil
}

// tooLarge is Layout's error for a region of (at least) size bytes.
func (c Config) tooLarge(size uint64) error {
	return fmt.Errorf("virtio-crypto: config: %d data queues of %d descriptors, %d control descriptors and max data %d need a region of at least %d bytes, above the %d-byte cap: %w",
		c.DataQueues, c.QueueSize, c.CtrlQueueSize, c.MaxData, size, MaxRegionSize, ErrRegionTooLarge)
}

// CtrlSlotSize is the size of a control slot (both halves).
const CtrlSlotSize = ctrlSlot

// Setup-protocol message types on the unix socket (SOCK_SEQPACKET). The
// setup message carries, with SCM_RIGHTS, the memfd of the region and a
// kick and a call eventfd per queue, in queue order: memfd, kick0, call0,
// kick1, call1, ... (vhost-user's SET_MEM_TABLE, SET_VRING_KICK and
// SET_VRING_CALL rolled into one).
const (
	MsgSetup      = 1 // driver -> device: Config; fds
	MsgReady      = 2 // device -> driver
	MsgFault      = 3 // driver -> device: u32 Fault
	MsgStats      = 4 // driver -> device
	MsgStatsReply = 5 // device -> driver: Stats
)

// Fault modes a driver can set on the device (tests and benchmarks).
const (
	FaultNone  = 0 // normal operation
	FaultFail  = 1 // complete every data request with VIRTIO_CRYPTO_ERR
	FaultStall = 2 // stop consuming the queues (kicks are ignored)
	FaultExit  = 3 // exit at once, as a crashed device
)

// Stats are the device process's counters.
type Stats struct {
	UserNs, SysNs uint64 // getrusage(RUSAGE_SELF) of the device process
	Requests      uint64 // data requests processed
	CtrlRequests  uint64 // control requests processed
	Kicks         uint64 // kick eventfd wake-ups
	Interrupts    uint64 // call eventfd signals sent
}

// Magic starts a setup message.
const Magic = 0x6b76696f // "kvio"

// EncodeSetup encodes a setup message.
func EncodeSetup(c Config) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint32(b[0:], MsgSetup)
	binary.LittleEndian.PutUint32(b[4:], Magic)
	binary.LittleEndian.PutUint32(b[8:], uint32(c.DataQueues))
	binary.LittleEndian.PutUint16(b[12:], c.QueueSize)
	binary.LittleEndian.PutUint16(b[14:], c.CtrlQueueSize)
	binary.LittleEndian.PutUint32(b[16:], uint32(c.MaxData))
	binary.LittleEndian.PutUint32(b[20:], uint32(c.MaxSessions))
	return b
}

// DecodeSetup decodes and validates a setup message as written by
// EncodeSetup (bytes after the 24th are ignored). The message comes from
// another process and is untrusted: DecodeSetup fails, naming the field,
// for a short message, a wrong type or magic, a MaxSessions above
// math.MaxInt32, or a Config that Layout refuses (out-of-range values or a
// region above MaxRegionSize). A Config it returns has a valid Layout.
func DecodeSetup(b []byte) (Config, error) {
	switch {
	case len(b) < 24:
		return Config{}, fmt.Errorf("virtio-crypto: bad setup message: %d bytes, want 24", len(b))
	case binary.LittleEndian.Uint32(b[0:]) != MsgSetup:
		return Config{}, fmt.Errorf("virtio-crypto: bad setup message: type %d, want %d", binary.LittleEndian.Uint32(b[0:]), MsgSetup)
	case binary.LittleEndian.Uint32(b[4:]) != Magic:
		return Config{}, fmt.Errorf("virtio-crypto: bad setup message: magic %#x, want %#x", binary.LittleEndian.Uint32(b[4:]), Magic)
	}
	// Values that do not fit an int on a 32-bit platform are out of range
	// anyway: clamp them to -1 so that Layout (or the check below) refuses
	// them instead of seeing a wrapped value.
	field := func(off int) int {
		v := binary.LittleEndian.Uint32(b[off:])
		if v > math.MaxInt32 {
			return -1
		}
		return int(v)
	}
	c := Config{
		DataQueues:    field(8),
		QueueSize:     binary.LittleEndian.Uint16(b[12:]),
		CtrlQueueSize: binary.LittleEndian.Uint16(b[14:]),
		MaxData:       field(16),
		MaxSessions:   field(20),
	}
	if c.MaxSessions < 0 {
		return Config{}, fmt.Errorf("virtio-crypto: bad setup message: max sessions %d, want 0..%d", binary.LittleEndian.Uint32(b[20:]), math.MaxInt32)
	}
	if _, err := c.Layout(); err != nil {
		return Config{}, fmt.Errorf("virtio-crypto: bad setup message: %w", err)
	}
	return c, nil
}

// EncodeStats encodes a stats reply.
func EncodeStats(s Stats) []byte {
	b := make([]byte, 48)
	binary.LittleEndian.PutUint32(b[0:], MsgStatsReply)
	for i, v := range []uint64{s.UserNs, s.SysNs, s.Requests, s.CtrlRequests, s.Kicks} {
		binary.LittleEndian.PutUint64(b[8+8*i:], v)
	}
	return append(b, binary.LittleEndian.AppendUint64(nil, s.Interrupts)...)
}

// DecodeStats decodes a stats reply.
func DecodeStats(b []byte) (Stats, error) {
	if len(b) < 56 || binary.LittleEndian.Uint32(b) != MsgStatsReply {
		return Stats{}, fmt.Errorf("virtio-crypto: bad stats message (%d bytes)", len(b))
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8+8*i:]) }
	return Stats{UserNs: u(0), SysNs: u(1), Requests: u(2), CtrlRequests: u(3), Kicks: u(4), Interrupts: u(5)}, nil
}

// EncodeMsg encodes a message made of a type and one u32 argument.
func EncodeMsg(typ, arg uint32) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b[0:], typ)
	binary.LittleEndian.PutUint32(b[4:], arg)
	return b
}

// MsgType returns a message's type (0 if too short).
func MsgType(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// MsgArg returns a message's u32 argument (0 if absent).
func MsgArg(b []byte) uint32 {
	if len(b) < 8 {
		return 0
	}
	return binary.LittleEndian.Uint32(b[4:])
}

// errEOF is returned by Recv when the peer closed the socket.
var errEOF = fmt.Errorf("virtio-crypto: peer closed the socket: %w", io.EOF)
