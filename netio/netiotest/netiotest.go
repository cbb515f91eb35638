// Package netiotest provides in-memory fakes of netio.TUN and netio.Outer,
// in the style of wireguard-go's tuntest and bindtest, so that the dataplane
// is tested without root, devices or sockets.
package netiotest

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/keelinit/keel/netio"
)

// TUN is a fake netio.TUN. Tests send the packets the kernel would route into
// the tunnel on Outbound, and receive what the gateway wrote to the device on
// Inbound. Every packet is copied. After Close, Read and Write return
// netio.ErrClosed.
type TUN struct {
	// Outbound carries packets to the gateway (read by TUN.Read).
	Outbound chan []byte
	// Inbound carries packets from the gateway (written by TUN.Write).
	Inbound chan []byte

	name      string
	mtu       int
	closed    chan struct{}
	closeOnce sync.Once
}

// NewTUN returns a fake TUN with channels of 1024 packets.
func NewTUN(name string, mtu int) *TUN {
	return &TUN{
		Outbound: make(chan []byte, 1024),
		Inbound:  make(chan []byte, 1024),
		name:     name,
		mtu:      mtu,
		closed:   make(chan struct{}),
	}
}

// Read implements netio.TUN: it blocks for one packet, then takes what else is
// queued, up to len(bufs).
func (t *TUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var first []byte
	select {
	case first = <-t.Outbound:
	case <-t.closed:
		return 0, netio.ErrClosed
	}
	n := 0
	put := func(p []byte) error {
		if len(p) > len(bufs[n])-offset {
			return fmt.Errorf("netiotest: packet of %d bytes overflows buffer", len(p))
		}
		sizes[n] = copy(bufs[n][offset:], p)
		n++
		return nil
	}
	if err := put(first); err != nil {
		return 0, err
	}
	for n < len(bufs) {
		select {
		case p := <-t.Outbound:
			if err := put(p); err != nil {
				return n, err
			}
		default:
			return n, nil
		}
	}
	return n, nil
}

// Write implements netio.TUN: each packet is copied to Inbound (blocking
// while it is full, unless the TUN is closed).
func (t *TUN) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		p := append([]byte(nil), b[offset:]...)
		select {
		case t.Inbound <- p:
		case <-t.closed:
			return i, netio.ErrClosed
		}
	}
	return len(bufs), nil
}

// Name implements netio.TUN.
func (t *TUN) Name() (string, error) { return t.name, nil }

// MTU implements netio.TUN.
func (t *TUN) MTU() (int, error) { return t.mtu, nil }

// Close implements netio.TUN. It is idempotent.
func (t *TUN) Close() error {
	t.closeOnce.Do(func() { close(t.closed) })
	return nil
}

type datagram struct {
	data []byte
	src  netip.AddrPort
}

// Outer is one end of an in-memory link created by Pipe. What one end Sends
// to any destination arrives at the other end's receiver, with the sender's
// address as source. It is safe for concurrent use.
type Outer struct {
	addr netip.AddrPort
	kind netio.Kind
	in   chan datagram
	peer *Outer   // Pipe's other end, or nil
	net  *Network // the Network it is attached to, or nil

	mu        sync.Mutex
	sent      [][]byte // copies of what was sent, when Record is set
	record    bool
	closed    chan struct{}
	closeOnce sync.Once
}

// Pipe returns two connected fake Outers with addresses a and b whose
// receivers report kind (netio.KindUDP for ESP-in-UDP, netio.KindESP for raw
// ESP without the IP header).
func Pipe(a, b netip.AddrPort, kind netio.Kind) (*Outer, *Outer) {
	x := &Outer{addr: a, kind: kind, in: make(chan datagram, 4096), closed: make(chan struct{})}
	y := &Outer{addr: b, kind: kind, in: make(chan datagram, 4096), closed: make(chan struct{})}
	x.peer, y.peer = y, x
	return x, y
}

// Record makes the Outer keep a copy of every packet it sends (see Sent).
func (o *Outer) Record() {
	o.mu.Lock()
	o.record = true
	o.mu.Unlock()
}

// Sent returns copies of the packets sent so far, when Record was called.
func (o *Outer) Sent() [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]byte(nil), o.sent...)
}

// Inject queues a datagram for this end's receiver as if src had sent it.
func (o *Outer) Inject(p []byte, src netip.AddrPort) {
	select {
	case o.in <- datagram{append([]byte(nil), p...), src}:
	case <-o.closed:
	}
}

// Receivers implements netio.Outer.
func (o *Outer) Receivers() []netio.Receiver {
	return []netio.Receiver{{Kind: o.kind, Name: "pipe", Receive: o.receive}}
}

func (o *Outer) receive(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	var d datagram
	select {
	case d = <-o.in:
	case <-o.closed:
		return 0, netio.ErrClosed
	}
	n := 0
	for {
		if len(d.data) <= len(bufs[n]) {
			sizes[n] = copy(bufs[n], d.data)
			srcs[n] = d.src
			n++
		}
		if n == len(bufs) {
			return n, nil
		}
		select {
		case d = <-o.in:
		default:
			return n, nil
		}
	}
}

// Send implements netio.Outer. Packets are dropped silently once the peer's
// queue is full, as a network would.
func (o *Outer) Send(bufs [][]byte, dst netip.AddrPort) error {
	select {
	case <-o.closed:
		return netio.ErrClosed
	default:
	}
	o.mu.Lock()
	rec := o.record
	o.mu.Unlock()
	to := o.peer
	if o.net != nil {
		to = o.net.route(dst)
	}
	for _, b := range bufs {
		p := append([]byte(nil), b...)
		if rec {
			o.mu.Lock()
			o.sent = append(o.sent, append([]byte(nil), b...))
			o.mu.Unlock()
		}
		if to == nil {
			o.net.lost.Add(1)
			continue
		}
		select {
		case to.in <- datagram{p, o.addr}:
		default:
		}
	}
	return nil
}

// Network is an in-memory network of fake Outers with distinct addresses:
// what one of them Sends to dst arrives at the Outer attached at dst (the
// address and port; for a raw-ESP dst with port 0, the one attached at that
// address), with the sender's address as source. A packet to a destination
// no Outer is attached at is lost and counted (Lost).
type Network struct {
	mu   sync.Mutex
	ends map[netip.AddrPort]*Outer
	lost atomic.Uint64
}

// NewNetwork returns an empty network.
func NewNetwork() *Network { return &Network{ends: map[netip.AddrPort]*Outer{}} }

// Attach returns a new Outer at addr whose receiver reports kind. The
// address must not be attached already.
func (n *Network) Attach(addr netip.AddrPort, kind netio.Kind) *Outer {
	o := &Outer{addr: addr, kind: kind, in: make(chan datagram, 4096), closed: make(chan struct{}), net: n}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ends[addr] != nil {
		panic(fmt.Sprintf("netiotest: %v attached twice", addr))
	}
	n.ends[addr] = o
	return o
}

// Lost returns how many packets were sent to an address nobody is at.
func (n *Network) Lost() uint64 { return n.lost.Load() }

func (n *Network) route(dst netip.AddrPort) *Outer {
	n.mu.Lock()
	defer n.mu.Unlock()
	if o := n.ends[dst]; o != nil {
		return o
	}
	if dst.Port() == 0 {
		for a, o := range n.ends {
			if a.Addr() == dst.Addr() {
				return o
			}
		}
	}
	return nil
}

// Name implements netio.Outer.
func (o *Outer) Name() string { return "pipe:" + o.addr.String() }

// Close implements netio.Outer. It is idempotent.
func (o *Outer) Close() error {
	o.closeOnce.Do(func() { close(o.closed) })
	return nil
}

var (
	_ netio.TUN   = (*TUN)(nil)
	_ netio.Outer = (*Outer)(nil)
)
