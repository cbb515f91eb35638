package exchange

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/keelinit/keel/ike/wire"
)

var (
	pairI = netip.MustParseAddrPort("192.0.2.1:500")
	pairR = netip.MustParseAddrPort("192.0.2.2:500")
)

func pairConfigs(psk string) (Config, *ResponderConfig) {
	ic := Config{
		Local: pairI, Remote: pairR,
		LocalID:  Identity{wire.ID_FQDN, []byte("i.example")},
		RemoteID: Identity{wire.ID_FQDN, []byte("r.example")},
		PSK:      []byte(psk),
		TSi:      []wire.Selector{prefixSelector("10.1.0.0/16")},
		TSr:      []wire.Selector{prefixSelector("10.2.0.0/16")},
	}
	rc := &ResponderConfig{
		LocalID: Identity{wire.ID_FQDN, []byte("r.example")},
		PSK: func(id Identity) ([]byte, bool) {
			if id.String() == "i.example" {
				return []byte("shared-secret-of-i-and-r"), true
			}
			return nil, false
		},
		LocalTS:  []wire.Selector{prefixSelector("10.2.3.0/24")},
		RemoteTS: []wire.Selector{prefixSelector("10.1.0.0/16")},
	}
	return ic, rc
}

// runPair drives an Initiator against a Server in memory. Each request is
// delivered twice (a retransmission): the second must get the very same
// reply from the reply cache, and must not change the responder's state.
func runPair(t *testing.T, ic Config, srv *Server) (*Initiator, error) {
	t.Helper()
	in, err := NewInitiator(ic)
	if err != nil {
		t.Fatal(err)
	}
	req, err := in.Start()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		reply := srv.HandleDatagram(req, pairR, pairI)
		if reply == nil {
			return in, errors.New("no reply")
		}
		if again := srv.HandleDatagram(req, pairR, pairI); !bytes.Equal(again, reply) && !isPlainNotify(reply) {
			t.Fatalf("retransmitted request %d got a different reply", i)
		}
		next, err := in.Handle(reply)
		if err != nil {
			return in, err
		}
		if in.Done() {
			return in, nil
		}
		req = next
	}
	t.Fatal("no completion after 10 round trips")
	return nil, nil
}

// isPlainNotify: an IKE_SA_INIT refusal keeps no state, so a repeat gets a
// fresh (equal-content) answer rather than a cached one.
func isPlainNotify(b []byte) bool {
	m, err := wire.Decode(b)
	return err == nil && len(m.Payloads) == 1 && m.Payloads[0].Type() == wire.PayloadN
}

func TestPairEstablish(t *testing.T) {
	ic, rc := pairConfigs("shared-secret-of-i-and-r")
	var got [][2]any
	srv := &Server{Config: rc, OnEstablished: func(ike *IKESA, c *ChildSA) { got = append(got, [2]any{ike, c}) }}
	in, err := runPair(t, ic, srv)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("OnEstablished ran %d times", len(got))
	}
	ike, child := in.Result()
	rike, rchild := got[0][0].(*IKESA), got[0][1].(*ChildSA)
	if ike.SPIi != rike.SPIi || ike.SPIr != rike.SPIr || !bytes.Equal(ike.Keys.SKd, rike.Keys.SKd) {
		t.Fatal("IKE SAs differ")
	}
	if child.OutSPI != rchild.InSPI || child.InSPI != rchild.OutSPI ||
		!bytes.Equal(child.OutEncr, rchild.InEncr) || !bytes.Equal(child.InEncr, rchild.OutEncr) {
		t.Fatal("CHILD_SA keys or SPIs do not pair up")
	}
	if bytes.Equal(child.OutEncr, child.InEncr) {
		t.Fatal("both directions share a key")
	}
	want := prefixSelector("10.2.3.0/24")
	if len(child.RemoteTS) != 1 || child.RemoteTS[0] != want || rchild.LocalTS[0] != want {
		t.Fatalf("TSr not narrowed to 10.2.3.0/24: %v / %v", child.RemoteTS, rchild.LocalTS)
	}
	if rike.RemoteID.String() != "i.example" || ike.RemoteID.String() != "r.example" {
		t.Fatalf("identities %s / %s", rike.RemoteID, ike.RemoteID)
	}
}

func TestPairFailures(t *testing.T) {
	gcm := func(bits uint16, dh uint16) []wire.Proposal {
		return []wire.Proposal{{Transforms: []wire.Transform{
			wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, bits),
			{Type: wire.TransformPRF, ID: wire.PRF_HMAC_SHA2_256}, {Type: wire.TransformDH, ID: dh}}}}
	}
	tests := []struct {
		name   string
		edit   func(*Config, *ResponderConfig)
		notify wire.NotifyType
		ikeUp  bool
	}{
		{"wrong psk", func(c *Config, _ *ResponderConfig) { c.PSK = []byte("not it") }, wire.AUTHENTICATION_FAILED, false},
		{"unknown identity", func(c *Config, _ *ResponderConfig) { c.LocalID = Identity{wire.ID_FQDN, []byte("x.example")} }, wire.AUTHENTICATION_FAILED, false},
		{"no ike proposal", func(c *Config, r *ResponderConfig) { c.IKE, r.IKE = gcm(128, wire.DH_X25519), gcm(256, wire.DH_X25519) }, wire.NO_PROPOSAL_CHOSEN, false},
		{"no esp proposal", func(c *Config, r *ResponderConfig) {
			r.ESP = []wire.Proposal{{Transforms: []wire.Transform{{Type: wire.TransformENCR, ID: wire.ENCR_CHACHA20_POLY1305}, {Type: wire.TransformESN, ID: wire.ESN_NO}}}}
		}, wire.NO_PROPOSAL_CHOSEN, true},
		{"ts unacceptable", func(c *Config, _ *ResponderConfig) { c.TSr = []wire.Selector{prefixSelector("10.9.0.0/16")} }, wire.TS_UNACCEPTABLE, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ic, rc := pairConfigs("shared-secret-of-i-and-r")
			tc.edit(&ic, rc)
			srv := &Server{Config: rc}
			_, err := runPair(t, ic, srv)
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Notify != tc.notify || pe.IKEEstablished != tc.ikeUp {
				t.Fatalf("got %v (%+v), want %v with IKE SA up %v", err, pe, tc.notify, tc.ikeUp)
			}
			for _, r := range srv.Responders() {
				if r.Done() && r.child != nil {
					t.Fatal("responder has a CHILD_SA after a failure")
				}
			}
		})
	}
}

// TestPairInvalidKE: the initiator's first KE is X25519, the responder
// accepts only ECP-256; INVALID_KE_PAYLOAD makes the initiator retry.
func TestPairInvalidKE(t *testing.T) {
	ic, rc := pairConfigs("shared-secret-of-i-and-r")
	rc.IKE = []wire.Proposal{{Transforms: []wire.Transform{
		wire.WithKeyLength(wire.TransformENCR, wire.ENCR_AES_GCM_16, 256),
		{Type: wire.TransformPRF, ID: wire.PRF_HMAC_SHA2_256}, {Type: wire.TransformDH, ID: wire.DH_ECP256}}}}
	in, err := runPair(t, ic, &Server{Config: rc})
	if err != nil {
		t.Fatal(err)
	}
	if ike, _ := in.Result(); ike.Suite.DH != wire.DH_ECP256 {
		t.Fatalf("DH group %d", ike.Suite.DH)
	}
}
