// Package netio is Keel's packet I/O layer: the inner TUN device and the
// outer sockets (ESP-in-UDP on port 4500, RFC 3948, and raw ESP, IP protocol
// 50), behind two narrow batch interfaces so that the IPsec dataplane can be
// tested with the in-memory fakes of package netio/netiotest, without root.
//
// The Linux TUN device is the tun package of golang.zx2c4.com/wireguard (MIT),
// opened with IFF_VNET_HDR so that the kernel hands over TSO super-segments
// (split here into MTU-sized packets) and accepts GRO-coalesced writes. The
// UDP side is wireguard-go's conn.StdNetBind: recvmmsg/sendmmsg batches with
// UDP GSO (UDP_SEGMENT) and GRO (UDP_GRO) where the kernel offers them. Raw
// ESP uses x/net's ipv4/ipv6 ReadBatch and WriteBatch.
package netio

import (
	"errors"
	"net/netip"
)

// TUNOffset is the number of bytes every buffer handed to TUN.Write must
// have in front of the packet (Write's offset argument): the TUN writes a
// virtio-net header there. Fakes accept any offset.
const TUNOffset = 16

// BatchSize is the number of buffers the dataplane hands to one TUN.Read or
// Receiver call and the most it hands to one Write or Send. Receivers of
// StdNetBind need exactly this many buffers.
const BatchSize = 128

// MaxSegment is the size a receive buffer needs so that one UDP-GRO
// coalesced datagram or one TUN GRO write of up to 64 KiB fits.
const MaxSegment = 65535

// ErrClosed is returned by the I/O methods after Close.
var ErrClosed = errors.New("netio: closed")

// TUN is the inner side: a layer-3 device that carries plaintext IP
// packets. Read and Write may be called concurrently with each other, but
// each of them by one goroutine at a time. After Close, Read and Write fail
// (with an error wrapping ErrClosed or os.ErrClosed).
type TUN interface {
	// Read reads one or more IP packets into bufs[i][offset:] and sets
	// sizes[i]; it returns the number of packets. len(sizes) >= len(bufs),
	// and each buffer must hold an MTU-sized packet.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes the IP packets bufs[i][offset:]; offset must be at
	// least TUNOffset. Packets of one TCP or UDP flow may be coalesced
	// (GRO) into the spare capacity of the first buffer of the flow, so the
	// buffers must not be shared with other writers during the call. The
	// buffers' bytes before offset and after the packet may be overwritten.
	Write(bufs [][]byte, offset int) (int, error)
	// Name returns the interface name.
	Name() (string, error)
	// MTU returns the interface MTU.
	MTU() (int, error)
	// Close closes the device; blocked Reads return.
	Close() error
}

// Kind says what the buffers a Receiver fills start with.
type Kind uint8

// Kinds of received data.
const (
	// KindUDP: the payload of a UDP datagram from port 4500 (ESP, a
	// non-ESP marker and IKE, or a NAT-T keepalive).
	KindUDP Kind = iota
	// KindIP: an IP packet, header included (raw IPv4 sockets).
	KindIP
	// KindESP: a bare ESP packet, SPI first (raw IPv6 sockets).
	KindESP
)

// String returns "udp", "ip" or "esp".
func (k Kind) String() string {
	switch k {
	case KindUDP:
		return "udp"
	case KindIP:
		return "ip"
	case KindESP:
		return "esp"
	}
	return "unknown"
}

// ReceiveFunc reads a batch: it fills bufs[i][:sizes[i]] and sets srcs[i]
// to the sender (port 0 for raw sockets) for i < n. It blocks until at least
// one packet arrives or the Outer is closed. len(bufs) must be BatchSize, and
// each buffer MaxSegment bytes long (UDP GRO reads coalesced datagrams into
// the last buffers and splits them into the others).
type ReceiveFunc func(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (n int, err error)

// Receiver is one receive path of an Outer (for example its IPv4 or its IPv6
// socket). Each Receive must be called by one goroutine at a time.
type Receiver struct {
	Kind    Kind
	Name    string
	Receive ReceiveFunc
}

// Outer is the outer side: the socket that carries ESP to and from the
// peer. Send is safe for concurrent use. After Close, Send and the
// receivers fail.
type Outer interface {
	// Receivers returns the receive paths; the caller runs each on its own
	// goroutine.
	Receivers() []Receiver
	// Send sends each buffer as one ESP packet to dst: for ESP-in-UDP the
	// UDP payload, for raw ESP the IP payload (the kernel adds the IP
	// header). Equal-sized UDP datagrams may be sent as one GSO batch,
	// which appends them into the spare capacity of the first buffer of a
	// run, so buffers must not be shared during the call.
	Send(bufs [][]byte, dst netip.AddrPort) error
	// Name describes the socket for status output, e.g. "udp:4500".
	Name() string
	// Close closes the sockets; blocked receivers return.
	Close() error
}
