package exchange

import (
	"fmt"
	"net/netip"

	"github.com/keelinit/keel/ike/keys"
	"github.com/keelinit/keel/ike/wire"
)

// IKESA is an established IKE SA. It owns key material: Zero wipes it, and
// String prints none of it.
type IKESA struct {
	SPIi, SPIr wire.SPI
	Suite      keys.Suite
	Keys       *keys.IKEKeys
	// Out protects what this side sends, In opens what it receives.
	Out, In *keys.Protector
	// Local and Remote are the endpoints after a float to port 4500.
	Local, Remote     netip.AddrPort
	LocalID, RemoteID Identity
	// NATLocal: a NAT in front of this side; NATRemote: in front of the
	// peer (§2.23). Encap: ESP goes in UDP (a NAT, or forced).
	NATLocal, NATRemote, Encap bool
	// NextID is the message ID of the next request this side sends.
	NextID uint32
}

// newIKESA derives the keys of a new IKE SA and its SK protectors for the
// initiator's or the responder's side.
func newIKESA(s keys.Suite, ni, nr, gir []byte, spii, spir wire.SPI, initiator bool) (*IKESA, error) {
	k, err := keys.DeriveIKE(s, ni, nr, gir, spii, spir)
	if err != nil {
		return nil, err
	}
	ike := &IKESA{SPIi: spii, SPIr: spir, Suite: s, Keys: k}
	outE, outA, inE, inA := k.SKei, k.SKai, k.SKer, k.SKar
	if !initiator {
		outE, outA, inE, inA = inE, inA, outE, outA
	}
	if ike.Out, err = keys.NewProtector(s, outE, outA); err == nil {
		ike.In, err = keys.NewProtector(s, inE, inA)
	}
	if err != nil {
		ike.Zero()
		return nil, err
	}
	return ike, nil
}

// Zero wipes every key of the IKE SA.
func (s *IKESA) Zero() {
	if s == nil {
		return
	}
	s.Keys.Zero()
	if s.Out != nil {
		s.Out.Zero()
	}
	if s.In != nil {
		s.In.Zero()
	}
}

// String summarises the SA without key material.
func (s *IKESA) String() string {
	return fmt.Sprintf("IKE_SA %s_i %s_r %s[%s]...%s[%s] encr %d/%d prf %d dh %d nat(local %v remote %v) keys redacted",
		s.SPIi, s.SPIr, s.Local, s.LocalID, s.Remote, s.RemoteID, s.Suite.Encr.ID, s.Suite.Encr.KeyBits,
		s.Suite.PRF.ID, s.Suite.DH, s.NATLocal, s.NATRemote)
}

// GoString is String.
func (s *IKESA) GoString() string { return s.String() }

// ChildSA is a negotiated pair of ESP SAs. It owns key material.
type ChildSA struct {
	// InSPI is the SPI this side chose (it receives with it); OutSPI the
	// peer's (this side sends with it).
	InSPI, OutSPI uint32
	Suite         keys.Suite
	// OutEncr/OutInteg key what this side sends, InEncr/InInteg what it
	// receives (the AEAD salt at the end of the Encr keys).
	OutEncr, OutInteg, InEncr, InInteg []byte
	Transport                          bool
	// LocalTS and RemoteTS are the narrowed selectors of this side and the peer.
	LocalTS, RemoteTS []wire.Selector
	// Local and Remote are the ESP endpoints; with Encap, their ports are
	// the UDP ports of ESP-in-UDP.
	Local, Remote netip.AddrPort
	Encap         bool
}

// Zero wipes the CHILD_SA's keys.
func (c *ChildSA) Zero() {
	if c == nil {
		return
	}
	for _, b := range [][]byte{c.OutEncr, c.OutInteg, c.InEncr, c.InInteg} {
		clear(b)
	}
}

// String summarises the CHILD_SA without key material.
func (c *ChildSA) String() string {
	mode := "TUNNEL"
	if c.Transport {
		mode = "TRANSPORT"
	}
	return fmt.Sprintf("CHILD_SA %08x_i %08x_o %s encr %d/%d integ %d esn %v %v === %v keys redacted",
		c.InSPI, c.OutSPI, mode, c.Suite.Encr.ID, c.Suite.Encr.KeyBits, c.Suite.Integ.ID, c.Suite.ESN, c.LocalTS, c.RemoteTS)
}

// GoString is String.
func (c *ChildSA) GoString() string { return c.String() }
