package exchange

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/ipsec"
)

// espEcho answers ICMP echo requests that arrive ESP-in-UDP on conn: each
// datagram goes through eng.Inbound (FrameUDP), an echo request to a
// local address becomes an echo reply, which goes through eng.Outbound
// and back out of conn. It stands in for a Keel gateway whose outer
// socket IKE shares (the dataplane does not yet hand IKE to iked), so the
// ESP path is the engine's own in both directions.
type espEcho struct {
	conn    *net.UDPConn
	eng     *ipsec.Engine
	local   netip.AddrPort
	pool    *ipsec.Pool
	replies atomic.Int64
	drops   atomic.Int64
	wg      sync.WaitGroup
}

func startESPEcho(t *testing.T, conn *net.UDPConn, eng *ipsec.Engine, local netip.AddrPort) *espEcho {
	e := newESPEcho(conn, eng, local)
	e.wg.Add(1)
	go e.run()
	t.Cleanup(func() {
		conn.SetReadDeadline(time.Unix(1, 0))
		e.wg.Wait()
	})
	return e
}

func newESPEcho(conn *net.UDPConn, eng *ipsec.Engine, local netip.AddrPort) *espEcho {
	return &espEcho{conn: conn, eng: eng, local: local, pool: ipsec.NewPool(0)}
}

func (e *espEcho) run() {
	defer e.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := e.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if n < 4 || binary.BigEndian.Uint32(buf) == 0 {
			continue // IKE (non-ESP marker) or a keepalive
		}
		e.handle(buf[:n], from)
	}
}

// handle runs one ESP-in-UDP datagram from the peer through the engine
// and sends the echo reply, if it was an echo request.
func (e *espEcho) handle(b []byte, from netip.AddrPort) {
	p := e.pool.Get()
	defer p.Release()
	if !p.SetData(b) {
		return
	}
	p.Frame, p.Src, p.Dst = ipsec.FrameUDP, from, e.local
	e.eng.Inbound([]*ipsec.Packet{p})
	if p.Verdict != ipsec.VerdictForward {
		e.drops.Add(1)
		return
	}
	reply := echoReply(p.Data())
	if reply == nil {
		return
	}
	q := e.pool.Get()
	defer q.Release()
	q.SetData(reply)
	e.eng.Outbound([]*ipsec.Packet{q})
	if q.Verdict != ipsec.VerdictForward {
		e.drops.Add(1)
		return
	}
	dst := q.Dst
	if dst.Port() == 0 {
		dst = from
	}
	if _, err := e.conn.WriteToUDPAddrPort(q.ESP(), dst); err == nil {
		e.replies.Add(1)
	}
}

// echoReply returns the ICMP echo reply to an IPv4 echo request, or nil.
func echoReply(pkt []byte) []byte {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != 1 {
		return nil
	}
	ihl := int(pkt[0]&0xf) * 4
	tot := int(binary.BigEndian.Uint16(pkt[2:]))
	if ihl < 20 || tot > len(pkt) || tot < ihl+8 || pkt[ihl] != 8 {
		return nil
	}
	r := append([]byte(nil), pkt[:tot]...)
	copy(r[12:16], pkt[16:20])
	copy(r[16:20], pkt[12:16])
	r[8] = 64
	r[10], r[11] = 0, 0
	binary.BigEndian.PutUint16(r[10:], inetChecksum(r[:ihl]))
	r[ihl] = 0 // echo reply
	r[ihl+2], r[ihl+3] = 0, 0
	binary.BigEndian.PutUint16(r[ihl+2:], inetChecksum(r[ihl:]))
	return r
}

func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
