package ipsec

import (
	"net/netip"
	"sync"

	"github.com/keelinit/keel/crypto"
)

// Buffer geometry. Headroom holds the largest outer header Keel prepends
// (IPv6 40 + UDP 8 + ESP 8 + IV 16 = 72, rounded up); tailroom holds the
// largest ESP trailer (15 bytes of CBC padding, pad length, next header and
// a 32-byte ICV = 49, rounded up).
const (
	Headroom = 128
	Tailroom = 64
	// DefaultMTU is the data capacity of buffers from NewPool(0).
	DefaultMTU = 2048
)

// Frame says what a Packet's data starts with on input to Inbound.
type Frame uint8

// Frames.
const (
	// FrameIP: an IP packet (IPv4 or IPv6 header first), as read from a
	// raw socket with the header, from a TUN device, or from a capture.
	FrameIP Frame = iota
	// FrameUDP: the payload of a UDP datagram received on a NAT-T socket
	// (RFC 3948): ESP, a non-ESP marker followed by IKE, or a NAT
	// keepalive. Packet.Src and Packet.Dst carry the outer addresses.
	FrameUDP
	// FrameESP: a bare ESP packet (SPI first), as read from a raw
	// IPPROTO_ESP socket without the IP header. Packet.Src and Packet.Dst
	// carry the outer addresses.
	FrameESP
)

// Verdict is what the caller does with a Packet after Outbound or Inbound.
type Verdict uint8

// Verdicts. The zero value is VerdictDrop.
const (
	// VerdictDrop: discard the packet; Packet.Drop says why.
	VerdictDrop Verdict = iota
	// VerdictForward: send the packet on. After Outbound, Data is the
	// outer IP packet (ESP inside); after Inbound, Data is the
	// decapsulated IP packet.
	VerdictForward
	// VerdictBypass: a "none" policy matched outbound (or, inbound, the
	// packet was not IPsec at all and a "none" policy allows it); Data is
	// unchanged.
	VerdictBypass
	// VerdictLocal: inbound on a NAT-T socket, the datagram carried the
	// non-ESP marker (IKE); Data is the IKE message without the marker.
	VerdictLocal
)

// String returns "drop", "forward", "bypass" or "local".
func (v Verdict) String() string {
	switch v {
	case VerdictDrop:
		return "drop"
	case VerdictForward:
		return "forward"
	case VerdictBypass:
		return "bypass"
	case VerdictLocal:
		return "local"
	}
	return "verdict(?)"
}

// Packet is one pooled packet buffer with headroom and tailroom, plus the
// metadata the engine reads and writes.
//
// Ownership: a Packet belongs to whoever got it from Pool.Get until it is
// handed back with Put; during Outbound or Inbound it belongs to the
// engine. A Packet must not be used by two goroutines at once.
type Packet struct {
	// Hot fields first: the per-packet path touches as few cache lines
	// as possible.
	buf      []byte
	off, end int

	// Verdict and Drop are the result of Outbound or Inbound.
	Verdict Verdict
	Drop    DropReason
	// Frame tells Inbound how Data starts (ignored by Outbound, whose
	// input is always an IP packet).
	Frame Frame
	v6    bool
	// SPI and Seq identify the SA and the (64-bit) sequence number used,
	// when an SA was found.
	SPI uint32
	Seq uint64

	// engine-private per-packet state: no per-packet allocation.
	sa     *sa
	b      *batch
	l4off  int // Outbound result: offset of the IP payload in buf
	espoff int // offset of the ESP header in buf
	l3len  int // length of the (outer or transport) IP header
	nhoff  int // offset of the outer next-header byte from the IP header start
	bytes  int // inner bytes accounted against lifetimes
	tunnel bool
	// reqKey is the geometry (reqGeom) for which a fast path last set up
	// req; 0 when req was last set up otherwise. A fast path that finds
	// its geometry here leaves req as it is: for a stream of packets of
	// one size (bulk traffic at the MTU), a pooled packet's request is
	// set up once, not per packet.
	reqKey uint64

	// Src and Dst are the outer addresses. Inbound reads them for
	// FrameUDP and FrameESP (Dst may be left invalid when the local
	// address is unknown: the SA is then found by SPI alone) and sets them
	// from the IP header for FrameIP. Outbound sets them to the SA's
	// endpoints (ports are set for ESP-in-UDP only).
	Src, Dst netip.AddrPort

	// The fields above are those the fast paths write per packet (three
	// cache lines); the request's are read per packet once set up
	// (reqKey), and the framework's bookkeeping at its end and the
	// fields below are not touched per packet on the fast paths.
	req crypto.Request

	aad     [12]byte
	trailer [4]byte
	pool    *Pool
}

// Data returns the packet bytes. The slice aliases the buffer: it is valid
// until the next call that changes the packet's bounds.
func (p *Packet) Data() []byte { return p.buf[p.off:p.end] }

// head returns the first data byte of p (0 if it has none): the engine
// reads it ahead of processing (prefetchAhead).
func (p *Packet) head() byte {
	if p.off < len(p.buf) {
		return p.buf[p.off]
	}
	return 0
}

// Len returns len(p.Data()).
func (p *Packet) Len() int { return p.end - p.off }

// Reset empties the packet, clears its metadata (bounds, Frame, Src, Dst
// and the results of the last Outbound or Inbound) and restores the full
// headroom.
func (p *Packet) Reset() {
	p.off, p.end = Headroom, Headroom
	p.Frame = FrameIP
	p.Src, p.Dst = netip.AddrPort{}, netip.AddrPort{}
	p.Verdict, p.Drop, p.SPI, p.Seq = VerdictDrop, DropNone, 0, 0
	// The engine-private fields are set by Outbound and Inbound before
	// they are read, and the accessors that read them after a call
	// (IPPayload, ESP) check Verdict first: resetting them here would
	// only add stores to every received packet.
}

// ReadBuffer returns the space a reader may fill (after the headroom, up
// to the tailroom), for example with a recvmmsg. Call Commit with the
// number of bytes read. ReadBuffer resets the packet.
func (p *Packet) ReadBuffer() []byte {
	p.Reset()
	return p.buf[Headroom : len(p.buf)-Tailroom]
}

// Commit sets the data to the first n bytes of the ReadBuffer. It reports
// false (changing nothing) when n is out of range.
func (p *Packet) Commit(n int) bool {
	if n < 0 || Headroom+n > len(p.buf)-Tailroom {
		return false
	}
	p.off, p.end = Headroom, Headroom+n
	return true
}

// SetData resets the packet and copies b into it, after the headroom. It
// reports false when b does not fit (the packet is then empty).
func (p *Packet) SetData(b []byte) bool {
	p.Reset()
	if len(b) > len(p.buf)-Headroom-Tailroom {
		return false
	}
	p.end = Headroom + copy(p.buf[Headroom:], b)
	return true
}

// Front returns the n bytes in front of Data followed by Data, for a
// writer that prepends its own header (e.g. a TUN virtio-net header) in
// the headroom; nil when fewer than n bytes of headroom remain. The packet
// bounds are unchanged.
func (p *Packet) Front(n int) []byte {
	if n < 0 || n > p.off {
		return nil
	}
	return p.buf[p.off-n : p.end]
}

// TrimFront drops the first n bytes of Data (e.g. a virtio-net header read
// along with the packet); it reports false, changing nothing, when Data is
// shorter than n.
func (p *Packet) TrimFront(n int) bool {
	if n < 0 || n > p.end-p.off {
		return false
	}
	p.off += n
	return true
}

// HeadroomLen returns how many bytes precede Data in the buffer.
func (p *Packet) HeadroomLen() int { return p.off }

// Cap returns the largest Data a reader may place in the packet.
func (p *Packet) Cap() int { return len(p.buf) - Headroom - Tailroom }

// IPPayload returns, after Outbound with VerdictForward, the outer IP
// payload (UDP header and ESP for ESP-in-UDP, ESP otherwise): what a raw
// socket that adds the IP header sends. Otherwise it returns nil.
func (p *Packet) IPPayload() []byte {
	if p.Verdict != VerdictForward || p.l4off == 0 {
		return nil
	}
	return p.buf[p.l4off:p.end]
}

// ESP returns, after Outbound with VerdictForward, the ESP packet (SPI
// first): the payload a UDP socket sends for ESP-in-UDP, or a raw
// IPPROTO_ESP socket sends. Otherwise it returns nil.
func (p *Packet) ESP() []byte {
	if p.Verdict != VerdictForward || p.espoff == 0 {
		return nil
	}
	return p.buf[p.espoff:p.end]
}

// Release returns the packet to its pool (same as Pool.Put).
func (p *Packet) Release() {
	if p.pool != nil {
		p.pool.Put(p)
	}
}

// Pool recycles Packets. Get and Put are safe for concurrent use and take
// no global lock: the pool is a sync.Pool, whose per-P caches let one
// goroutine free what another allocated. In steady state Get allocates
// nothing; the garbage collector may trim idle packets.
type Pool struct {
	size int
	p    sync.Pool
}

// NewPool returns a pool of packets able to hold mtu bytes of data (0 means
// DefaultMTU) with Headroom and Tailroom around them.
func NewPool(mtu int) *Pool {
	if mtu <= 0 {
		mtu = DefaultMTU
	}
	pl := &Pool{size: Headroom + mtu + Tailroom}
	pl.p.New = func() any {
		p := &Packet{buf: make([]byte, pl.size), pool: pl}
		p.Reset()
		return p
	}
	return pl
}

// MTU returns the data capacity of the pool's packets.
func (pl *Pool) MTU() int { return pl.size - Headroom - Tailroom }

// Get returns an empty, reset packet.
func (pl *Pool) Get() *Packet {
	p := pl.p.Get().(*Packet)
	p.Reset()
	return p
}

// Put returns p to the pool. p must not be used afterwards. Packets of
// another pool are ignored.
func (pl *Pool) Put(p *Packet) {
	if p == nil || p.pool != pl {
		return
	}
	p.sa, p.b = nil, nil
	p.req.Reset()
	p.reqKey = 0
	pl.p.Put(p)
}
