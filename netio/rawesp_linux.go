package netio

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// protoESP is the IP protocol number of ESP.
const protoESP = 50

// RawESP is an Outer for ESP directly over IP (protocol 50) through a raw
// socket. IPv4 receive buffers carry the IP header (KindIP); IPv6 ones start
// at the SPI (KindESP). Sends give the ESP packet; the kernel adds the IP
// header.
type RawESP struct {
	local netip.Addr
	c     net.PacketConn
	p4    *ipv4.PacketConn
	p6    *ipv6.PacketConn
	recv  []Receiver

	mu   sync.Mutex
	msgs []ipv4.Message // send scratch, guarded by mu
	dst  net.IPAddr
}

// ListenRawESP opens a raw IPPROTO_ESP socket bound to local (IPv4 or IPv6).
func ListenRawESP(local netip.Addr) (*RawESP, error) {
	network := "ip4:50"
	if local.Is6() && !local.Is4In6() {
		network = "ip6:50"
	}
	c, err := net.ListenPacket(network, local.Unmap().String())
	if err != nil {
		return nil, fmt.Errorf("netio: raw esp %v: %w", local, err)
	}
	// A burst that overflows the default receive buffer is not only lost:
	// Linux then answers it with ICMP protocol unreachable, as if nobody
	// listened. Use the buffers StdNetBind uses for UDP.
	if err := setSocketBuffers(c, socketBuffer); err != nil {
		c.Close()
		return nil, fmt.Errorf("netio: raw esp %v: %w", local, err)
	}
	r := &RawESP{local: local.Unmap(), c: c, msgs: make([]ipv4.Message, BatchSize)}
	for i := range r.msgs {
		r.msgs[i].Buffers = make([][]byte, 1)
	}
	rmsgs := make([]ipv4.Message, BatchSize)
	for i := range rmsgs {
		rmsgs[i].Buffers = make([][]byte, 1)
	}
	if network == "ip4:50" {
		r.p4 = ipv4.NewPacketConn(c)
		r.recv = []Receiver{{Kind: KindIP, Name: "esp4", Receive: func(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
			return readBatch(r.p4.ReadBatch, rmsgs, bufs, sizes, srcs)
		}}}
	} else {
		r.p6 = ipv6.NewPacketConn(c)
		r.recv = []Receiver{{Kind: KindESP, Name: "esp6", Receive: func(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
			return readBatch(r.p6.ReadBatch, rmsgs, bufs, sizes, srcs)
		}}}
	}
	return r, nil
}

func readBatch(rb func([]ipv4.Message, int) (int, error), msgs []ipv4.Message, bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	m := msgs[:min(len(bufs), len(msgs))]
	for i := range m {
		m[i].Buffers[0] = bufs[i]
		m[i].N, m[i].Addr = 0, nil
	}
	n, err := rb(m, 0)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		sizes[i] = m[i].N
		srcs[i] = netip.AddrPort{}
		if a, ok := m[i].Addr.(*net.IPAddr); ok {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				srcs[i] = netip.AddrPortFrom(ip.Unmap(), 0)
			}
		}
		m[i].Buffers[0] = nil
	}
	return n, nil
}

// Receivers implements Outer.
func (r *RawESP) Receivers() []Receiver { return r.recv }

// Name implements Outer.
func (r *RawESP) Name() string { return "esp:" + r.local.String() }

// Send implements Outer.
func (r *RawESP) Send(bufs [][]byte, dst netip.AddrPort) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dst.IP = dst.Addr().AsSlice()
	for len(bufs) > 0 {
		m := r.msgs[:min(len(bufs), len(r.msgs))]
		for i := range m {
			m[i].Buffers[0] = bufs[i]
			m[i].Addr = &r.dst
		}
		var n int
		var err error
		if r.p4 != nil {
			n, err = r.p4.WriteBatch(m, 0)
		} else {
			n, err = r.p6.WriteBatch(m, 0)
		}
		for i := range m {
			m[i].Buffers[0] = nil
		}
		if err != nil {
			return fmt.Errorf("netio: esp send to %v: %w", dst.Addr(), err)
		}
		bufs = bufs[n:]
	}
	return nil
}

// Close implements Outer.
func (r *RawESP) Close() error { return r.c.Close() }

// socketBuffer is the receive and send buffer size of raw ESP sockets.
const socketBuffer = 7 << 20

// setSocketBuffers sets SO_RCVBUF and SO_SNDBUF to size, beyond the
// sysctl limits when privileged (the *FORCE options), else as far as they
// allow.
func setSocketBuffers(c net.PacketConn, size int) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], size) != nil {
				if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], size); e != nil {
					serr = e
				}
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}
