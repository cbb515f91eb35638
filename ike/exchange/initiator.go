package exchange

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/keelinit/keel/ike/keys"
	"github.com/keelinit/keel/ike/wire"
)

// ErrIgnored is what Handle returns for a datagram that is not the
// awaited response (another SA, a stale message ID, a request, or one
// failing its integrity check): the caller keeps waiting (§2.21.2).
var ErrIgnored = errors.New("ike: message ignored")

// PeerError is an error notification the responder sent.
type PeerError struct {
	Exchange wire.ExchangeType
	Notify   wire.NotifyType
	// IKEEstablished is set when the IKE SA was authenticated and only
	// its first CHILD_SA failed (§1.2: the IKE SA stays up).
	IKEEstablished bool
}

// Error returns "ike: peer answered IKE_AUTH with TS_UNACCEPTABLE".
func (e *PeerError) Error() string {
	return fmt.Sprintf("ike: peer answered %s with %s", e.Exchange, e.Notify)
}

type istate uint8

const (
	stNew istate = iota
	stInit
	stAuth
	stDone
	stFailed
)

// maxInitRetries bounds the COOKIE and INVALID_KE_PAYLOAD restarts.
const maxInitRetries = 3

// Initiator runs IKE_SA_INIT then IKE_AUTH as the original initiator.
// It is not safe for concurrent use.
type Initiator struct {
	cfg      Config
	psk      []byte
	state    istate
	spii     wire.SPI
	spir     wire.SPI
	group    uint16
	dh       keys.DH
	ni, nr   []byte
	cookie   []byte
	retries  int
	req1     []byte // our IKE_SA_INIT request (RealMessage1)
	resp1    []byte // its response (RealMessage2)
	ikeOffer []wire.Proposal
	espOffer []wire.Proposal
	inSPI    uint32
	ike      *IKESA
	child    *ChildSA
	request  []byte // the outstanding request, for retransmission
}

// NewInitiator checks cfg and returns an Initiator for it.
func NewInitiator(cfg Config) (*Initiator, error) {
	if !cfg.Local.IsValid() || !cfg.Remote.IsValid() || cfg.Local.Addr().IsUnspecified() {
		return nil, errors.New("ike: initiator needs concrete local and remote addresses")
	}
	if len(cfg.PSK) == 0 {
		return nil, errors.New("ike: initiator needs a pre-shared key")
	}
	if cfg.LocalID.Type == 0 || len(cfg.TSi) == 0 || len(cfg.TSr) == 0 {
		return nil, errors.New("ike: initiator needs a local identity and traffic selectors")
	}
	if len(cfg.IKE) == 0 {
		cfg.IKE = DefaultIKE()
	}
	if len(cfg.ESP) == 0 {
		cfg.ESP = DefaultESP()
	}
	g, err := firstDH(cfg.IKE)
	if err != nil {
		return nil, err
	}
	in := &Initiator{cfg: cfg, psk: append([]byte(nil), cfg.PSK...), group: g}
	in.cfg.PSK = nil
	if _, err := io.ReadFull(cfg.rand(), in.spii[:]); err != nil {
		return nil, err
	}
	var spi [4]byte
	for binary.BigEndian.Uint32(spi[:]) < 256 {
		if _, err := io.ReadFull(cfg.rand(), spi[:]); err != nil {
			return nil, err
		}
	}
	in.inSPI = binary.BigEndian.Uint32(spi[:])
	for i, p := range cfg.IKE {
		p.Num, p.Protocol, p.SPI = uint8(i+1), wire.ProtoIKE, nil
		in.ikeOffer = append(in.ikeOffer, p)
	}
	for i, p := range cfg.ESP {
		p.Num, p.Protocol, p.SPI = uint8(i+1), wire.ProtoESP, spi[:]
		in.espOffer = append(in.espOffer, p)
	}
	return in, nil
}

// Start returns the IKE_SA_INIT request to send to Config.Remote.
func (in *Initiator) Start() ([]byte, error) {
	if in.state != stNew {
		return nil, errors.New("ike: initiator already started")
	}
	in.ni = make([]byte, 32)
	if _, err := io.ReadFull(in.cfg.rand(), in.ni); err != nil {
		return nil, err
	}
	if err := in.buildInit(); err != nil {
		return nil, err
	}
	in.state = stInit
	return in.request, nil
}

func (in *Initiator) buildInit() error {
	if in.dh != nil {
		in.dh.Zero()
	}
	dh, err := keys.NewDH(in.group, in.cfg.rand())
	if err != nil {
		return err
	}
	in.dh = dh
	var ps []wire.Payload
	if in.cookie != nil {
		ps = append(ps, &wire.Notify{Code: wire.COOKIE, Data: in.cookie})
	}
	src := NATHash(in.spii, wire.SPI{}, in.cfg.Local)
	if in.cfg.ForceEncap {
		// A hash that cannot match makes the peer see a NAT in front of
		// this side, as strongSwan's encap=yes does.
		src = make([]byte, len(src))
		if _, err := io.ReadFull(in.cfg.rand(), src); err != nil {
			return err
		}
	}
	ps = append(ps,
		&wire.SA{Proposals: in.ikeOffer},
		&wire.KE{Group: in.group, Data: dh.Public()},
		&wire.Nonce{Data: in.ni},
		&wire.Notify{Code: wire.NAT_DETECTION_SOURCE_IP, Data: src},
		&wire.Notify{Code: wire.NAT_DETECTION_DESTINATION_IP, Data: NATHash(in.spii, wire.SPI{}, in.cfg.Remote)},
	)
	m := &wire.Message{Header: wire.Header{SPIi: in.spii, Version: wire.Version20, Exchange: wire.IKE_SA_INIT, Flags: wire.FlagInitiator}, Payloads: ps}
	b, err := m.Encode()
	if err != nil {
		return err
	}
	in.req1, in.request = b, b
	return nil
}

// Request returns the outstanding request, to retransmit it unchanged (§2.1).
func (in *Initiator) Request() []byte { return in.request }

// Float reports whether, after IKE_SA_INIT, the exchanges continue on UDP
// port 4500 with the non-ESP marker (§2.23: a NAT was detected, or ESP
// encapsulation is forced).
func (in *Initiator) Float() bool {
	return in.ike != nil && in.ike.Encap
}

// Done reports whether the IKE SA and its CHILD_SA are established.
func (in *Initiator) Done() bool { return in.state == stDone }

// Result returns the IKE SA and the CHILD_SA once Done. The caller owns
// them (and their keys) from then on.
func (in *Initiator) Result() (*IKESA, *ChildSA) { return in.ike, in.child }

// SetEndpoints records the endpoints after a float, for the CHILD_SA's
// ESP-in-UDP ports and the IKE SA's address.
func (in *Initiator) SetEndpoints(local, remote netip.AddrPort) {
	if in.ike != nil {
		in.ike.Local, in.ike.Remote = local, remote
	}
}

// Zero wipes every secret the Initiator holds; the results returned by
// Result are the caller's to wipe.
func (in *Initiator) Zero() {
	clear(in.psk)
	clear(in.ni)
	clear(in.nr)
	if in.dh != nil {
		in.dh.Zero()
	}
	if in.state != stDone {
		in.ike.Zero()
		in.child.Zero()
	}
}

// Handle processes one datagram received from the responder (without the
// non-ESP marker). It returns the next request to send, nil when the
// exchanges are complete (Done), ErrIgnored for a datagram to disregard,
// or the error that ended the negotiation (a *PeerError for a notification).
func (in *Initiator) Handle(raw []byte) ([]byte, error) {
	h, _, err := wire.DecodeHeader(raw)
	if err != nil || !h.Response() || h.Initiator() || h.SPIi != in.spii {
		return nil, ErrIgnored
	}
	switch {
	case in.state == stInit && h.Exchange == wire.IKE_SA_INIT && h.MessageID == 0:
		out, err := in.handleInit(raw)
		if err != nil && !errors.Is(err, ErrIgnored) {
			in.fail()
		}
		return out, err
	case in.state == stAuth && h.Exchange == wire.IKE_AUTH && h.MessageID == 1 && h.SPIr == in.spir:
		err := in.handleAuth(raw)
		if err != nil && !errors.Is(err, ErrIgnored) {
			in.fail()
		}
		return nil, err
	}
	return nil, ErrIgnored
}

func (in *Initiator) fail() {
	in.state = stFailed
	in.request = nil
}

func (in *Initiator) handleInit(raw []byte) ([]byte, error) {
	m, err := wire.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("ike: IKE_SA_INIT response: %w", err)
	}
	if c := wire.Notifies(m.Payloads, wire.COOKIE); len(c) > 0 {
		if in.retries++; in.retries > maxInitRetries || len(c[0].Data) < 1 || len(c[0].Data) > 64 {
			return nil, errors.New("ike: IKE_SA_INIT: responder keeps asking for a cookie")
		}
		in.cookie = c[0].Data
		if err := in.buildInit(); err != nil {
			return nil, err
		}
		return in.request, nil
	}
	if ke := wire.Notifies(m.Payloads, wire.INVALID_KE_PAYLOAD); len(ke) > 0 {
		if len(ke[0].Data) != 2 {
			return nil, errors.New("ike: IKE_SA_INIT: INVALID_KE_PAYLOAD without a group")
		}
		g := binary.BigEndian.Uint16(ke[0].Data)
		if in.retries++; in.retries > maxInitRetries || g == in.group || !keys.DHSupported(g) || !offersDH(in.ikeOffer, g) {
			return nil, fmt.Errorf("ike: IKE_SA_INIT: responder wants DH group %d, not offered", g)
		}
		in.group = g
		if err := in.buildInit(); err != nil {
			return nil, err
		}
		return in.request, nil
	}
	if err := errorNotify(m.Payloads, wire.IKE_SA_INIT, false); err != nil {
		return nil, err
	}
	if m.SPIr.IsZero() {
		return nil, errors.New("ike: IKE_SA_INIT response with a zero responder SPI")
	}
	sa, _ := wire.Find(m.Payloads, wire.PayloadSA).(*wire.SA)
	ke, _ := wire.Find(m.Payloads, wire.PayloadKE).(*wire.KE)
	nr, _ := wire.Find(m.Payloads, wire.PayloadNonce).(*wire.Nonce)
	if sa == nil || ke == nil || nr == nil {
		return nil, errors.New("ike: IKE_SA_INIT response lacks SA, KE or Nonce")
	}
	if len(sa.Proposals) != 1 || !offered(&sa.Proposals[0], in.ikeOffer) || len(sa.Proposals[0].SPI) != 0 {
		return nil, errors.New("ike: IKE_SA_INIT response chose a proposal that was not offered")
	}
	suite, err := keys.FromProposal(&sa.Proposals[0])
	if err != nil {
		return nil, err
	}
	if suite.DH != in.group || ke.Group != in.group {
		return nil, fmt.Errorf("ike: IKE_SA_INIT response with DH group %d/%d, sent %d", suite.DH, ke.Group, in.group)
	}
	in.spir = m.SPIr
	in.nr = nr.Data
	in.resp1 = raw
	gir, err := in.dh.Shared(ke.Data)
	if err != nil {
		return nil, err
	}
	in.dh.Zero()
	ike, err := newIKESA(suite, in.ni, in.nr, gir, in.spii, in.spir, true)
	clear(gir)
	if err != nil {
		return nil, err
	}
	ike.Local, ike.Remote, ike.LocalID, ike.NextID = in.cfg.Local, in.cfg.Remote, in.cfg.LocalID, 1
	in.ike = ike
	// NAT detection (§2.23), with the responder SPI of this response.
	ike.NATLocal, ike.NATRemote = detectNAT(m.Payloads, in.spii, in.spir, in.cfg.Local, in.cfg.Remote)
	ike.Encap = ike.NATLocal || ike.NATRemote || in.cfg.ForceEncap
	if err := in.buildAuth(); err != nil {
		return nil, err
	}
	in.state = stAuth
	return in.request, nil
}

func offersDH(ps []wire.Proposal, g uint16) bool {
	for _, p := range ps {
		for _, t := range p.Transforms {
			if t.Type == wire.TransformDH && t.ID == g {
				return true
			}
		}
	}
	return false
}

// errorNotify returns a *PeerError for the first error notification of ps.
func errorNotify(ps []wire.Payload, x wire.ExchangeType, ikeUp bool) error {
	for _, p := range ps {
		if n, ok := p.(*wire.Notify); ok && n.Code.IsError() {
			return &PeerError{Exchange: x, Notify: n.Code, IKEEstablished: ikeUp}
		}
	}
	return nil
}

func (in *Initiator) buildAuth() error {
	s := in.ike.Suite
	idi := &wire.ID{IDType: in.cfg.LocalID.Type, Data: in.cfg.LocalID.Data}
	ps := []wire.Payload{idi}
	if in.cfg.RemoteID.Type != 0 {
		ps = append(ps, &wire.ID{Responder: true, IDType: in.cfg.RemoteID.Type, Data: in.cfg.RemoteID.Data})
	}
	auth := pskAuth(s.PRF, in.psk, in.req1, in.nr, in.ike.Keys.SKpi, idi.Body())
	ps = append(ps, &wire.Auth{Method: wire.AuthSharedKey, Data: auth}, &wire.Notify{Code: wire.INITIAL_CONTACT})
	if in.cfg.Transport {
		ps = append(ps, &wire.Notify{Code: wire.USE_TRANSPORT_MODE})
	}
	ps = append(ps, &wire.SA{Proposals: in.espOffer}, &wire.TS{Selectors: in.cfg.TSi}, &wire.TS{Responder: true, Selectors: in.cfg.TSr})
	h := wire.Header{SPIi: in.spii, SPIr: in.spir, Version: wire.Version20, Exchange: wire.IKE_AUTH, Flags: wire.FlagInitiator, MessageID: 1}
	b, err := in.ike.Out.SealMessage(h, ps)
	clear(auth)
	if err != nil {
		return err
	}
	in.request = b
	return nil
}

func (in *Initiator) handleAuth(raw []byte) error {
	m, err := in.ike.In.OpenMessage(raw)
	if errors.Is(err, keys.ErrIntegrity) {
		return ErrIgnored
	}
	if err != nil {
		return fmt.Errorf("ike: IKE_AUTH response: %w", err)
	}
	idr, _ := wire.Find(m.Payloads, wire.PayloadIDr).(*wire.ID)
	auth, _ := wire.Find(m.Payloads, wire.PayloadAUTH).(*wire.Auth)
	if idr == nil || auth == nil {
		if err := errorNotify(m.Payloads, wire.IKE_AUTH, false); err != nil {
			return err
		}
		return errors.New("ike: IKE_AUTH response lacks IDr or AUTH")
	}
	s := in.ike.Suite
	if auth.Method != wire.AuthSharedKey {
		return fmt.Errorf("ike: responder authenticates with method %d, configured PSK", auth.Method)
	}
	want := pskAuth(s.PRF, in.psk, in.resp1, in.ni, in.ike.Keys.SKpr, idr.Body())
	ok := authEqual(want, auth.Data)
	clear(want)
	if !ok {
		return errors.New("ike: IKE_AUTH: the responder's AUTH does not verify (wrong pre-shared key?)")
	}
	got := Identity{idr.IDType, idr.Data}
	if in.cfg.RemoteID.Type != 0 && (got.Type != in.cfg.RemoteID.Type || !bytes.Equal(got.Data, in.cfg.RemoteID.Data)) {
		return fmt.Errorf("ike: IKE_AUTH: responder identity %s, configured %s", got, in.cfg.RemoteID)
	}
	in.ike.RemoteID = got
	in.ike.NextID = 2
	if err := errorNotify(m.Payloads, wire.IKE_AUTH, true); err != nil {
		return err
	}
	child, err := in.childFrom(m.Payloads)
	if err != nil {
		return err
	}
	in.child = child
	in.state = stDone
	in.request = nil
	return nil
}

func (in *Initiator) childFrom(ps []wire.Payload) (*ChildSA, error) {
	sa, _ := wire.Find(ps, wire.PayloadSA).(*wire.SA)
	tsi, _ := wire.Find(ps, wire.PayloadTSi).(*wire.TS)
	tsr, _ := wire.Find(ps, wire.PayloadTSr).(*wire.TS)
	if sa == nil || tsi == nil || tsr == nil {
		return nil, errors.New("ike: IKE_AUTH response lacks SA, TSi or TSr")
	}
	if len(sa.Proposals) != 1 || sa.Proposals[0].Protocol != wire.ProtoESP || !offered(&sa.Proposals[0], in.espOffer) {
		return nil, errors.New("ike: IKE_AUTH response chose an ESP proposal that was not offered")
	}
	p := &sa.Proposals[0]
	suite, err := keys.FromProposal(p)
	if err != nil {
		return nil, err
	}
	if suite.DH != wire.DH_NONE {
		return nil, errors.New("ike: IKE_AUTH response chose a DH group for the first CHILD_SA")
	}
	out := binary.BigEndian.Uint32(p.SPI)
	if out < 256 {
		return nil, fmt.Errorf("ike: responder chose the reserved SPI %d", out)
	}
	if !allWithin(tsi.Selectors, in.cfg.TSi) || !allWithin(tsr.Selectors, in.cfg.TSr) {
		return nil, errors.New("ike: IKE_AUTH response widened the traffic selectors")
	}
	transport := len(wire.Notifies(ps, wire.USE_TRANSPORT_MODE)) > 0
	if transport && !in.cfg.Transport {
		return nil, errors.New("ike: responder chose transport mode, tunnel was requested")
	}
	km, err := keys.DeriveChild(in.ike.Suite.PRF, in.ike.Keys.SKd, suite, nil, in.ni, in.nr)
	if err != nil {
		return nil, err
	}
	c := &ChildSA{InSPI: in.inSPI, OutSPI: out, Suite: suite, Transport: transport,
		OutEncr: km.EncrI, OutInteg: km.IntegI, InEncr: km.EncrR, InInteg: km.IntegR,
		LocalTS: tsi.Selectors, RemoteTS: tsr.Selectors, Local: in.ike.Local, Remote: in.ike.Remote, Encap: in.ike.Encap}
	return c, nil
}

// DeleteRequest returns an INFORMATIONAL request deleting the IKE SA
// (§1.4.1), for an IKE SA that is authenticated but will not be used (its
// first CHILD_SA failed), or nil if there is no authenticated IKE SA. The
// request takes the next message ID.
func (in *Initiator) DeleteRequest() ([]byte, error) {
	if in.ike == nil || in.ike.NextID < 2 || in.ike.Out == nil {
		return nil, nil
	}
	h := wire.Header{SPIi: in.spii, SPIr: in.spir, Version: wire.Version20, Exchange: wire.INFORMATIONAL,
		Flags: wire.FlagInitiator, MessageID: in.ike.NextID}
	b, err := in.ike.Out.SealMessage(h, []wire.Payload{&wire.Delete{Protocol: wire.ProtoIKE}})
	if err != nil {
		return nil, err
	}
	in.ike.NextID++
	return b, nil
}
