package exchange

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// datagram is one IKE message read from a socket, without the non-ESP marker.
type datagram struct {
	b             []byte
	local, remote netip.AddrPort
	natt          bool // it came on the port 4500 socket
}

// readIKE reads c500 and c4500 (either may be nil) until ctx ends or the
// returned stop is called, and sends their IKE messages to rx. On c4500 a
// datagram without the non-ESP marker is ESP, passed to esp if not nil,
// or a keepalive, dropped (RFC 3948 §2.2). stop unblocks the readers,
// waits for them and leaves the sockets usable.
func readIKE(ctx context.Context, c500, c4500 *net.UDPConn, rx chan<- datagram, esp func(b []byte, from netip.AddrPort)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	conns := []*net.UDPConn{c500, c4500}
	var wg sync.WaitGroup
	for _, c := range conns {
		if c == nil {
			continue
		}
		natt := c == c4500
		local := c.LocalAddr().(*net.UDPAddr).AddrPort()
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 65536)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					var ne net.Error
					if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				b := buf[:n]
				if natt {
					if n < 4 {
						continue // a NAT keepalive
					}
					if b[0]|b[1]|b[2]|b[3] != 0 {
						if esp != nil {
							esp(b, from)
						}
						continue
					}
					b = b[4:]
				}
				select {
				case rx <- datagram{append([]byte(nil), b...), local, from, natt}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return func() {
		cancel()
		for _, c := range conns {
			if c != nil {
				c.SetReadDeadline(time.Unix(1, 0))
			}
		}
		wg.Wait()
		for _, c := range conns {
			if c != nil {
				c.SetReadDeadline(time.Time{})
			}
		}
	}
}

// sendIKE sends msg to remote, on c4500 behind the non-ESP marker when natt.
func sendIKE(c500, c4500 *net.UDPConn, natt bool, msg []byte, remote netip.AddrPort) error {
	if !natt {
		_, err := c500.WriteToUDPAddrPort(msg, remote)
		return err
	}
	_, err := c4500.WriteToUDPAddrPort(append(make([]byte, 4, 4+len(msg)), msg...), remote)
	return err
}
