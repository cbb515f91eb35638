package exchange

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// lossyResponder serves srv on a loopback socket, dropping the first
// datagram of each message ID in drop, and counts what arrives.
func lossyResponder(t *testing.T, srv *Server, drop map[uint32]bool) (*net.UDPConn, *atomic.Int64) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		local := c.LocalAddr().(*net.UDPAddr).AddrPort()
		dropped := map[uint32]bool{}
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			got.Add(1)
			if n < 28 || srv == nil {
				continue
			}
			id := uint32(buf[20])<<24 | uint32(buf[21])<<16 | uint32(buf[22])<<8 | uint32(buf[23])
			if drop[id] && !dropped[id] {
				dropped[id] = true
				continue
			}
			if reply := srv.HandleDatagram(append([]byte(nil), buf[:n]...), local, from); reply != nil {
				c.WriteToUDPAddrPort(reply, from)
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c, &got
}

func loopbackInitiator(t *testing.T, server *net.UDPConn) (Config, *net.UDPConn) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ic, _ := pairConfigs("shared-secret-of-i-and-r")
	ic.Local = c.LocalAddr().(*net.UDPAddr).AddrPort()
	ic.Remote = server.LocalAddr().(*net.UDPAddr).AddrPort()
	return ic, c
}

// TestDialRetransmits: the first IKE_SA_INIT and the first IKE_AUTH
// request are lost; Dial's retransmissions complete the exchanges, and the
// responder saw exactly four requests.
func TestDialRetransmits(t *testing.T) {
	_, rc := pairConfigs("shared-secret-of-i-and-r")
	est := make(chan *ChildSA, 1)
	srv := &Server{Config: rc, OnEstablished: func(_ *IKESA, c *ChildSA) { est <- c }}
	sc, got := lossyResponder(t, srv, map[uint32]bool{0: true, 1: true})
	ic, c := loopbackInitiator(t, sc)
	in, err := dialTest(t, ic, c, nil, Retransmit{Timeout: 100 * time.Millisecond, Base: 2, Tries: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := got.Load(); n != 4 {
		t.Fatalf("responder received %d requests, want 4", n)
	}
	select {
	case c := <-est:
		if _, ic := in.Result(); !in.Done() || c == nil || c.InSPI != ic.OutSPI {
			t.Fatal("not established on both sides")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the responder did not establish")
	}
}

// TestDialGivesUp: against a silent peer, Dial sends the request once and
// retransmits Tries times with waits growing by Base, then fails with
// ErrTimeout.
func TestDialGivesUp(t *testing.T) {
	sc, got := lossyResponder(t, nil, nil)
	ic, c := loopbackInitiator(t, sc)
	start := time.Now()
	_, err := dialTest(t, ic, c, nil, Retransmit{Timeout: 50 * time.Millisecond, Base: 2, Tries: 3}, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Dial: %v, want ErrTimeout", err)
	}
	// 50 + 100 + 200 + 400 ms of waiting at least.
	if el := time.Since(start); el < 750*time.Millisecond {
		t.Fatalf("gave up after %v, before the backoff schedule ran", el)
	}
	deadline := time.Now().Add(2 * time.Second)
	for got.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := got.Load(); n != 4 {
		t.Fatalf("peer received %d datagrams, want 1 + 3 retransmissions", n)
	}
}

// charonRetransmit is the schedule of the tests against charon.
var charonRetransmit = Retransmit{Timeout: time.Second, Base: 1.5, Tries: 4}

// dialTest creates an Initiator for cfg (wiped at cleanup) and runs Dial
// within 20 s.
func dialTest(t *testing.T, cfg Config, c500, c4500 *net.UDPConn, rt Retransmit, observe func(bool, []byte)) (*Initiator, error) {
	t.Helper()
	in, err := NewInitiator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Zero)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return in, Dial(ctx, in, c500, c4500, DialOptions{Retransmit: rt, Observe: observe})
}
