package netio

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/conn"
)

// UDP is an Outer for ESP-in-UDP (RFC 3948) on a fixed port, built on
// wireguard-go's StdNetBind (IPv4 and IPv6 wildcard sockets, recvmmsg and
// sendmmsg, UDP GSO/GRO when the kernel supports them).
type UDP struct {
	bind *conn.StdNetBind
	port uint16
	recv []Receiver

	noGSO atomic.Bool

	mu  sync.Mutex
	eps map[netip.AddrPort]*conn.StdNetEndpoint
}

// SetGSO turns UDP GSO on sends on (the default, where the kernel offers
// it) or off. Off, every ESP packet leaves as its own datagram, which is
// what a capture on a veth shows packet by packet (a GSO batch crosses a
// veth unsegmented). It is safe to call at any time.
func (u *UDP) SetGSO(on bool) { u.noGSO.Store(!on) }

// ListenUDP opens the UDP sockets on port (4500 for NAT-T) for IPv4 and
// IPv6 (whichever the host supports).
func ListenUDP(port uint16) (*UDP, error) {
	b := conn.NewStdNetBind().(*conn.StdNetBind)
	fns, got, err := b.Open(port)
	if err != nil {
		return nil, fmt.Errorf("netio: udp port %d: %w", port, err)
	}
	u := &UDP{bind: b, port: got, eps: make(map[netip.AddrPort]*conn.StdNetEndpoint)}
	for _, fn := range fns {
		fn := fn
		// eps is owned by this receiver's goroutine.
		eps := make([]conn.Endpoint, conn.IdealBatchSize)
		u.recv = append(u.recv, Receiver{
			Kind: KindUDP,
			Name: fn.PrettyName(),
			Receive: func(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
				n, err := fn(bufs, sizes, eps)
				for i := 0; i < n; i++ {
					if ep, ok := eps[i].(*conn.StdNetEndpoint); ok && sizes[i] > 0 {
						srcs[i] = ep.AddrPort
					} else {
						srcs[i] = netip.AddrPort{}
					}
					eps[i] = nil
				}
				return n, err
			},
		})
	}
	return u, nil
}

// Port returns the bound port.
func (u *UDP) Port() uint16 { return u.port }

// Receivers implements Outer.
func (u *UDP) Receivers() []Receiver { return u.recv }

// Name implements Outer.
func (u *UDP) Name() string { return fmt.Sprintf("udp:%d", u.port) }

func (u *UDP) endpoint(dst netip.AddrPort) *conn.StdNetEndpoint {
	u.mu.Lock()
	ep := u.eps[dst]
	if ep == nil {
		if len(u.eps) > 1024 {
			clear(u.eps)
		}
		ep = &conn.StdNetEndpoint{AddrPort: dst}
		u.eps[dst] = ep
	}
	u.mu.Unlock()
	return ep
}

// Send implements Outer. With GSO off it trims the capacity of the
// elements of bufs (so that nothing is coalesced into them).
func (u *UDP) Send(bufs [][]byte, dst netip.AddrPort) error {
	if len(bufs) == 0 {
		return nil
	}
	if u.noGSO.Load() {
		for i, b := range bufs {
			bufs[i] = b[:len(b):len(b)]
		}
	}
	for len(bufs) > 0 {
		n := min(len(bufs), conn.IdealBatchSize)
		if err := u.bind.Send(bufs[:n], u.endpoint(dst)); err != nil {
			var gso conn.ErrUDPGSODisabled
			if errors.As(err, &gso) && gso.RetryErr == nil {
				// GSO was refused and turned off; the retry without it
				// sent the batch.
				bufs = bufs[n:]
				continue
			}
			return fmt.Errorf("netio: udp send to %v: %w", dst, err)
		}
		bufs = bufs[n:]
	}
	return nil
}

// Close implements Outer.
func (u *UDP) Close() error { return u.bind.Close() }
