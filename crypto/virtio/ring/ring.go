// Package ring implements the virtio split virtqueue layout (virtio 1.2,
// section 2.7) over a byte slice, typically a shared-memory mapping seen by
// a driver and a device in different processes.
//
// A queue of size N (a power of two, at most 32768) has three parts:
//
//	descriptor table  16*N bytes, 16-aligned: {le64 addr, le32 len, le16 flags, le16 next}
//	available ring    6+2*N bytes, 2-aligned: {le16 flags, le16 idx, le16 ring[N], le16 used_event}
//	used ring         6+8*N bytes, 4-aligned: {le16 flags, le16 idx, {le32 id, le32 len} ring[N], le16 avail_event}
//
// Indices (avail idx, used idx) are free-running 16-bit counters; slot
// positions are idx mod N. The driver owns the descriptor table, the
// available ring and used_event; the device owns the used ring and
// avail_event. Event suppression uses VIRTQ_AVAIL_F_NO_INTERRUPT and
// VIRTQ_USED_F_NO_NOTIFY, or, with VIRTIO_F_EVENT_IDX, used_event and
// avail_event with NeedEvent.
//
// The 16-bit fields that the other side reads concurrently (flags, idx,
// the event indices) are accessed with 32-bit atomic operations on the
// aligned word that contains them: this layout places each in a word
// whose other half is written only by the same side (flags+idx) or is
// padding (the event indices, for which Layout reserves the padding). The
// ring entries and descriptors are plain memory, published by the atomic
// index store and read after the atomic index load.
//
// Queue methods do no locking: each side serialises its own writers.
package ring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Descriptor flags.
const (
	DescFNext     = 1 // VIRTQ_DESC_F_NEXT: the chain continues at Next
	DescFWrite    = 2 // VIRTQ_DESC_F_WRITE: device-writable buffer
	DescFIndirect = 4 // VIRTQ_DESC_F_INDIRECT (not used here)
)

// Ring flags.
const (
	AvailFNoInterrupt = 1 // VIRTQ_AVAIL_F_NO_INTERRUPT: driver asks for no interrupts
	UsedFNoNotify     = 1 // VIRTQ_USED_F_NO_NOTIFY: device asks for no kicks
)

// MaxSize is the largest queue size.
const MaxSize = 32768

// Layout locates one queue's parts as byte offsets in the shared region.
type Layout struct {
	Size  uint16
	Desc  int
	Avail int
	Used  int
	// End is the first byte after the queue (8-aligned).
	End int
}

func align(x, a int) int { return (x + a - 1) &^ (a - 1) }

// LayoutAt lays out a queue of the given size starting at base (rounded up
// to 16). Size must be a power of two between 2 and MaxSize.
func LayoutAt(base int, size uint16) (Layout, error) {
	if size < 2 || size&(size-1) != 0 || int(size) > MaxSize {
		return Layout{}, fmt.Errorf("ring: queue size %d is not a power of two in [2, %d]", size, MaxSize)
	}
	n := int(size)
	l := Layout{Size: size}
	l.Desc = align(base, 16)
	l.Avail = l.Desc + 16*n
	// 4-aligned used ring; the avail ring's 6+2N bytes end 2 bytes short of
	// a word, which holds used_event's padding half.
	l.Used = align(l.Avail+6+2*n, 4)
	if l.Used < l.Avail+8+2*n {
		l.Used = align(l.Avail+8+2*n, 4)
	}
	l.End = align(l.Used+8+8*n, 8) // 2 spare bytes after avail_event
	return l, nil
}

// Queue accesses one virtqueue in mem.
type Queue struct {
	mem  []byte
	l    Layout
	mask uint16
}

// New returns the queue at l in mem. mem must stay mapped while the Queue
// is used and be at least 4-aligned (mmap memory is page aligned).
func New(mem []byte, l Layout) (*Queue, error) {
	if l.End > len(mem) || l.Size == 0 {
		return nil, fmt.Errorf("ring: layout ends at %d beyond the %d-byte region", l.End, len(mem))
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 != 0 {
		return nil, fmt.Errorf("ring: region is not 8-aligned")
	}
	return &Queue{mem: mem, l: l, mask: l.Size - 1}, nil
}

// Size returns the number of descriptors.
func (q *Queue) Size() uint16 { return q.l.Size }

// Layout returns the queue's layout.
func (q *Queue) Layout() Layout { return q.l }

func (q *Queue) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&q.mem[off])) }

// load16/store16 access the low (off%4==0) or high (off%4==2) half of the
// word at off&^3. store16 keeps the other half with a CAS loop.
func (q *Queue) load16(off int) uint16 {
	w := atomic.LoadUint32(q.word(off &^ 3))
	if off&3 == 2 {
		return uint16(w >> 16)
	}
	return uint16(w)
}

func (q *Queue) store16(off int, v uint16) {
	p := q.word(off &^ 3)
	for {
		old := atomic.LoadUint32(p)
		var nw uint32
		if off&3 == 2 {
			nw = old&0xffff | uint32(v)<<16
		} else {
			nw = old&0xffff0000 | uint32(v)
		}
		if atomic.CompareAndSwapUint32(p, old, nw) {
			return
		}
	}
}

// Desc is one descriptor.
type Desc struct {
	Addr  uint64
	Len   uint32
	Flags uint16
	Next  uint16
}

// SetDesc writes descriptor i (driver).
func (q *Queue) SetDesc(i uint16, d Desc) {
	b := q.mem[q.l.Desc+16*int(i&q.mask):]
	binary.LittleEndian.PutUint64(b[0:], d.Addr)
	binary.LittleEndian.PutUint32(b[8:], d.Len)
	binary.LittleEndian.PutUint16(b[12:], d.Flags)
	binary.LittleEndian.PutUint16(b[14:], d.Next)
}

// Desc reads descriptor i (device). i is reduced mod Size, so a hostile
// index cannot reach outside the table.
func (q *Queue) Desc(i uint16) Desc {
	b := q.mem[q.l.Desc+16*int(i&q.mask):]
	return Desc{
		Addr:  binary.LittleEndian.Uint64(b[0:]),
		Len:   binary.LittleEndian.Uint32(b[8:]),
		Flags: binary.LittleEndian.Uint16(b[12:]),
		Next:  binary.LittleEndian.Uint16(b[14:]),
	}
}

// AvailFlags reads the available ring's flags.
func (q *Queue) AvailFlags() uint16 { return q.load16(q.l.Avail) }

// SetAvailFlags writes the available ring's flags (driver).
func (q *Queue) SetAvailFlags(f uint16) { q.store16(q.l.Avail, f) }

// AvailIdx reads the available index with acquire semantics.
func (q *Queue) AvailIdx() uint16 { return q.load16(q.l.Avail + 2) }

// PublishAvail stores the available index with release semantics
// (driver): entries written with SetAvail before it become visible.
func (q *Queue) PublishAvail(idx uint16) { q.store16(q.l.Avail+2, idx) }

// SetAvail writes the head descriptor index at ring position pos (driver).
func (q *Queue) SetAvail(pos, head uint16) {
	binary.LittleEndian.PutUint16(q.mem[q.l.Avail+4+2*int(pos&q.mask):], head)
}

// Avail reads the head at ring position pos (device).
func (q *Queue) Avail(pos uint16) uint16 {
	return binary.LittleEndian.Uint16(q.mem[q.l.Avail+4+2*int(pos&q.mask):])
}

// UsedEvent reads used_event (event-idx suppression, written by the driver).
func (q *Queue) UsedEvent() uint16 { return q.load16(q.l.Avail + 4 + 2*int(q.l.Size)) }

// SetUsedEvent writes used_event (driver).
func (q *Queue) SetUsedEvent(v uint16) { q.store16(q.l.Avail+4+2*int(q.l.Size), v) }

// UsedFlags reads the used ring's flags.
func (q *Queue) UsedFlags() uint16 { return q.load16(q.l.Used) }

// SetUsedFlags writes the used ring's flags (device).
func (q *Queue) SetUsedFlags(f uint16) { q.store16(q.l.Used, f) }

// UsedIdx reads the used index with acquire semantics.
func (q *Queue) UsedIdx() uint16 { return q.load16(q.l.Used + 2) }

// PublishUsed stores the used index with release semantics (device).
func (q *Queue) PublishUsed(idx uint16) { q.store16(q.l.Used+2, idx) }

// SetUsed writes the used element at ring position pos (device).
func (q *Queue) SetUsed(pos uint16, id, length uint32) {
	b := q.mem[q.l.Used+4+8*int(pos&q.mask):]
	binary.LittleEndian.PutUint32(b[0:], id)
	binary.LittleEndian.PutUint32(b[4:], length)
}

// Used reads the used element at ring position pos (driver).
func (q *Queue) Used(pos uint16) (id, length uint32) {
	b := q.mem[q.l.Used+4+8*int(pos&q.mask):]
	return binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:])
}

// AvailEvent reads avail_event (written by the device).
func (q *Queue) AvailEvent() uint16 { return q.load16(q.l.Used + 4 + 8*int(q.l.Size)) }

// SetAvailEvent writes avail_event (device).
func (q *Queue) SetAvailEvent(v uint16) { q.store16(q.l.Used+4+8*int(q.l.Size), v) }

// NeedEvent is vring_need_event: with event indices, a side that moved its
// index from old to newIdx must notify the other side iff the other side's
// event index lies in [old, newIdx). Arithmetic is modulo 2^16.
func NeedEvent(event, newIdx, old uint16) bool {
	return newIdx-event-1 < newIdx-old
}
