package exchange

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/keelinit/keel/ike/wire"
)

// Server dispatches the requests of many initiators to their Responders:
// an IKE_SA_INIT request by initiator SPI and address (so that its
// retransmission reaches the same Responder), every later one by
// responder SPI. Not safe for concurrent use; Serve runs it from one
// goroutine.
type Server struct {
	Config *ResponderConfig
	// OnEstablished, if set, is called once per IKE SA when its first
	// CHILD_SA is negotiated (child nil if that failed). The callee owns
	// the keys from then on.
	OnEstablished func(ike *IKESA, child *ChildSA)
	// Observe, if set, sees every IKE message Serve receives (out=false)
	// and sends, without the non-ESP marker.
	Observe func(out bool, msg []byte)

	half map[halfKey]*Responder
	sas  map[wire.SPI]*Responder
	// closed keeps the last maxClosed SAs refused or deleted after
	// IKE_SA_INIT, so that a retransmitted request still gets its cached
	// reply (AUTHENTICATION_FAILED, the DELETE's answer).
	closed      map[wire.SPI]*Responder
	closedOrder []wire.SPI
}

// maxClosed bounds Server.closed.
const maxClosed = 256

func (s *Server) close(r *Responder) {
	spi := r.SPIr()
	delete(s.sas, spi)
	if spi.IsZero() || s.closed[spi] != nil {
		return
	}
	if len(s.closedOrder) == maxClosed {
		old := s.closedOrder[0]
		s.closed[old].Zero()
		delete(s.closed, old)
		s.closedOrder = s.closedOrder[1:]
	}
	s.closed[spi] = r
	s.closedOrder = append(s.closedOrder, spi)
}

type halfKey struct {
	spii   wire.SPI
	remote netip.AddrPort
}

// HandleDatagram processes one IKE message (without the non-ESP marker)
// received from remote on local, and returns the reply to send back, or
// nil.
func (s *Server) HandleDatagram(b []byte, local, remote netip.AddrPort) []byte {
	if s.half == nil {
		s.half, s.sas, s.closed = map[halfKey]*Responder{}, map[wire.SPI]*Responder{}, map[wire.SPI]*Responder{}
	}
	h, _, err := wire.DecodeHeader(b)
	var we *wire.Error
	if err != nil && !(errors.As(err, &we) && we.Notify == wire.INVALID_MAJOR_VERSION) {
		return nil
	}
	var r *Responder
	if h.SPIr.IsZero() {
		if h.Exchange != wire.IKE_SA_INIT || h.MessageID != 0 {
			return nil
		}
		k := halfKey{h.SPIi, remote}
		if r = s.half[k]; r == nil {
			r = NewResponder(s.Config, local, remote)
			s.half[k] = r
		}
	} else if r = s.sas[h.SPIr]; r == nil {
		if r = s.closed[h.SPIr]; r == nil {
			return nil
		}
	}
	wasDone := r.Done()
	reply, err := r.Handle(b, local, remote)
	k := halfKey{r.ikeSPIi(h), r.firstRemote}
	switch failed, _ := r.Failed(); {
	case failed:
		// Refused, or deleted: no state is kept (§2.6).
		delete(s.half, k)
		s.close(r)
	case r.Done():
		delete(s.half, k) // no longer half-open
		s.sas[r.SPIr()] = r
	case !r.SPIr().IsZero():
		s.sas[r.SPIr()] = r
	}
	if !wasDone && r.Done() && s.OnEstablished != nil {
		s.OnEstablished(r.Result())
	}
	if err != nil {
		return nil
	}
	return reply
}

// Responders returns the responders of the IKE SAs past IKE_SA_INIT.
func (s *Server) Responders() []*Responder {
	out := make([]*Responder, 0, len(s.sas))
	for _, r := range s.sas {
		out = append(out, r)
	}
	return out
}

// Serve answers on c500 and c4500 (IKE after the non-ESP marker) until
// ctx ends. ESP arriving on c4500, if esp is set, is passed to it with
// the sender's address; keepalives are dropped.
func (s *Server) Serve(ctx context.Context, c500, c4500 *net.UDPConn, esp func(b []byte, from netip.AddrPort)) error {
	rx := make(chan datagram, 64)
	defer readIKE(ctx, c500, c4500, rx, esp)()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d := <-rx:
			if s.Observe != nil {
				s.Observe(false, d.b)
			}
			reply := s.HandleDatagram(d.b, d.local, d.remote)
			if reply == nil {
				continue
			}
			if s.Observe != nil {
				s.Observe(true, reply)
			}
			sendIKE(c500, c4500, d.natt, reply, d.remote)
		}
	}
}
