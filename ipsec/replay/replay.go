// Package replay implements the ESP anti-replay window of RFC 4303 section
// 3.4.3 with the ring bitmap of RFC 6479 (no bit shifting) and the
// extended sequence number (ESN) inference of RFC 4303 appendix A2.
//
// The window follows RFC 4303 semantics: with window size W and highest
// authenticated sequence number T, the sequence numbers T-W+1 .. T are
// inside the window and each may be accepted once; anything older is
// rejected, anything newer advances the window. Sequence number 0 is never
// valid (RFC 4303 section 2.2).
//
// The intended use is check-before-authentication, update-after-ICV:
// Check is cheap and does not modify the window; Update records a sequence
// number whose ICV verified and reports whether it was still fresh (it may
// have been accepted concurrently in between). A Window is not safe for
// concurrent use; callers serialise Check and Update with their own lock.
package replay

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxSize is the largest supported window in packets.
const MaxSize = 4096

// DefaultSize is the window used when the configuration asks for replay
// protection without giving a size (RFC 4303 recommends 64).
const DefaultSize = 64

const blockBits = 64

// ErrSize reports an unsupported window size.
var ErrSize = errors.New("replay: window size out of range")

// Window is an RFC 6479 ring-bitmap anti-replay window.
//
// The zero Window is not usable; create one with New.
type Window struct {
	size   uint64   // W in packets; 0 means no replay check (ESN still inferred)
	max    uint64   // highest acceptable sequence number
	esn    bool     // extended sequence numbers
	top    uint64   // T: highest authenticated sequence number, 0 = none yet
	blocks []uint64 // ring of N blocks; (N-1)*64 >= size
	mask   uint64   // N-1 (N is a power of two)
}

// New returns a window of size packets (0 disables the replay check, which
// still tracks the highest sequence number for ESN inference). esn selects
// 64-bit extended sequence numbers; otherwise sequence numbers are 32-bit.
func New(size int, esn bool) (*Window, error) {
	if size < 0 || size > MaxSize {
		return nil, fmt.Errorf("%w: %d packets (0..%d)", ErrSize, size, MaxSize)
	}
	// N blocks, a power of two with one redundant block (RFC 6479 section 2).
	n := 1
	for (n-1)*blockBits < size {
		n <<= 1
	}
	if n < 2 {
		n = 2
	}
	w := &Window{size: uint64(size), esn: esn, blocks: make([]uint64, n), mask: uint64(n - 1)}
	w.max = 1<<32 - 1
	if esn {
		w.max = ^uint64(0)
	}
	return w, nil
}

// SetMax lowers the highest sequence number the window accepts (for
// example an SA's hard packet limit). Values above the sequence space are
// ignored.
func (w *Window) SetMax(m uint64) {
	if m < w.max {
		w.max = m
	}
}

// Size returns the window size in packets (0: replay check disabled).
func (w *Window) Size() int { return int(w.size) }

// ESN reports whether the window infers extended sequence numbers.
func (w *Window) ESN() bool { return w.esn }

// Top returns the highest authenticated sequence number seen (0: none).
func (w *Window) Top() uint64 { return w.top }

// Infer returns the full sequence number for the low 32 bits seen on the
// wire. Without ESN it is seql itself. With ESN it applies RFC 4303
// appendix A2.2 using the window size (at least 1; with the replay check
// disabled, a window of DefaultSize is used for the inference only).
func (w *Window) Infer(seql uint32) uint64 {
	if !w.esn {
		return uint64(seql)
	}
	win := w.size
	if win == 0 {
		win = DefaultSize
	}
	return InferESN(w.top, seql, win)
}

// InferESN is RFC 4303 appendix A2.2: given the highest authenticated
// 64-bit sequence number top, the received low 32 bits seql and the window
// size win, it returns the inferred 64-bit sequence number.
func InferESN(top uint64, seql uint32, win uint64) uint64 {
	tl := uint32(top)
	th := uint32(top >> 32)
	bl := tl - uint32(win) + 1 // mod 2^32
	var sh uint32
	if uint64(tl) >= win-1 {
		// Case A: the window lies within one sequence number subspace.
		if seql >= bl {
			sh = th
		} else {
			sh = th + 1
		}
	} else {
		// Case B: the window spans two subspaces.
		if seql >= bl {
			sh = th - 1
		} else {
			sh = th
		}
	}
	if sh == ^uint32(0) && th == 0 {
		// Th - 1 underflow at the very start of the SA: the packet
		// belongs to the first subspace.
		sh = 0
	}
	return uint64(sh)<<32 | uint64(seql)
}

// Check reports whether seq may be accepted: it is not 0, not above the
// limit, not older than the window and not already marked. It does not
// modify the window.
func (w *Window) Check(seq uint64) bool {
	if seq == 0 || seq > w.max {
		return false
	}
	if seq > w.top || w.size == 0 {
		return true
	}
	if w.top-seq >= w.size {
		return false
	}
	blk := (seq / blockBits) & w.mask
	return w.blocks[blk]&(1<<(seq%blockBits)) == 0
}

// Advance is Update's in-order case, small enough to inline: when seq is
// above the highest sequence number seen and in its 64-packet block (63
// of 64 packets of a flow that arrives in order), it records seq as
// Update would and reports true. Otherwise it changes nothing and
// reports false, and the caller calls Update. (With a size-0 window the
// bit it sets is never read.)
func (w *Window) Advance(seq uint64) bool {
	if seq > w.top && seq <= w.max && seq^w.top < blockBits {
		w.top = seq
		w.blocks[(seq/blockBits)&w.mask] |= 1 << (seq % blockBits)
		return true
	}
	return false
}

// Update marks seq as received after its ICV verified, advancing the
// window when seq is new. It reports false, changing nothing, when Check
// would now reject seq (a duplicate accepted in between, or the window
// moved past it).
func (w *Window) Update(seq uint64) bool {
	if !w.Check(seq) {
		return false
	}
	if w.size == 0 {
		if seq > w.top {
			w.top = seq
		}
		return true
	}
	idx := seq / blockBits
	if seq > w.top {
		cur := w.top / blockBits
		diff := idx - cur
		if n := uint64(len(w.blocks)); diff > n {
			diff = n
		}
		// Zero only the blocks being skipped into (RFC 6479: no shifting).
		for i := uint64(1); i <= diff; i++ {
			w.blocks[(cur+i)&w.mask] = 0
		}
		w.top = seq
	}
	w.blocks[idx&w.mask] |= 1 << (seq % blockBits)
	return true
}

// Reset forgets every sequence number seen.
func (w *Window) Reset() {
	clear(w.blocks)
	w.top = 0
}

// Received returns how many sequence numbers inside the current window
// are marked (for status output).
func (w *Window) Received() int {
	n := 0
	for _, b := range w.blocks {
		n += bits.OnesCount64(b)
	}
	return n
}
