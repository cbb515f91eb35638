package spec

import (
	"encoding/binary"
	"fmt"
	"io"

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

// Layout computes the region for c. It fails for out-of-range values.
func (c Config) Layout() (Region, error) {
	if c.DataQueues < 1 || c.DataQueues > 16 {
		return Region{}, fmt.Errorf("virtio-crypto: config: %d data queues, want 1..16", c.DataQueues)
	}
	if c.MaxData < 64 || c.MaxData > 1<<20 {
		return Region{}, fmt.Errorf("virtio-crypto: config: max data %d, want 64..1048576", c.MaxData)
	}
	r := Region{Cfg: c}
	off := 0
	add := func(size uint16, slotSize int) error {
		l, err := ring.LayoutAt(off, size)
		if err != nil {
			return fmt.Errorf("virtio-crypto: config: %w", err)
		}
		q := QueueRegion{Ring: l, SlotBase: (l.End + 63) &^ 63, SlotSize: slotSize, Slots: int(size) / 2}
		r.Queues = append(r.Queues, q)
		off = q.SlotBase + q.Slots*q.SlotSize
		return nil
	}
	half := (OpReqLen + maxIV + MaxAAD + maxIV + c.MaxData + MaxTrailer + maxHash + 63) &^ 63
	for range c.DataQueues {
		if err := add(c.QueueSize, 2*half); err != nil {
			return Region{}, err
		}
	}
	if err := add(c.CtrlQueueSize, ctrlSlot); err != nil {
		return Region{}, err
	}
	r.Size = (off + 4095) &^ 4095
	return r, nil
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

// DecodeSetup decodes a setup message.
func DecodeSetup(b []byte) (Config, error) {
	if len(b) < 24 || binary.LittleEndian.Uint32(b[0:]) != MsgSetup || binary.LittleEndian.Uint32(b[4:]) != Magic {
		return Config{}, fmt.Errorf("virtio-crypto: bad setup message (%d bytes)", len(b))
	}
	return Config{
		DataQueues:    int(binary.LittleEndian.Uint32(b[8:])),
		QueueSize:     binary.LittleEndian.Uint16(b[12:]),
		CtrlQueueSize: binary.LittleEndian.Uint16(b[14:]),
		MaxData:       int(binary.LittleEndian.Uint32(b[16:])),
		MaxSessions:   int(binary.LittleEndian.Uint32(b[20:])),
	}, nil
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
