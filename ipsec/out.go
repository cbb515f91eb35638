package ipsec

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

// Outbound processes a batch of plaintext IP packets (Data starts with an
// IPv4 or IPv6 header, as read from a TUN device). For each packet it
// looks up the outbound policy and sets Verdict:
//
//   - VerdictForward: an ipsec policy matched; Data is now the outer IP
//     packet carrying ESP (or ESP in UDP), Src and Dst are the SA
//     endpoints, IPPayload and ESP give the parts for sockets that add
//     their own headers.
//   - VerdictBypass: a "none" policy matched (or a "use" level policy
//     found no SA); Data is unchanged.
//   - VerdictDrop: Drop says why (no policy, discard, no SA, ...).
//
// Outbound returns when every packet has its verdict: it submits one
// crypto batch per run of packets sharing an SA and waits for the
// completions. Packets are processed in place and stay owned by the
// caller. Safe for concurrent use; allocates nothing in steady state.
func (e *Engine) Outbound(pkts []*Packet) {
	if len(pkts) == 0 {
		return
	}
	b := e.getBatch()
	tab, view := e.snapshot()
	var (
		lastFlow spd.Flow
		lastH    ipHeader
		cur      ipHeader
		lastK0   uint64
		lastK1   uint64
		haveKey  bool
		lastPol  *spd.Policy
		havePol  bool
		// lastSA is the SA selected for request lastReq between the
		// addresses lastPair: the selection depends on the request
		// (its reqid, level and mode) as well as on the endpoints.
		lastReq   *spd.IPsecRequest
		lastPair  [2]netip.Addr
		lastSA    *sa
		runSA     *sa
		runTunnel bool
		// flowSA is the SA (and mode) the previous packet of the flow
		// lastK0/lastK1 went out on: later packets of that flow skip the
		// policy and SA selection.
		flowSA     *sa
		flowTunnel bool
	)
	// Every policy lookup of this call is on view: a decision saved
	// under its generation holds while a later call gets the same one.
	gen := view.Generation()
	fast := !e.generalOnly
	if c := &b.out4; fast && c.tab == tab && c.gen == gen && c.s.state.Load() == stateMature {
		lastK0, lastK1, lastH, haveKey = c.k0, c.k1, c.h, true
		// The flow's policy too: a packet of the flow whose SA is no
		// longer usable takes the SA selection below with it.
		lastPol, havePol = c.pol, true
		flowSA, flowTunnel = c.s, c.tunnel
	}
	for i := 0; i < len(pkts); i++ {
		if s := flowSA; s != nil && flowTunnel && s.fast4 {
			// Packets of the cached flow on a tunnel-mode IPv4 AEAD SA:
			// outFast4 takes as many as follow.
			if s != runSA || !runTunnel {
				e.flushOut(b, runSA, runTunnel)
				runSA, runTunnel = s, true
			}
			if i += e.outFast4(b, pkts[i:], s, lastK0, lastK1); i == len(pkts) {
				break
			}
		}
		p := pkts[i]
		if j := i + prefetchAhead; j < len(pkts) {
			b.pf ^= pkts[j].head()
		}
		// A packet that is encapsulated gets the other per-packet fields
		// (sa, l4off, espoff, SPI, Seq) from encap and setSeq; one that
		// is not has them reset before its verdict.
		p.Verdict, p.Drop, p.b = VerdictDrop, DropNone, b
		d := p.buf[p.off:p.end]
		var h *ipHeader
		if haveKey && len(d) >= 24 && d[0] == 0x45 {
			// Same 5-tuple bytes as the previous simple IPv4 packet of
			// this call (or of the last call on this batch, see
			// batch.out4): reuse its parse, flow and policy.
			k0, k1 := key4(d)
			tot := int(binary.BigEndian.Uint16(d[2:]))
			if k0 == lastK0 && k1 == lastK1 && binary.BigEndian.Uint16(d[6:])&0x3fff == 0 && tot >= 24 && tot <= len(d) {
				h = &lastH
				h.total, h.tclass = tot, d[1]
				if s := flowSA; s != nil && s.usable() {
					p.end = p.off + tot
					var dr DropReason
					if flowTunnel && s.fast4 {
						dr = e.encapTunnel4(p, s, h.tclass, protoIPIP)
					} else {
						dr = e.encap(p, s, h, flowTunnel)
					}
					if dr != DropNone {
						p.clearOut()
						e.drop(p, s, dr)
						continue
					}
					if s != runSA || flowTunnel != runTunnel {
						e.flushOut(b, runSA, runTunnel)
						runSA, runTunnel = s, flowTunnel
					}
					b.reqs = append(b.reqs, &p.req)
					continue
				}
			}
		}
		flowSA = nil
		p.clearOut()
		if h == nil {
			h = &cur
			if !parseIPInto(d, h) {
				e.drop(p, nil, DropMalformed)
				continue
			}
			f := flowOf(d[:h.total], h)
			if !havePol || f != lastFlow {
				lastPol, havePol = nil, true
				if pol, ok := view.Lookup(spd.DirOut, f); ok {
					lastPol = pol
				}
				lastFlow = f
			}
			haveKey = false
			if !h.v6 && h.hlen == 20 && !h.frag && h.total >= 24 {
				lastK0, lastK1 = key4(d)
				lastH, haveKey = *h, true
				h = &lastH
			}
		}
		p.end = p.off + h.total
		d = d[:h.total]
		pol := lastPol
		if pol == nil {
			e.drop(p, nil, DropNoPolicy)
			continue
		}
		switch pol.Action {
		case spd.None:
			p.Verdict = VerdictBypass
			e.bypass.Add(1)
			continue
		case spd.IPsec:
		default:
			e.drop(p, nil, DropDiscard)
			continue
		}
		r := &pol.Requests[0]
		tunnel := r.Mode == spd.ModeTunnel
		pair := [2]netip.Addr{h.src, h.dst}
		if tunnel {
			pair = [2]netip.Addr{r.Src, r.Dst}
		}
		if lastSA == nil || r != lastReq || pair != lastPair || !lastSA.usable() {
			lastSA = tab.lookupOut(pair[0], pair[1], r)
			lastReq, lastPair = r, pair
		}
		s := lastSA
		if s == nil {
			if r.Level == spd.LevelUse {
				p.Verdict = VerdictBypass
				e.bypass.Add(1)
				continue
			}
			if tab.hasDead(pair[0], pair[1], r) {
				e.drop(p, nil, DropExpired)
			} else {
				e.drop(p, nil, DropNoOutSA)
			}
			continue
		}
		if s.cfg.Mode != spd.ModeAny {
			tunnel = s.cfg.Mode == spd.ModeTunnel
		}
		var dr DropReason
		if tunnel && s.fast4 && fast {
			nh := uint8(protoIPIP)
			if h.v6 {
				nh = protoIPv6
			}
			dr = e.encapTunnel4(p, s, h.tclass, nh)
		} else {
			dr = e.encap(p, s, h, tunnel)
		}
		if dr != DropNone {
			e.drop(p, s, dr)
			continue
		}
		if haveKey && h == &lastH && fast {
			flowSA, flowTunnel = s, tunnel
		}
		if s != runSA || tunnel != runTunnel {
			e.flushOut(b, runSA, runTunnel)
			runSA, runTunnel = s, tunnel
		}
		b.reqs = append(b.reqs, &p.req)
	}
	e.flushOut(b, runSA, runTunnel)
	if c := &b.out4; flowSA != nil {
		c.gen, c.tab, c.k0, c.k1, c.h, c.pol, c.s, c.tunnel = gen, tab, lastK0, lastK1, lastH, lastPol, flowSA, flowTunnel
	} else {
		c.s, c.tab, c.pol = nil, nil, nil
	}
	e.wait(b)
}

// outFast4 is Outbound's loop for the common case: simple IPv4 packets
// (no options, not fragments) of the flow whose 5-tuple bytes are k0, k1
// (key4), which goes out on tunnel-mode SA s with encapTunnel4. It takes
// packets from the start of pkts while they are such packets and s is
// usable, appends their requests to b.reqs (the run of s, in tunnel
// mode), and returns how many it took; the first one it does not take is
// left unchanged.
func (e *Engine) outFast4(b *batch, pkts []*Packet, s *sa, k0, k1 uint64) int {
	reqs := b.reqs
	var i int
	for ; i < len(pkts); i++ {
		p := pkts[i]
		if j := i + prefetchAhead; j < len(pkts) {
			b.pf ^= pkts[j].head()
		}
		d := p.buf[p.off:p.end]
		if len(d) < 24 {
			break
		}
		h := (*[24]byte)(d)
		tot := int(h[2])<<8 | int(h[3])
		if binary.LittleEndian.Uint64(h[0:8])&ip4Word0Mask != ip4Word0Want || tot < 24 || tot > len(d) || !s.usable() {
			break
		}
		if x0, x1 := key4(h[:]); x0 != k0 || x1 != k1 {
			break
		}
		p.Verdict, p.Drop, p.b = VerdictDrop, DropNone, b
		p.end = p.off + tot
		if dr := e.encapTunnel4(p, s, h[1], protoIPIP); dr != DropNone {
			p.clearOut()
			e.drop(p, s, dr)
			continue
		}
		reqs = append(reqs, &p.req)
	}
	b.reqs = reqs
	return i
}

// clearOut resets the per-packet fields that Outbound sets when it
// encapsulates p.
func (p *Packet) clearOut() {
	p.SPI, p.Seq, p.sa = 0, 0, nil
	p.l4off, p.espoff = 0, 0
}

// flushOut assigns sequence numbers to the pending run of SA s (b.reqs,
// the requests of packets encapsulated in the given mode) and submits it
// as one crypto batch.
func (e *Engine) flushOut(b *batch, s *sa, tunnel bool) {
	reqs := b.reqs
	if len(reqs) == 0 {
		return
	}
	first, ok := s.reserve(len(reqs))
	bytes := 0
	if tunnel && s.fast4 && !s.cfg.ESN && e.testIV == nil && !e.generalOnly {
		// Every packet of the run has encapTunnel4's layout, with its
		// condition decided once per run.
		bytes = setSeqTunnel4(reqs[:ok], s, first)
	} else {
		for i, r := range reqs[:ok] {
			p := r.User.(*Packet)
			e.setSeq(p, s, first+uint64(i))
			bytes += p.bytes
		}
	}
	for _, r := range reqs[ok:] {
		e.drop(r.User.(*Packet), s, DropSeqOverflow)
	}
	if ok > 0 {
		s.accountOut(ok, bytes)
	}
	e.submit(b, s, reqs[:ok])
	clear(reqs)
	b.reqs = reqs[:0]
}

// encap builds ESP around p in place, except the sequence-dependent
// fields (setSeq). For CBC it draws the random IV.
func (e *Engine) encap(p *Packet, s *sa, h *ipHeader, tunnel bool) DropReason {
	buf := p.buf
	udp := 0
	if s.cfg.Proto == setkey.ProtoESPUDP {
		udp = 8
	}
	var payloadOff, l3, nhOff int
	var nh uint8
	outerV6 := s.cfg.Dst.Addr().Is6()
	if tunnel {
		payloadOff = p.off
		nh = protoIPIP
		if h.v6 {
			nh = protoIPv6
		}
		l3 = 20
		if outerV6 {
			l3 = 40
		}
	} else {
		if h.frag || h.v6 != outerV6 {
			return DropMalformed
		}
		payloadOff = p.off + h.hlen
		nh = h.proto
		l3, nhOff = h.hlen, h.nhOff
	}
	plen := p.end - payloadOff
	pad := -(plen + 2) & (s.block - 1) // block is a power of two
	ctEnd := p.end + pad + 2
	tailEnd := ctEnd + s.icvLen
	if tailEnd > len(buf) {
		return DropNoRoom
	}
	espOff := payloadOff - s.ivLen - 8
	start := espOff - udp - l3
	if start < 0 {
		return DropNoRoom
	}
	total := tailEnd - start
	if (!outerV6 && total > 0xffff) || (outerV6 && total-40 > 0xffff) {
		return DropNoRoom
	}
	// Trailer: default padding 1, 2, 3, ... (RFC 4303 section 2.4).
	t := buf[p.end:ctEnd]
	for i := 0; i < pad; i++ {
		t[i] = byte(i + 1)
	}
	t[pad], t[pad+1] = byte(pad), nh
	proto := uint8(protoESP)
	if udp != 0 {
		proto = protoUDP
	}
	if tunnel {
		// Copy the SA's header template; setSeq adds ID and checksum.
		if outerV6 {
			o := buf[start : start+40]
			copy(o, s.hdr6[:])
			o[0], o[1] = 0x60|h.tclass>>4, h.tclass<<4
			binary.BigEndian.PutUint16(o[4:], uint16(total-40))
		} else {
			o := buf[start : start+20]
			copy(o, s.hdr4[:])
			o[1] = h.tclass
			binary.BigEndian.PutUint16(o[2:], uint16(total))
		}
	} else {
		copy(buf[start:start+l3], buf[p.off:p.off+l3])
		buf[start+nhOff] = proto
		if outerV6 {
			binary.BigEndian.PutUint16(buf[start+4:], uint16(total-40))
		} else {
			binary.BigEndian.PutUint16(buf[start+2:], uint16(total))
		}
	}
	if udp != 0 {
		u := buf[start+l3:]
		binary.BigEndian.PutUint16(u[0:], s.cfg.Src.Port())
		binary.BigEndian.PutUint16(u[2:], s.cfg.Dst.Port())
		binary.BigEndian.PutUint16(u[4:], uint16(tailEnd-(start+l3)))
		u[6], u[7] = 0, 0 // IPv4: no checksum (RFC 3948 section 2.1); IPv6: set after sealing
	}
	put32(buf[espOff:], s.cfg.SPI)
	iv := buf[espOff+8 : espOff+8+s.ivLen]
	if s.cfg.Alg.Cipher == crypto.CipherAESCBC {
		b := p.b
		if b.rng == nil {
			b.rng = rngPool.Get().(*rand.ChaCha8)
		}
		_, _ = b.rng.Read(iv)
	}
	p.bytes = plen
	if tunnel {
		p.bytes = p.end - p.off
	}
	r := &p.req
	setReq(r, p, crypto.Encrypt, buf[espOff+8+s.ivLen:ctEnd], buf[ctEnd:tailEnd], iv)
	p.sa = s
	p.off, p.end = start, tailEnd
	p.l3len, p.l4off, p.espoff, p.v6 = l3, start+l3, espOff, outerV6
	p.tunnel = tunnel
	p.Src, p.Dst = s.cfg.Src, s.cfg.Dst
	return DropNone
}

// encapTunnel4 is encap for the common case s.fast4 in tunnel mode: outer
// IPv4 from the SA's template, plain ESP, an AEAD with an 8-byte IV (the
// sequence number, written by setSeq) and a 16-byte ICV, 4-byte padding
// alignment. nh is the inner protocol (IPv4 or IPv6 in IP); tclass the
// inner TOS / traffic class, copied to the outer header.
func (e *Engine) encapTunnel4(p *Packet, s *sa, tclass, nh uint8) DropReason {
	const hdr = 20 + 8 + 8 // outer IPv4, SPI and sequence, IV
	buf := p.buf
	off, end := p.off, p.end
	pad := -(end - off + 2) & 3
	ctEnd := end + pad + 2
	tailEnd := ctEnd + 16
	start := off - hdr
	if start < 0 || tailEnd > len(buf) || tailEnd-start > 0xffff {
		return DropNoRoom
	}
	// Trailer: default padding 1, 2, 3 (RFC 4303 section 2.4), pad
	// length, next header. One 4-byte store writes the padding (pad <=
	// 3); the bytes past the trailer it also writes are in the ICV's
	// place (tailEnd >= end+18), which the seal overwrites.
	t := (*[5]byte)(buf[end : end+5])
	binary.LittleEndian.PutUint32(t[:4], 0x04030201)
	t[pad], t[pad+1] = byte(pad), nh
	o := (*[hdr]byte)(buf[start:off])
	*(*[20]byte)(o[:20]) = s.hdr4
	o[1] = tclass
	binary.BigEndian.PutUint16(o[2:], uint16(tailEnd-start))
	put32(o[20:], s.cfg.SPI)
	p.bytes = end - off
	// The request, as setReq sets it up, unless it is set up for this
	// geometry already (Packet.reqKey).
	if key := reqGeom(crypto.Encrypt, off, end-off, 8, 16); p.reqKey != key {
		r := &p.req
		r.Dir = crypto.Encrypt
		r.Data, r.ICV, r.IV, r.AAD, r.AuthTrailer = buf[off:ctEnd], buf[ctEnd:tailEnd], o[28:hdr], o[20:28], nil
		r.User = p
		p.reqKey = key
	}
	p.sa = s
	p.off, p.end = start, tailEnd
	p.l3len, p.l4off, p.espoff, p.v6 = 20, start+20, start+20, false
	p.tunnel = true
	p.Src, p.Dst = s.cfg.Src, s.cfg.Dst
	return DropNone
}

// setSeqTunnel4 is setSeq for a run of packets built by encapTunnel4
// (without ESN and the test IV hook), given by their requests, numbered
// from first on: outer IPv4 | SPI | seq | IV, the AAD (SPI, seq) already
// set up. It writes the sequence field, the IV (= seq) and the outer ID
// (= the low 16 bits of seq) with the checksum updated from the SA
// template's, and returns the packets' inner bytes.
func setSeqTunnel4(reqs []*crypto.Request, s *sa, first uint64) (bytes int) {
	spi, sum0 := s.cfg.SPI, s.hdr4Sum
	for i, r := range reqs {
		p := r.User.(*Packet)
		seq := first + uint64(i)
		h := (*[36]byte)(p.buf[p.off : p.off+36])
		put32(h[24:], uint32(seq))
		put64(h[28:], seq)
		id := uint16(seq)
		binary.BigEndian.PutUint16(h[4:], id)
		sum := sum0 + uint32(h[1]) + uint32(binary.BigEndian.Uint16(h[2:])) + uint32(id)
		sum = sum&0xffff + sum>>16
		sum = sum&0xffff + sum>>16
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		p.SPI, p.Seq = spi, seq
		bytes += p.bytes
	}
	return bytes
}

// setSeq writes the sequence number and what depends on it: the ESP
// sequence field, the AEAD IV (= the 64-bit counter, unique by
// construction), the AAD / ESN trailer and the outer IPv4 ID.
func (e *Engine) setSeq(p *Packet, s *sa, seq uint64) {
	p.reqKey = 0 // the AAD (ESN) may change below
	buf := p.buf
	esp := buf[p.espoff:]
	put32(esp[4:], uint32(seq))
	if s.aead {
		put64(esp[8:], seq)
	}
	if e.testIV != nil {
		e.testIV(esp[8 : 8+s.ivLen])
	}
	r := &p.req
	if s.cfg.ESN {
		if s.aead {
			put32(p.aad[0:], s.cfg.SPI)
			put64(p.aad[4:], seq)
			r.AAD = p.aad[:12]
		} else {
			r.AAD = esp[:8]
			put32(p.trailer[:], uint32(seq>>32))
			r.AuthTrailer = p.trailer[:]
		}
	} else {
		r.AAD = esp[:8]
	}
	if !p.v6 {
		h := buf[p.off : p.off+p.l3len]
		if p.tunnel {
			// Incremental checksum over the template's constant fields
			// plus TOS, total length and ID (= low 16 bits of seq).
			id := uint16(seq)
			binary.BigEndian.PutUint16(h[4:], id)
			sum := s.hdr4Sum + uint32(h[1]) + uint32(binary.BigEndian.Uint16(h[2:])) + uint32(id)
			sum = sum&0xffff + sum>>16
			sum = sum&0xffff + sum>>16
			binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		} else {
			ipv4HeaderChecksum(h)
		}
	}
	p.SPI, p.Seq = s.cfg.SPI, seq
}

// finishOut completes an outbound packet after sealing.
func (e *Engine) finishOut(p *Packet, s *sa, r *crypto.Request) bool {
	if r.Status != crypto.StatusOK {
		e.drop(p, s, cryptoDrop(r))
		return false
	}
	if p.v6 && s.cfg.Proto == setkey.ProtoESPUDP {
		udp6Checksum(s.cfg.Src.Addr(), s.cfg.Dst.Addr(), p.buf[p.l4off:p.end])
	}
	p.Verdict = VerdictForward
	return true
}

// key4 returns the bytes a simple IPv4 packet's flow depends on: the
// addresses, and the protocol with the first 4 upper-layer bytes (ports,
// or ICMP type and code).
func key4(d []byte) (uint64, uint64) {
	return binary.LittleEndian.Uint64(d[12:20]), uint64(d[9]) | uint64(binary.LittleEndian.Uint32(d[20:24]))<<8
}

// reqGeom identifies the set-up of a request by a fast path: direction,
// where the packet starts in its buffer, its length, and the IV and ICV
// lengths determine every slice of it (the AAD is the ESP header in the
// packet, without ESN). Never 0.
func reqGeom(dir crypto.Direction, off, n, iv, icv int) uint64 {
	return 1<<63 | uint64(dir)<<56 | uint64(off)<<32 | uint64(n)<<16 | uint64(iv)<<8 | uint64(icv)
}

// setReq prepares p's request field by field: the framework leaves its
// bookkeeping zero on delivery, and a whole-struct store (with write
// barriers for every pointer) costs more than the fields. Status and Err
// are not set: the framework sets them for every request it accepts
// (crypto.Binding.Submit). AAD and AuthTrailer are set by the caller.
func setReq(r *crypto.Request, p *Packet, dir crypto.Direction, data, icv, iv []byte) {
	p.reqKey = 0
	r.Dir = dir
	r.Data, r.ICV, r.AuthTrailer = data, icv, nil
	if len(iv) > 0 {
		r.IV = iv
	} else {
		r.IV = nil
	}
	if u, _ := r.User.(*Packet); u != p {
		r.User = p
	}
}
