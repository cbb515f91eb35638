package exchange

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// NATTPort is the UDP port of IKE and ESP after a float (RFC 3948).
const NATTPort = 4500

// Retransmit is the retransmission schedule of a request (§2.1): the
// first wait is Timeout, each next one Base times longer, and after Tries
// retransmissions the exchange fails. strongSwan's defaults are 4 s, 1.8, 5.
type Retransmit struct {
	Timeout time.Duration
	Base    float64
	Tries   int
}

// DefaultRetransmit is strongSwan's charon.retransmit_* default.
var DefaultRetransmit = Retransmit{Timeout: 4 * time.Second, Base: 1.8, Tries: 5}

// ErrTimeout is returned when a request got no answer after every retransmission.
var ErrTimeout = errors.New("ike: no response after all retransmissions")

// DialOptions are the optional parts of Dial.
type DialOptions struct {
	Retransmit Retransmit // zero: DefaultRetransmit
	// Observe, if set, sees every IKE message sent (out=true) and received,
	// without the non-ESP marker (for captures; they carry no plaintext
	// keys, only protected or public material).
	Observe func(out bool, msg []byte)
}

// Dial runs in to completion over c500 (bound to Config.Local) and, after
// a float, c4500 (bound to Config.Local's address, port 4500, where IKE
// messages carry the four-octet non-ESP marker). It returns nil once in is
// Done, or the error that ended the negotiation.
func Dial(ctx context.Context, in *Initiator, c500, c4500 *net.UDPConn, o DialOptions) error {
	if o.Retransmit.Tries == 0 {
		o.Retransmit = DefaultRetransmit
	}
	rx := make(chan datagram, 16)
	defer readIKE(ctx, c500, c4500, rx, nil)()

	req, err := in.Start()
	if err != nil {
		return err
	}
	float := false
	remote := in.cfg.Remote
	send := func() error {
		if o.Observe != nil {
			o.Observe(true, req)
		}
		return sendIKE(c500, c4500, float, req, remote)
	}
	tries, wait := 0, o.Retransmit.Timeout
	if err := send(); err != nil {
		return fmt.Errorf("ike: send to %s: %w", remote, err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if tries++; tries > o.Retransmit.Tries {
				return fmt.Errorf("%w (%s to %s)", ErrTimeout, in.stateName(), remote)
			}
			wait = time.Duration(float64(wait) * o.Retransmit.Base)
			if err := send(); err != nil {
				return fmt.Errorf("ike: send to %s: %w", remote, err)
			}
			timer.Reset(wait)
		case d := <-rx:
			if d.remote.Addr().Unmap() != remote.Addr().Unmap() || d.natt != float {
				continue
			}
			if o.Observe != nil {
				o.Observe(false, d.b)
			}
			next, err := in.Handle(d.b)
			if errors.Is(err, ErrIgnored) {
				continue
			}
			var pe *PeerError
			if errors.As(err, &pe) && pe.IKEEstablished {
				// Only the CHILD_SA failed: the IKE SA is not kept, so the
				// peer is told (one try; the error stays the peer's).
				if del, derr := in.DeleteRequest(); derr == nil && del != nil {
					req = del
					send()
				}
			}
			if err != nil {
				return err
			}
			if in.Done() {
				return nil
			}
			if in.Float() && !float {
				if c4500 == nil {
					return errors.New("ike: a NAT was detected (or encap forced) but no port 4500 socket was given")
				}
				float = true
				remote = netip.AddrPortFrom(remote.Addr(), NATTPort)
				local := c4500.LocalAddr().(*net.UDPAddr).AddrPort()
				in.SetEndpoints(netip.AddrPortFrom(in.cfg.Local.Addr(), local.Port()), remote)
			}
			req, tries, wait = next, 0, o.Retransmit.Timeout
			if err := send(); err != nil {
				return fmt.Errorf("ike: send to %s: %w", remote, err)
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(wait)
		}
	}
}

func (in *Initiator) stateName() string {
	switch in.state {
	case stInit:
		return "IKE_SA_INIT"
	case stAuth:
		return "IKE_AUTH"
	}
	return "exchange"
}
