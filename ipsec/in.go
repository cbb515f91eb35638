package ipsec

import (
	"encoding/binary"
	"net/netip"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/replay"
	"github.com/keelinit/keel/ipsec/spd"
)

// Inbound processes a batch of received packets, each framed as its Frame
// says (FrameIP: an IP packet; FrameUDP: a NAT-T UDP payload with Src/Dst
// set; FrameESP: bare ESP with Src/Dst set). For each packet it sets
// Verdict:
//
//   - VerdictForward: ESP was verified and removed. Data is the inner IP
//     packet (tunnel mode) or the original packet with ESP removed
//     (transport mode; for FrameUDP/FrameESP an IPv4/IPv6 header is
//     synthesised from Src and Dst). The packet matched an inbound ipsec
//     policy consistent with the SA.
//   - VerdictBypass: FrameIP only: not ESP, and no inbound policy (or a
//     "none" policy) covers it; Data is unchanged.
//   - VerdictLocal: a NAT-T datagram with the non-ESP marker (IKE); Data
//     is the IKE message without the marker.
//   - VerdictDrop: Drop says why. NAT-T keepalives are DropKeepalive.
//
// Order of checks (RFC 4303 section 3.4): SA lookup, length, replay check
// (with ESN inference), ICV verification and decryption, replay window
// update, padding and next header, inner header, policy. Every malformed
// input is dropped and counted, never panics. Inbound returns when every
// packet has its verdict. Safe for concurrent use; allocates nothing in
// steady state.
func (e *Engine) Inbound(pkts []*Packet) {
	if len(pkts) == 0 {
		return
	}
	b := e.getBatch()
	tab, view := e.snapshot()
	// The policy checks of this call's packets, here and in their
	// completions, are on view (batch.view).
	b.view = view
	var run inRun
	fast := !e.generalOnly
	if c := &b.in4; fast && c.tab == tab && c.s.usable() {
		s := c.s
		run = inRun{s: s, w: s.win, esn: s.cfg.ESN, ivLen: s.ivLen, icvLen: s.icvLen}
		run.setFast4(c.spi, c.dst4)
	}
	var sc saCache
	for i := 0; i < len(pkts); {
		if run.fast4 {
			i += e.inFast4(b, pkts[i:], &run)
			if i == len(pkts) {
				break
			}
		}
		p := pkts[i]
		i++
		p.Verdict, p.Drop, p.b = VerdictDrop, DropNone, b
		p.l4off, p.v6, p.tunnel = 0, false, false
		p.SPI, p.Seq, p.sa = 0, 0, nil
		p.espoff, p.l3len, p.nhoff = 0, 0, 0
		// The general path runs without the SA lock: it may look up the
		// SAD and the SPD.
		if run.locked {
			run.s.mu.Unlock()
			run.locked = false
		}
		s := e.parseIn(p, tab, &sc)
		if s == nil {
			continue
		}
		if s != run.s {
			e.flushIn(b, &run)
			run = inRun{s: s, w: s.win, esn: s.cfg.ESN, ivLen: s.ivLen, icvLen: s.icvLen}
		}
		// Later plain IPv4 packets of this SA (not ESP in UDP) take
		// inFast4 while the run lasts.
		if p.l3len == 20 && p.Frame == FrameIP && !sc.udp && !p.v6 && fast {
			run.setFast4(sc.spi, sc.dst.As4())
		}
		if run.w != nil && !run.locked {
			s.mu.Lock()
			run.locked = true
		}
		e.queueIn(b, p, &run)
	}
	e.flushIn(b, &run)
	if run.fast4 {
		b.in4.tab, b.in4.s, b.in4.spi, b.in4.dst4 = tab, run.s, run.spi, run.dst4
	}
	e.wait(b)
}

// inRun is the pending run of inbound packets of one SA: their requests
// are set up (b.reqs) and go to the SA's binding as one batch. While the
// run lasts, its SA's lock is held (locked) for the replay checks, except
// on the general path.
type inRun struct {
	s             *sa
	w             *replay.Window // s.win
	esn, locked   bool
	fast4         bool   // spi and dst4 identify the SA for inFast4
	spi           uint32 // the SA's SPI
	dst4          [4]byte
	ivLen, icvLen int
	// For inFast4: key is bytes 16..23 of the SA's packets (destination
	// address, SPI) as a little-endian word; ctMask the low bits a
	// ciphertext length must not have (block and 4-byte alignment).
	key    uint64
	ctMask int
}

// setFast4 makes later plain IPv4 ESP packets to dst4 with this SPI take
// inFast4 while the run lasts.
func (run *inRun) setFast4(spi uint32, dst4 [4]byte) {
	run.fast4, run.spi, run.dst4 = true, spi, dst4
	var k [8]byte
	copy(k[:4], dst4[:])
	binary.BigEndian.PutUint32(k[4:], spi)
	run.key = binary.LittleEndian.Uint64(k[:])
	run.ctMask = (run.s.block - 1) | 3 // block is a power of two
}

// IPv4 header bytes 0..7 as a little-endian word: the fast paths require
// version 4 with a 20-byte header (byte 0) and no fragment offset or MF
// flag (bytes 6 and 7, under 0x3fff); inFast4 also protocol ESP (byte 9,
// the second byte of bytes 8..15).
const (
	ip4Word0Mask = 0xff | 0x3f<<48 | 0xff<<56
	ip4Word0Want = 0x45
	ip4Word1Mask = 0xff << 8
	ip4Word1ESP  = protoESP << 8
)

// inFast4 is parseIn and queueIn for the common case: plain IPv4 ESP
// packets (no options, not fragments, FrameIP) of the run's SA,
// identified by SPI and destination without the SAD. The SA's state was
// checked when the run started (parseIn, or batch.in4 at the start of the
// call). It takes packets from the start of pkts while they are such
// packets, and returns how many it took; the first one it does not take
// is left unchanged for the general path.
func (e *Engine) inFast4(b *batch, pkts []*Packet, run *inRun) int {
	s, w := run.s, run.w
	iv, icv := run.ivLen, run.icvLen
	aead := iv == 8 && icv == 16 // AES-GCM, ChaCha20-Poly1305
	reqs := b.reqs
	var i int
	for ; i < len(pkts); i++ {
		p := pkts[i]
		if j := i + prefetchAhead; j < len(pkts) {
			b.pf ^= pkts[j].head()
		}
		if p.Frame != FrameIP {
			break
		}
		d := p.buf[p.off:p.end]
		if len(d) < 28 {
			break
		}
		h := (*[28]byte)(d)
		if binary.LittleEndian.Uint64(h[0:8])&ip4Word0Mask != ip4Word0Want ||
			binary.LittleEndian.Uint64(h[8:16])&ip4Word1Mask != ip4Word1ESP ||
			binary.LittleEndian.Uint64(h[16:24]) != run.key {
			break
		}
		tot := int(h[2])<<8 | int(h[3])
		ct := tot - 20 - 8 - iv - icv
		if tot > len(d) || ct < 4 || ct&run.ctMask != 0 {
			break
		}
		p.Verdict, p.Drop, p.b = VerdictDrop, DropNone, b
		p.l4off, p.v6, p.tunnel = 0, false, false
		p.end = p.off + tot
		p.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(h[12:16])), 0)
		p.Dst = netip.AddrPortFrom(netip.AddrFrom4(run.dst4), 0)
		p.espoff = p.off + 20
		p.l3len, p.nhoff = 20, 9
		p.SPI = run.spi
		p.sa = s
		if !run.locked && w != nil {
			s.mu.Lock()
			run.locked = true
		}
		if w == nil || run.esn {
			b.reqs = reqs
			e.queueIn(b, p, run)
			reqs = b.reqs
			continue
		}
		// queueIn without ESN, inline.
		seq := uint64(binary.BigEndian.Uint32(h[24:28]))
		p.Seq = seq
		if !w.Check(seq) {
			p.sa = nil
			e.drop(p, s, DropReplay)
			continue
		}
		// The request, as setReq would set it up, unless it is set up
		// for this geometry already (Packet.reqKey).
		r := &p.req
		if key := reqGeom(crypto.Decrypt, p.off, tot, iv, icv); p.reqKey != key {
			esp := d[20:tot]
			r.Dir = crypto.Decrypt
			if aead {
				r.AAD, r.IV, r.Data, r.ICV = esp[:8], esp[8:16], esp[16:16+ct], esp[16+ct:]
			} else {
				r.AAD, r.IV, r.Data, r.ICV = esp[:8], esp[8:8+iv], esp[8+iv:8+iv+ct], esp[8+iv+ct:]
				if iv == 0 {
					r.IV = nil
				}
			}
			r.AuthTrailer = nil
			r.User = p
			p.reqKey = key
		}
		reqs = append(reqs, r)
	}
	b.reqs = reqs
	return i
}

// queueIn runs the replay check of p (RFC 4303 section 3.4.3, before the
// ICV; the run's SA lock held when the SA has a window) and sets up its
// decrypt request, or drops p as a replay.
func (e *Engine) queueIn(b *batch, p *Packet, run *inRun) {
	esp := p.buf[p.espoff:p.end]
	seql := binary.BigEndian.Uint32(esp[4:8])
	seq := uint64(seql)
	ok := seq != 0
	if w := run.w; w != nil {
		if run.esn {
			seq = w.Infer(seql)
		}
		ok = w.Check(seq)
	}
	p.Seq = seq
	if !ok {
		p.sa = nil
		e.drop(p, run.s, DropReplay)
		return
	}
	n := len(esp)
	iv, icv := run.ivLen, run.icvLen
	r := &p.req
	setReq(r, p, crypto.Decrypt, esp[8+iv:n-icv], esp[n-icv:n], esp[8:8+iv])
	r.AAD = esp[:8]
	if run.esn {
		s := run.s
		if s.aead {
			put32(p.aad[0:], s.cfg.SPI)
			put64(p.aad[4:], p.Seq)
			r.AAD = p.aad[:12]
		} else {
			put32(p.trailer[:], uint32(p.Seq>>32))
			r.AuthTrailer = p.trailer[:]
		}
	}
	b.reqs = append(b.reqs, r)
}

// saCache remembers the last inbound SA lookup of a batch: consecutive
// packets of one SA skip the SAD map.
type saCache struct {
	s   *sa
	spi uint32
	dst netip.Addr
	udp bool
}

// parseIn validates the framing of p up to the ESP header and finds its
// SA. It returns nil when the packet got a verdict already.
func (e *Engine) parseIn(p *Packet, tab *sadTable, sc *saCache) *sa {
	udp := false
	switch p.Frame {
	case FrameIP:
		d := p.buf[p.off:p.end]
		if len(d) >= 28 && d[0] == 0x45 && d[9] == protoESP && binary.BigEndian.Uint16(d[6:])&0x3fff == 0 {
			// Plain IPv4 ESP, not a fragment: the common case, without
			// the general parse.
			tot := int(binary.BigEndian.Uint16(d[2:]))
			if tot < 20 || tot > len(d) {
				e.drop(p, nil, DropMalformed)
				return nil
			}
			p.end = p.off + tot
			p.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(d[12:16])), 0)
			p.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(d[16:20])), 0)
			p.espoff = p.off + 20
			p.l3len, p.nhoff = 20, 9
			break
		}
		var ok bool
		if udp, ok = e.parseOuterIP(p, d, tab); !ok {
			return nil
		}
	case FrameUDP:
		p.espoff = p.off
		udp = true
	case FrameESP:
		p.espoff = p.off
	default:
		e.drop(p, nil, DropMalformed)
		return nil
	}
	esp := p.buf[p.espoff:p.end]
	if udp {
		// RFC 3948 section 2.2/2.3: keepalive and non-ESP marker.
		if len(esp) == 1 && esp[0] == 0xff {
			e.drop(p, nil, DropKeepalive)
			return nil
		}
		if len(esp) >= 4 && binary.BigEndian.Uint32(esp) == 0 {
			p.off = p.espoff + 4
			p.Verdict = VerdictLocal
			e.local.Add(1)
			return nil
		}
	}
	if len(esp) < 8 {
		e.drop(p, nil, DropShort)
		return nil
	}
	spi := binary.BigEndian.Uint32(esp)
	dst := p.Dst.Addr()
	s := sc.s
	if s == nil || spi != sc.spi || udp != sc.udp || dst != sc.dst {
		s = tab.lookupIn(spi, dst, udp)
		if s == nil {
			e.drop(p, nil, DropNoSA)
			return nil
		}
		*sc = saCache{s: s, spi: spi, dst: dst, udp: udp}
	}
	p.SPI = spi
	if !s.usable() {
		e.drop(p, s, DropExpired)
		return nil
	}
	ct := len(esp) - 8 - s.ivLen - s.icvLen
	if ct < 4 {
		e.drop(p, s, DropShort)
		return nil
	}
	if ct&(s.block-1) != 0 || ct&3 != 0 { // block is a power of two
		e.drop(p, s, DropBadLength)
		return nil
	}
	p.sa = s
	return s
}

// parseOuterIP is parseIn's general FrameIP case (IPv6, options, UDP
// encapsulation, clear traffic): it validates the outer header of d and
// sets p's ESP offset, or gives p its verdict (ok false).
func (e *Engine) parseOuterIP(p *Packet, d []byte, tab *sadTable) (udp, ok bool) {
	var h ipHeader
	if !parseIPInto(d, &h) {
		e.drop(p, nil, DropMalformed)
		return false, false
	}
	p.end = p.off + h.total
	p.v6 = h.v6
	p.Src, p.Dst = netip.AddrPortFrom(h.src, 0), netip.AddrPortFrom(h.dst, 0)
	switch {
	case h.proto == protoESP:
		if h.frag {
			e.drop(p, nil, DropMalformed)
			return false, false
		}
		p.espoff = p.off + h.hlen
	case h.proto == protoUDP && !h.frag:
		u := d[h.hlen:h.total]
		if len(u) < 8 {
			e.drop(p, nil, DropShort)
			return false, false
		}
		sport, dport := binary.BigEndian.Uint16(u), binary.BigEndian.Uint16(u[2:])
		if dport != NATTPort && !tab.ports[dport] {
			e.clearIn(p, d, &h)
			return false, false
		}
		ul := int(binary.BigEndian.Uint16(u[4:]))
		if ul < 8 || ul > len(u) {
			e.drop(p, nil, DropMalformed)
			return false, false
		}
		p.end = p.off + h.hlen + ul
		p.Src = netip.AddrPortFrom(h.src, sport)
		p.Dst = netip.AddrPortFrom(h.dst, dport)
		p.l4off = p.off + h.hlen
		p.espoff = p.l4off + 8
		udp = true
	default:
		e.clearIn(p, d, &h)
		return false, false
	}
	p.l3len, p.nhoff = h.hlen, h.nhOff
	return udp, true
}

// clearIn handles a FrameIP packet that is not ESP: it may pass if no
// inbound policy demands IPsec for it.
func (e *Engine) clearIn(p *Packet, d []byte, h *ipHeader) {
	f := flowOf(d[:h.total], h)
	pol, ok := p.b.view.Lookup(spd.DirIn, f)
	switch {
	case !ok || pol.Action == spd.None:
		p.Verdict = VerdictBypass
		e.bypass.Add(1)
	case pol.Action == spd.IPsec && allUse(pol):
		p.Verdict = VerdictBypass
		e.bypass.Add(1)
	case pol.Action == spd.IPsec:
		e.drop(p, nil, DropNotESP)
	default:
		e.drop(p, nil, DropDiscard)
	}
}

func allUse(pol *spd.Policy) bool {
	for i := range pol.Requests {
		if pol.Requests[i].Level != spd.LevelUse {
			return false
		}
	}
	return true
}

// flushIn ends the pending run: it releases the SA lock and submits the
// run's requests as one batch.
func (e *Engine) flushIn(b *batch, run *inRun) {
	if run.locked {
		run.s.mu.Unlock()
		run.locked = false
	}
	reqs := b.reqs
	if len(reqs) == 0 {
		return
	}
	e.submit(b, run.s, reqs)
	clear(reqs)
	b.reqs = reqs[:0]
}

// finishIn completes an inbound packet after the crypto. The replay
// window was already updated (pass 1 of the completer), which set Drop to
// DropReplay for a packet that lost a race with its duplicate.
func (e *Engine) finishIn(p *Packet, s *sa, r *crypto.Request, pc *polCache) bool {
	if r.Status != crypto.StatusOK || p.Drop == DropReplay {
		e.finishFailed(p, s, r)
		return false
	}
	// The plaintext between the IV and the ICV: parseIn (or inFast4)
	// checked that it lies in the buffer and is at least 4 bytes.
	ps := p.espoff + 8 + s.ivLen
	ct := p.buf[ps : p.end-s.icvLen]
	n := len(ct)
	if n < 2 {
		e.drop(p, s, DropBadPad)
		return false
	}
	nh, pad := ct[n-1], int(ct[n-2])
	// RFC 4303 section 2.4: default padding is 1, 2, 3, ...
	if pad+2 > n || !defaultPadding(ct, n-2, pad) {
		e.drop(p, s, DropBadPad)
		return false
	}
	if nh == protoNoNext {
		e.drop(p, s, DropDummy)
		return false
	}
	pl := ct[:n-2-pad]
	if nh == protoIPIP && (s.inTunnel || s.inAny) && len(pl) >= 24 && pc.valid && pc.tunnel {
		// Fast path: a tunnel-mode packet with a simple inner IPv4
		// header (no options, not a fragment) of the flow whose policy
		// decision this completion batch already made.
		h := (*[24]byte)(pl)
		tot := int(h[2])<<8 | int(h[3])
		if binary.LittleEndian.Uint64(h[0:8])&ip4Word0Mask == ip4Word0Want && tot >= 24 && tot <= len(pl) {
			if k0, k1 := key4(h[:]); pc.k0 == k0 && pc.k1 == k1 {
				if !pc.ok {
					e.drop(p, s, DropPolicy)
					return false
				}
				p.off, p.end = ps, ps+tot
				p.tunnel = true
				p.bytes = tot
				p.Verdict = VerdictForward
				return true
			}
		}
	}
	tunnel := s.inTunnel || (s.inAny && (nh == protoIPIP || nh == protoIPv6))
	return e.finishInner(p, s, pc, nh, ps, ps+len(pl), tunnel)
}

// finishFailed drops an inbound packet whose crypto failed, or that lost
// the replay race with its duplicate (completeIn set Drop).
func (e *Engine) finishFailed(p *Packet, s *sa, r *crypto.Request) {
	switch {
	case r.Status == crypto.StatusAuthFailed:
		e.drop(p, s, DropAuth)
	case r.Status != crypto.StatusOK:
		e.drop(p, s, cryptoDrop(r))
	default:
		e.drop(p, s, DropReplay)
	}
}

// padPattern[n] is n bytes of default padding (1, 2, ..., n) as the low
// bytes of a big-endian uint64, for n <= 8.
var padPattern = func() (t [9]uint64) {
	for n := 1; n <= 8; n++ {
		for i := 1; i <= n; i++ {
			t[n] = t[n]<<8 | uint64(i)
		}
	}
	return t
}()

// padMask[n] selects the low n bytes of a uint64, for n <= 8.
var padMask = [9]uint64{0, 0xff, 0xffff, 0xffffff, 0xffffffff, 0xffffffffff, 0xffffffffffff, 0xffffffffffffff, ^uint64(0)}

// defaultPadding reports whether the pad bytes before buf[end] are the
// default padding 1, 2, ..., pad (RFC 4303 section 2.4); the caller
// checked that pad <= end. Up to 8 bytes of padding (all of AES-GCM's,
// ChaCha's and most of CBC's) are checked with one load when 8 bytes
// precede end.
func defaultPadding(buf []byte, end, pad int) bool {
	if uint(pad) < uint(len(padPattern)) && end >= 8 && end <= len(buf) {
		v := binary.BigEndian.Uint64(buf[end-8 : end])
		return v&padMask[pad] == padPattern[pad]
	}
	for i, c := range buf[end-pad : end] {
		if int(c) != i+1 {
			return false
		}
	}
	return true
}

// finishInner is finishIn past the trailer, off the fast path: it parses
// the inner header (or rebuilds the transport-mode header) and checks the
// inbound policy. The payload is buf[ps:pe], nh its protocol.
func (e *Engine) finishInner(p *Packet, s *sa, pc *polCache, nh uint8, ps, pe int, tunnel bool) bool {
	buf := p.buf
	var h ipHeader
	var ok bool
	if tunnel {
		if nh != protoIPIP && nh != protoIPv6 {
			e.drop(p, s, DropBadNextHeader)
			return false
		}
		ok = parseIPInto(buf[ps:pe], &h)
		if !ok || h.v6 != (nh == protoIPv6) {
			e.drop(p, s, DropBadNextHeader)
			return false
		}
		p.off, p.end = ps, ps+h.total
	} else {
		var start int
		if p.l3len > 0 {
			// Slide the outer header up against the payload.
			start = ps - p.l3len
			copy(buf[start:ps], buf[p.off:p.off+p.l3len])
			buf[start+p.nhoff] = nh
			if p.v6 {
				binary.BigEndian.PutUint16(buf[start+4:], uint16(pe-start-40))
			} else {
				binary.BigEndian.PutUint16(buf[start+2:], uint16(pe-start))
				ipv4HeaderChecksum(buf[start : start+p.l3len])
			}
		} else {
			// No outer header (FrameUDP/FrameESP): synthesise one from the
			// outer addresses, falling back to the SA's endpoints.
			src, dst := p.Src.Addr(), p.Dst.Addr()
			v6 := s.cfg.Dst.Addr().Is6()
			if !src.IsValid() || src.Is6() != v6 {
				src = s.cfg.Src.Addr()
			}
			if !dst.IsValid() || dst.Is6() != v6 {
				dst = s.cfg.Dst.Addr()
			}
			if v6 {
				start = ps - 40
				if start < 0 {
					e.drop(p, s, DropNoRoom)
					return false
				}
				putIPv6(buf[start:], 0, pe-ps, nh, src, dst)
			} else {
				start = ps - 20
				if start < 0 {
					e.drop(p, s, DropNoRoom)
					return false
				}
				putIPv4(buf[start:], 0, pe-start, uint16(p.Seq), nh, src, dst)
			}
		}
		p.off, p.end = start, pe
		ok = parseIPInto(buf[start:pe], &h)
		if !ok {
			e.drop(p, s, DropBadNextHeader)
			return false
		}
	}
	p.tunnel = tunnel
	p.bytes = p.end - p.off
	// RFC 4301 section 5.2 step 4: the decapsulated packet must match an
	// inbound policy that calls for this SA. Consecutive packets of one
	// flow in a completion batch share the decision.
	d := buf[p.off:p.end]
	var k0, k1 uint64
	simple := !h.v6 && h.hlen == 20 && !h.frag && h.total >= 24
	if simple {
		k0, k1 = key4(d)
		if pc.valid && pc.tunnel == tunnel && pc.k0 == k0 && pc.k1 == k1 {
			if !pc.ok {
				e.drop(p, s, DropPolicy)
				return false
			}
			p.Verdict = VerdictForward
			return true
		}
	}
	f := flowOf(d, &h)
	pol, ok := p.b.view.Lookup(spd.DirIn, f)
	ok = ok && policyAllows(pol, s, tunnel)
	// (Engine.generalOnly: no decision is reused.)
	*pc = polCache{gen: pc.gen, valid: simple && !e.generalOnly, tunnel: tunnel, k0: k0, k1: k1, ok: ok}
	if !ok {
		e.drop(p, s, DropPolicy)
		return false
	}
	p.Verdict = VerdictForward
	return true
}

// polCache remembers the inbound policy decision for the last simple
// IPv4 flow of an SA, made on SPD generation gen (the view of the
// Inbound call of the packet, batch.view): for the next packets of the
// completion batch, and across completions (sa.inPol), while their
// packets' view is of the same generation.
type polCache struct {
	gen               uint64
	valid, tunnel, ok bool
	k0, k1            uint64
}

// policyAllows reports whether inbound policy pol accepts traffic that
// arrived through SA s in the given mode.
func policyAllows(pol *spd.Policy, s *sa, tunnel bool) bool {
	if pol.Action != spd.IPsec {
		return false
	}
	for i := range pol.Requests {
		r := &pol.Requests[i]
		if (r.Mode == spd.ModeTunnel) != tunnel {
			continue
		}
		if tunnel && (r.Src != s.cfg.Src.Addr() || r.Dst != s.cfg.Dst.Addr()) {
			continue
		}
		if r.Level == spd.LevelUnique && r.ReqID != 0 && r.ReqID != s.cfg.ReqID {
			continue
		}
		return true
	}
	return false
}
