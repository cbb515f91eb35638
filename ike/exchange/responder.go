package exchange

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/keelinit/keel/ike/keys"
	"github.com/keelinit/keel/ike/wire"
)

// ResponderConfig is what the responder side of a connection needs.
type ResponderConfig struct {
	LocalID Identity
	// PSK returns the pre-shared key shared with the initiator that
	// identifies itself as id (IDi), and false for an unknown identity.
	// The responder copies the key and wipes its copy.
	PSK func(id Identity) ([]byte, bool)
	// IKE and ESP are the acceptable proposals in this side's order of
	// preference (Num, Protocol and SPI are ignored).
	IKE, ESP []wire.Proposal
	// LocalTS and RemoteTS are the configured selectors the peer's TSr
	// and TSi are narrowed to (§2.9).
	LocalTS, RemoteTS []wire.Selector
	// ForceEncap fakes a NAT in front of this side (swanctl encap=yes).
	ForceEncap bool
	Rand       io.Reader
}

func (c *ResponderConfig) rand() io.Reader {
	return (&Config{Rand: c.Rand}).rand()
}

type rstate uint8

const (
	rsInit rstate = iota
	rsAuth
	rsDone
	rsFailed
)

// Responder is the responder side of one IKE SA, from its IKE_SA_INIT
// request on. It keeps the message ID window of 1 (§2.3): a request with
// the next ID is processed, a retransmission of the last one is answered
// from the reply cache, anything else is ignored. Not safe for
// concurrent use.
type Responder struct {
	cfg           *ResponderConfig
	local, remote netip.AddrPort
	firstRemote   netip.AddrPort // where IKE_SA_INIT came from
	state         rstate
	spii, spir    wire.SPI
	ni, nr        []byte
	req1, resp1   []byte
	ike           *IKESA
	child         *ChildSA
	err           error // why the negotiation failed, for the log
	handed        bool  // Done was reached: the results belong to the caller

	nextID    uint32
	lastReq   [32]byte // SHA-256 of the last request answered
	lastReply []byte
}

// NewResponder returns the responder for an IKE SA whose first request
// came from remote to local.
func NewResponder(cfg *ResponderConfig, local, remote netip.AddrPort) *Responder {
	return &Responder{cfg: cfg, local: local, remote: remote, firstRemote: remote}
}

// ikeSPIi is the initiator SPI of the SA, or of h before IKE_SA_INIT was answered.
func (r *Responder) ikeSPIi(h wire.Header) wire.SPI {
	if r.spii.IsZero() {
		return h.SPIi
	}
	return r.spii
}

// Done reports whether the IKE SA and its first CHILD_SA are established.
func (r *Responder) Done() bool { return r.state == rsDone }

// Failed reports whether the negotiation ended without an IKE SA, and why.
func (r *Responder) Failed() (bool, error) { return r.state == rsFailed, r.err }

// Result returns the IKE SA (nil before IKE_SA_INIT completed) and the
// CHILD_SA (nil unless Done). The caller owns their keys once Done.
func (r *Responder) Result() (*IKESA, *ChildSA) { return r.ike, r.child }

// SPIr returns the responder SPI, zero before IKE_SA_INIT was answered.
func (r *Responder) SPIr() wire.SPI { return r.spir }

// Zero wipes the responder's secrets; once Done, the results returned by
// Result are the caller's to wipe.
func (r *Responder) Zero() {
	clear(r.ni)
	clear(r.nr)
	if !r.handed {
		r.ike.Zero()
		r.child.Zero()
	}
}

// Handle processes a request from remote to local (after a float, the
// port 4500 endpoints, without the non-ESP marker) and returns the
// response to send back, or ErrIgnored for a datagram to disregard.
func (r *Responder) Handle(raw []byte, local, remote netip.AddrPort) ([]byte, error) {
	h, _, err := wire.DecodeHeader(raw)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) && we.Notify == wire.INVALID_MAJOR_VERSION && r.state == rsInit {
			r.fail(err)
			return r.notifyPlain(h, wire.INVALID_MAJOR_VERSION, nil)
		}
		return nil, ErrIgnored
	}
	if h.Response() || !h.Initiator() {
		return nil, ErrIgnored
	}
	if r.lastReply != nil && h.MessageID+1 == r.nextID {
		// A retransmission (§2.1) gets the cached reply; for IKE_SA_INIT
		// it still carries a zero responder SPI.
		if sha256.Sum256(raw) == r.lastReq {
			return r.lastReply, nil
		}
		return nil, ErrIgnored
	}
	if r.state != rsInit && (h.SPIi != r.spii || h.SPIr != r.spir) {
		return nil, ErrIgnored
	}
	if h.MessageID != r.nextID || r.state == rsFailed {
		return nil, ErrIgnored
	}
	var reply []byte
	switch {
	case r.state == rsInit && h.Exchange == wire.IKE_SA_INIT:
		reply, err = r.handleInit(h, raw, local, remote)
	case r.state == rsAuth && h.Exchange == wire.IKE_AUTH:
		r.local, r.remote = local, remote
		if r.ike != nil {
			r.ike.Local, r.ike.Remote = local, remote
		}
		reply, err = r.handleAuth(h, raw)
	case r.state == rsDone && h.Exchange == wire.INFORMATIONAL:
		reply, err = r.handleInformational(h, raw)
	default:
		return nil, ErrIgnored
	}
	if err != nil {
		return nil, err
	}
	r.lastReq, r.lastReply = sha256.Sum256(raw), reply
	r.nextID++
	if r.state == rsDone {
		r.handed = true
	}
	return reply, nil
}

func (r *Responder) fail(err error) {
	r.state = rsFailed
	r.err = err
}

// notifyPlain is an unprotected IKE_SA_INIT error response (§2.21.1).
func (r *Responder) notifyPlain(h wire.Header, n wire.NotifyType, data []byte) ([]byte, error) {
	m := &wire.Message{Header: wire.Header{SPIi: h.SPIi, Version: wire.Version20, Exchange: wire.IKE_SA_INIT,
		Flags: wire.FlagResponse, MessageID: h.MessageID}, Payloads: []wire.Payload{&wire.Notify{Code: n, Data: data}}}
	return m.Encode()
}

func (r *Responder) handleInit(h wire.Header, raw []byte, local, remote netip.AddrPort) ([]byte, error) {
	m, err := wire.Decode(raw)
	if err != nil {
		r.fail(err)
		var we *wire.Error
		if errors.As(err, &we) {
			return r.notifyPlain(h, we.Notify, we.Data)
		}
		return nil, err
	}
	sa, _ := wire.Find(m.Payloads, wire.PayloadSA).(*wire.SA)
	ke, _ := wire.Find(m.Payloads, wire.PayloadKE).(*wire.KE)
	ni, _ := wire.Find(m.Payloads, wire.PayloadNonce).(*wire.Nonce)
	if sa == nil || ke == nil || ni == nil || !h.SPIr.IsZero() {
		r.fail(errors.New("ike: IKE_SA_INIT request lacks SA, KE or Nonce, or has a responder SPI"))
		return r.notifyPlain(h, wire.INVALID_SYNTAX, nil)
	}
	ours := r.cfg.IKE
	if len(ours) == 0 {
		ours = DefaultIKE()
	}
	chosen, suite, ok := choose(ours, sa.Proposals, wire.ProtoIKE)
	if !ok || len(chosen.SPI) != 0 {
		r.fail(errors.New("ike: IKE_SA_INIT: no acceptable IKE proposal"))
		return r.notifyPlain(h, wire.NO_PROPOSAL_CHOSEN, nil)
	}
	if ke.Group != suite.DH {
		// §1.2: the initiator retries with the group chosen. No state kept.
		r.fail(fmt.Errorf("ike: IKE_SA_INIT: KE of group %d, chose %d", ke.Group, suite.DH))
		return r.notifyPlain(h, wire.INVALID_KE_PAYLOAD, binary.BigEndian.AppendUint16(nil, suite.DH))
	}
	dh, err := keys.NewDH(suite.DH, r.cfg.rand())
	if err != nil {
		r.fail(err)
		return nil, err
	}
	defer dh.Zero()
	gir, err := dh.Shared(ke.Data)
	if err != nil {
		r.fail(err)
		return r.notifyPlain(h, wire.INVALID_SYNTAX, nil)
	}
	defer clear(gir)
	r.spii = h.SPIi
	r.nr = make([]byte, 32)
	for r.spir.IsZero() {
		if _, err := io.ReadFull(r.cfg.rand(), r.spir[:]); err != nil {
			return nil, err
		}
	}
	if _, err := io.ReadFull(r.cfg.rand(), r.nr); err != nil {
		return nil, err
	}
	r.ni = append([]byte(nil), ni.Data...)
	ike, err := newIKESA(suite, r.ni, r.nr, gir, r.spii, r.spir, false)
	if err != nil {
		return nil, err
	}
	ike.Local, ike.Remote, ike.LocalID = local, remote, r.cfg.LocalID
	r.ike = ike
	// The request's hashes were made with a zero responder SPI.
	ike.NATLocal, ike.NATRemote = detectNAT(m.Payloads, r.spii, wire.SPI{}, local, remote)
	ike.Encap = ike.NATLocal || ike.NATRemote || r.cfg.ForceEncap
	src := NATHash(r.spii, r.spir, local)
	if r.cfg.ForceEncap {
		if _, err := io.ReadFull(r.cfg.rand(), src); err != nil {
			return nil, err
		}
	}
	resp := &wire.Message{
		Header: wire.Header{SPIi: r.spii, SPIr: r.spir, Version: wire.Version20, Exchange: wire.IKE_SA_INIT, Flags: wire.FlagResponse},
		Payloads: []wire.Payload{
			&wire.SA{Proposals: []wire.Proposal{chosen}},
			&wire.KE{Group: suite.DH, Data: dh.Public()},
			&wire.Nonce{Data: r.nr},
			&wire.Notify{Code: wire.NAT_DETECTION_SOURCE_IP, Data: src},
			&wire.Notify{Code: wire.NAT_DETECTION_DESTINATION_IP, Data: NATHash(r.spii, r.spir, remote)},
		}}
	b, err := resp.Encode()
	if err != nil {
		return nil, err
	}
	r.req1, r.resp1 = append([]byte(nil), raw...), b
	r.state = rsAuth
	return b, nil
}

// protected seals a response of exchange x with ID id.
func (r *Responder) protected(x wire.ExchangeType, id uint32, ps []wire.Payload) ([]byte, error) {
	h := wire.Header{SPIi: r.spii, SPIr: r.spir, Version: wire.Version20, Exchange: x, Flags: wire.FlagResponse, MessageID: id}
	return r.ike.Out.SealMessage(h, ps)
}

func (r *Responder) handleAuth(h wire.Header, raw []byte) ([]byte, error) {
	m, err := r.ike.In.OpenMessage(raw)
	if errors.Is(err, keys.ErrIntegrity) {
		return nil, ErrIgnored
	}
	authFailed := func(err error) ([]byte, error) {
		r.fail(err)
		return r.protected(wire.IKE_AUTH, h.MessageID, []wire.Payload{&wire.Notify{Code: wire.AUTHENTICATION_FAILED}})
	}
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			r.fail(err)
			return r.protected(wire.IKE_AUTH, h.MessageID, []wire.Payload{&wire.Notify{Code: we.Notify, Data: we.Data}})
		}
		return nil, err
	}
	idi, _ := wire.Find(m.Payloads, wire.PayloadIDi).(*wire.ID)
	auth, _ := wire.Find(m.Payloads, wire.PayloadAUTH).(*wire.Auth)
	if idi == nil || auth == nil {
		return authFailed(errors.New("ike: IKE_AUTH request lacks IDi or AUTH (EAP is not supported)"))
	}
	peer := Identity{idi.IDType, idi.Data}
	psk, ok := r.cfg.PSK(peer)
	if !ok || auth.Method != wire.AuthSharedKey {
		return authFailed(fmt.Errorf("ike: IKE_AUTH: no pre-shared key for %s (method %d)", peer, auth.Method))
	}
	psk = append([]byte(nil), psk...)
	defer clear(psk)
	prf := r.ike.Suite.PRF
	want := pskAuth(prf, psk, r.req1, r.nr, r.ike.Keys.SKpi, idi.Body())
	ok = authEqual(want, auth.Data)
	clear(want)
	if !ok {
		return authFailed(fmt.Errorf("ike: IKE_AUTH: %s's AUTH does not verify (wrong pre-shared key?)", peer))
	}
	if idr, _ := wire.Find(m.Payloads, wire.PayloadIDr).(*wire.ID); idr != nil &&
		(idr.IDType != r.cfg.LocalID.Type || !bytes.Equal(idr.Data, r.cfg.LocalID.Data)) {
		return authFailed(fmt.Errorf("ike: IKE_AUTH: %s asks for identity %s, this side is %s", peer, Identity{idr.IDType, idr.Data}, r.cfg.LocalID))
	}
	r.ike.RemoteID = peer
	r.ike.NextID = 0
	idr := &wire.ID{Responder: true, IDType: r.cfg.LocalID.Type, Data: r.cfg.LocalID.Data}
	myAuth := pskAuth(prf, psk, r.resp1, r.ni, r.ike.Keys.SKpr, idr.Body())
	defer clear(myAuth)
	ps := []wire.Payload{idr, &wire.Auth{Method: wire.AuthSharedKey, Data: myAuth}}
	child, childErr := r.childFor(m.Payloads)
	if childErr != nil {
		// §1.2: the IKE SA is up; only the CHILD_SA failed.
		r.state = rsDone
		r.err = childErr
		var pe *PeerError
		if !errors.As(childErr, &pe) {
			return nil, childErr
		}
		return r.protected(wire.IKE_AUTH, h.MessageID, append(ps, &wire.Notify{Code: pe.Notify}))
	}
	ps = append(ps, &wire.SA{Proposals: []wire.Proposal{child.proposal}},
		&wire.TS{Selectors: child.sa.RemoteTS}, &wire.TS{Responder: true, Selectors: child.sa.LocalTS})
	b, err := r.protected(wire.IKE_AUTH, h.MessageID, ps)
	if err != nil {
		child.sa.Zero()
		return nil, err
	}
	r.child = child.sa
	r.state = rsDone
	return b, nil
}

type chosenChild struct {
	proposal wire.Proposal
	sa       *ChildSA
}

// childFor negotiates the first CHILD_SA; a failure is a *PeerError
// naming the notification to answer with.
func (r *Responder) childFor(ps []wire.Payload) (*chosenChild, error) {
	sa, _ := wire.Find(ps, wire.PayloadSA).(*wire.SA)
	tsi, _ := wire.Find(ps, wire.PayloadTSi).(*wire.TS)
	tsr, _ := wire.Find(ps, wire.PayloadTSr).(*wire.TS)
	if sa == nil || tsi == nil || tsr == nil {
		return nil, &PeerError{Exchange: wire.IKE_AUTH, Notify: wire.INVALID_SYNTAX, IKEEstablished: true}
	}
	ours := r.cfg.ESP
	if len(ours) == 0 {
		ours = DefaultESP()
	}
	chosen, suite, ok := choose(ours, sa.Proposals, wire.ProtoESP)
	if !ok || suite.DH != wire.DH_NONE {
		return nil, &PeerError{Exchange: wire.IKE_AUTH, Notify: wire.NO_PROPOSAL_CHOSEN, IKEEstablished: true}
	}
	remoteTS, localTS := narrow(tsi.Selectors, r.cfg.RemoteTS), narrow(tsr.Selectors, r.cfg.LocalTS)
	if len(remoteTS) == 0 || len(localTS) == 0 {
		return nil, &PeerError{Exchange: wire.IKE_AUTH, Notify: wire.TS_UNACCEPTABLE, IKEEstablished: true}
	}
	out := binary.BigEndian.Uint32(chosen.SPI)
	var spi [4]byte
	for binary.BigEndian.Uint32(spi[:]) < 256 {
		if _, err := io.ReadFull(r.cfg.rand(), spi[:]); err != nil {
			return nil, err
		}
	}
	chosen.SPI = spi[:]
	km, err := keys.DeriveChild(r.ike.Suite.PRF, r.ike.Keys.SKd, suite, nil, r.ni, r.nr)
	if err != nil {
		return nil, err
	}
	return &chosenChild{proposal: chosen, sa: &ChildSA{InSPI: binary.BigEndian.Uint32(spi[:]), OutSPI: out, Suite: suite,
		OutEncr: km.EncrR, OutInteg: km.IntegR, InEncr: km.EncrI, InInteg: km.IntegI,
		LocalTS: localTS, RemoteTS: remoteTS, Local: r.local, Remote: r.remote, Encap: r.ike.Encap}}, nil
}

// handleInformational answers liveness checks (an empty request) and a
// Delete of the IKE SA with an empty response (§1.4.1). Deletes of
// CHILD_SAs are answered with this side's SPIs of those it knows.
func (r *Responder) handleInformational(h wire.Header, raw []byte) ([]byte, error) {
	m, err := r.ike.In.OpenMessage(raw)
	if errors.Is(err, keys.ErrIntegrity) {
		return nil, ErrIgnored
	}
	if err != nil {
		return nil, err
	}
	var reply []wire.Payload
	for _, p := range m.Payloads {
		d, ok := p.(*wire.Delete)
		if !ok {
			continue
		}
		switch {
		case d.Protocol == wire.ProtoIKE:
			r.fail(errors.New("ike: the peer deleted the IKE SA"))
			reply = nil
		case d.Protocol == wire.ProtoESP && r.child != nil:
			for _, s := range d.SPIs {
				if binary.BigEndian.Uint32(s) == r.child.OutSPI {
					reply = append(reply, &wire.Delete{Protocol: wire.ProtoESP, SPISize: 4,
						SPIs: [][]byte{binary.BigEndian.AppendUint32(nil, r.child.InSPI)}})
				}
			}
		}
	}
	return r.protected(wire.INFORMATIONAL, h.MessageID, reply)
}
