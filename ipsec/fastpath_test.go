package ipsec

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/keelinit/keel/crypto"
)

// bufOffset returns where x starts in p's buffer (-1: not inside it).
func bufOffset(p *Packet, x []byte) int {
	if len(x) == 0 {
		return -1
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(x))) - uintptr(unsafe.Pointer(unsafe.SliceData(p.buf)))
	if d >= uintptr(len(p.buf)) {
		return -1
	}
	return int(d)
}

// flowBatch returns packets in which flows repeat back to back, so that
// the per-batch fast paths (flow and SA reuse outbound, SA cache and
// policy reuse inbound) carry most packets: runs of one flow with varying
// sizes (every padding length), a second flow in the middle, the first
// flow again, and a packet with IP options (always the general parse).
func flowBatch(tp topology) [][]byte {
	var out [][]byte
	add := func(sport uint16, n int) {
		out = append(out, udpPacket(tp.hostA, tp.hostB, sport, 2000, bytes.Repeat([]byte{byte(n)}, n)))
	}
	for _, n := range []int{100, 101, 102, 103, 0, 1400} {
		add(1000, n)
	}
	add(1001, 50)
	add(1001, 51)
	add(1000, 52)
	add(1000, 53)
	if tp.hostA.Is4() {
		// IPv4 with a 4-byte option (NOP NOP NOP EOL): same 5-tuple bytes
		// at other offsets, not a simple header.
		base := udpPacket(tp.hostA, tp.hostB, 1000, 2000, []byte("options"))
		o := append(append(append([]byte(nil), base[:20]...), 1, 1, 1, 0), base[20:]...)
		o[0] = 0x46
		o[2], o[3] = byte(len(o)>>8), byte(len(o))
		ipv4HeaderChecksum(o[:24])
		out = append(out, o)
		add(1000, 54)
	}
	return out
}

// TestBatchMatchesSingle: a batch of repeating flows (fast paths) and the
// same packets sent one per call (every packet through the general path)
// give byte-identical ESP packets and the same sequence numbers, for the
// transforms and framings the fast paths distinguish. Decapsulating the
// batch in one call and one packet per call gives the original packets.
func TestBatchMatchesSingle(t *testing.T) {
	pool := NewPool(0)
	type tcase struct {
		name    string
		xf      transform
		tunnel  bool
		udp     bool
		esn     bool
		innerV6 bool
		outer6  bool
	}
	var cases []tcase
	for _, xf := range []transform{transforms[0], transforms[2], transforms[3], transforms[7]} {
		cases = append(cases,
			tcase{"4in4", xf, true, false, false, false, false},
			tcase{"6in4", xf, true, false, false, true, false},
			tcase{"4in6", xf, true, false, false, false, true},
			tcase{"4in4-esn", xf, true, false, true, false, false},
			tcase{"4in4-udp", xf, true, true, false, false, false},
			tcase{"transport4", xf, false, false, false, false, false},
		)
	}
	for _, c := range cases {
		t.Run(c.xf.name+"/"+c.name, func(t *testing.T) {
			tp := topology{tunnel: c.tunnel, udp: c.udp, xform: c.xf, innerV6: c.innerV6}
			if c.esn {
				tp.esnFlag = "-f esn"
			}
			tp.setAddrs(c.outer6)
			ca, cb := tp.configs()
			newPair := func() (*Engine, *Engine) {
				ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
				applyText(t, ea, ca)
				applyText(t, eb, cb)
				// Fixed IVs (CBC) so that both senders' bytes compare.
				ea.testIV = func(iv []byte) {
					for i := range iv {
						iv[i] = byte(i * 3)
					}
				}
				return ea, eb
			}
			raws := flowBatch(tp)
			encap := func(e *Engine, single bool) []*Packet {
				ps := make([]*Packet, len(raws))
				for i, r := range raws {
					ps[i] = packetOf(t, pool, r)
				}
				if single {
					for _, p := range ps {
						e.Outbound([]*Packet{p})
					}
				} else {
					e.Outbound(ps)
				}
				return ps
			}
			eaB, ebB := newPair()
			eaS, ebS := newPair()
			batch, single := encap(eaB, false), encap(eaS, true)
			for i := range batch {
				b, s := batch[i], single[i]
				if b.Verdict != VerdictForward || s.Verdict != VerdictForward {
					t.Fatalf("packet %d: batch %v/%v, single %v/%v", i, b.Verdict, b.Drop, s.Verdict, s.Drop)
				}
				if b.Seq != uint64(i+1) || s.Seq != b.Seq || b.SPI != s.SPI {
					t.Fatalf("packet %d: seq %d/%d spi %x/%x", i, b.Seq, s.Seq, b.SPI, s.SPI)
				}
				if !bytes.Equal(b.Data(), s.Data()) || !bytes.Equal(b.ESP(), s.ESP()) || !bytes.Equal(b.IPPayload(), s.IPPayload()) || b.Src != s.Src || b.Dst != s.Dst {
					t.Fatalf("packet %d: batch and single differ\nbatch  %x\nsingle %x", i, b.Data(), s.Data())
				}
			}
			decap := func(e *Engine, from []*Packet, single bool) []*Packet {
				qs := make([]*Packet, len(from))
				for i, p := range from {
					qs[i] = packetOf(t, pool, p.Data())
				}
				if single {
					for _, q := range qs {
						e.Inbound([]*Packet{q})
					}
				} else {
					e.Inbound(qs)
				}
				return qs
			}
			for _, single := range []bool{false, true} {
				eb := ebB
				if single {
					eb = ebS
				}
				qs := decap(eb, batch, single)
				for i, q := range qs {
					if q.Verdict != VerdictForward || q.Seq != uint64(i+1) {
						t.Fatalf("single=%v packet %d: inbound %v/%v seq %d", single, i, q.Verdict, q.Drop, q.Seq)
					}
					if c.tunnel && !bytes.Equal(q.Data(), raws[i]) {
						t.Fatalf("single=%v packet %d: got %x want %x", single, i, q.Data(), raws[i])
					}
					if !c.tunnel && !bytes.Equal(q.Data()[20:], raws[i][20:]) {
						t.Fatalf("single=%v packet %d: transport payload differs", single, i)
					}
				}
				// The same batch again: every packet is a replay.
				again := decap(eb, batch, single)
				for i, q := range again {
					if q.Drop != DropReplay {
						t.Fatalf("single=%v replayed packet %d: %v/%v", single, i, q.Verdict, q.Drop)
					}
				}
				for _, q := range append(qs, again...) {
					q.Release()
				}
			}
			for _, p := range append(batch, single...) {
				p.Release()
			}
		})
	}
}

// TestInboundBatchMixed: one inbound batch mixing two SAs, an unknown
// SPI, a duplicate of an earlier packet and a forged ICV between packets
// of one SA: the per-batch SA cache and policy reuse must not carry one
// packet's decision over to its neighbours.
func TestInboundBatchMixed(t *testing.T) {
	pool := NewPool(0)
	tp := topology{tunnel: true, xform: transforms[0]}
	tp.setAddrs(false)
	ca, cb := tp.configs()
	ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
	applyText(t, ea, ca)
	applyText(t, eb, cb)
	// A second tunnel SA on B (SPI 0x1003, other peer address).
	peer := netip.MustParseAddr("192.0.2.77")
	applyText(t, eb, cb+fmt.Sprintf("add %s %s esp 0x1003 -m tunnel %s;\nspdadd 192.168.3.0/24 192.168.2.0/24 any -P in ipsec esp/tunnel/%s-%s/require;\n",
		peer, tp.b, transforms[0].spec, peer, tp.b))
	ec := newTestEngine(t, Options{})
	applyText(t, ec, fmt.Sprintf("add %s %s esp 0x1003 -m tunnel %s;\nspdadd 192.168.3.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/%s-%s/require;\n",
		peer, tp.b, transforms[0].spec, peer, tp.b))
	hostC := netip.MustParseAddr("192.168.3.30")
	mk := func(e *Engine, src netip.Addr, n int) []byte {
		p := packetOf(t, pool, udpPacket(src, tp.hostB, 1000, 2000, bytes.Repeat([]byte{byte(n)}, n)))
		e.Outbound([]*Packet{p})
		if p.Verdict != VerdictForward {
			t.Fatalf("encap: %v/%v", p.Verdict, p.Drop)
		}
		d := append([]byte(nil), p.Data()...)
		p.Release()
		return d
	}
	a1, a2, a3, a4 := mk(ea, tp.hostA, 10), mk(ea, tp.hostA, 11), mk(ea, tp.hostA, 12), mk(ea, tp.hostA, 13)
	c1, c2 := mk(ec, hostC, 20), mk(ec, hostC, 21)
	unknown := append([]byte(nil), a1...)
	unknown[20+3] ^= 0x40 // SPI 0x1041
	ipv4HeaderChecksum(unknown[:20])
	forged := append([]byte(nil), a4...)
	forged[len(forged)-1] ^= 1
	want := []struct {
		data    []byte
		verdict Verdict
		drop    DropReason
		spi     uint32
	}{
		{a1, VerdictForward, DropNone, 0x1001},
		{c1, VerdictForward, DropNone, 0x1003},
		{a2, VerdictForward, DropNone, 0x1001},
		{unknown, VerdictDrop, DropNoSA, 0},
		{a1, VerdictDrop, DropReplay, 0x1001}, // duplicate within the batch
		{forged, VerdictDrop, DropAuth, 0x1001},
		{a3, VerdictForward, DropNone, 0x1001},
		{c2, VerdictForward, DropNone, 0x1003},
		{a4, VerdictForward, DropNone, 0x1001}, // the forged copy did not consume seq 4
	}
	qs := make([]*Packet, len(want))
	for i, w := range want {
		qs[i] = packetOf(t, pool, w.data)
	}
	eb.Inbound(qs)
	for i, w := range want {
		q := qs[i]
		if q.Verdict != w.verdict || q.Drop != w.drop || (w.spi != 0 && q.SPI != w.spi) {
			t.Errorf("packet %d: got %v/%v spi %x, want %v/%v spi %x", i, q.Verdict, q.Drop, q.SPI, w.verdict, w.drop, w.spi)
		}
		q.Release()
	}
}

// TestInboundPolicyMismatchBatch: packets of one flow that verify on an
// SA whose inbound policy does not cover them are all dropped, also when
// the policy decision is reused within the batch, while another flow in
// the same batch passes.
func TestInboundPolicyMismatchBatch(t *testing.T) {
	pool := NewPool(0)
	const sa = "add 192.0.2.1 192.0.2.2 esp 0x4001 -m tunnel -E aes-gcm-16 0x0102030405060708090a0b0c0d0e0f1011121314;\n"
	ea, eb := newTestEngine(t, Options{}), newTestEngine(t, Options{})
	applyText(t, ea, sa+"spdadd 192.168.0.0/16 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;\n")
	applyText(t, eb, sa+"spdadd 192.168.1.0/24 192.168.2.0/24 any -P in ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;\n")
	ok, bad := netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.9.10")
	srcs := []netip.Addr{bad, bad, ok, ok, bad, bad, ok}
	ps := make([]*Packet, len(srcs))
	for i, s := range srcs {
		ps[i] = packetOf(t, pool, udpPacket(s, innerB, 7, 9, []byte("payload")))
	}
	ea.Outbound(ps)
	qs := make([]*Packet, len(ps))
	for i, p := range ps {
		if p.Verdict != VerdictForward {
			t.Fatalf("encap %d: %v/%v", i, p.Verdict, p.Drop)
		}
		qs[i] = packetOf(t, pool, p.Data())
	}
	eb.Inbound(qs)
	for i, q := range qs {
		want := DropNone
		if srcs[i] == bad {
			want = DropPolicy
		}
		if q.Drop != want {
			t.Errorf("packet %d from %v: %v/%v, want drop %v", i, srcs[i], q.Verdict, q.Drop, want)
		}
	}
	if d := eb.Counters().Drops["policy-mismatch"]; d != 4 {
		t.Errorf("policy-mismatch drops %d, want 4", d)
	}
}

// TestEncapTunnel4MatchesGeneric: the specialised tunnel-mode IPv4 AEAD
// encapsulation (and its sequence-number writer) produce exactly what
// the general encap and setSeq produce, for every padding length, inner
// IPv4 and IPv6, and TOS / traffic class values.
func TestEncapTunnel4MatchesGeneric(t *testing.T) {
	pool := NewPool(0)
	for _, xf := range []transform{transforms[0], transforms[2], transforms[7]} {
		tp := topology{tunnel: true, xform: xf}
		tp.setAddrs(false)
		ca, _ := tp.configs()
		e := newTestEngine(t, Options{})
		applyText(t, e, ca)
		s := e.sad.Load().bySPI[0x1001][0]
		if !s.fast4 {
			t.Fatalf("%s: SA not eligible for encapTunnel4", xf.name)
		}
		for _, v6 := range []bool{false, true} {
			for _, tc := range []uint8{0, 0xb8, 0xff} {
				for n := 0; n < 40; n++ {
					var raw []byte
					if v6 {
						raw = udpPacket(netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::2"), 1, 2, make([]byte, n))
						raw[0], raw[1] = 0x60|tc>>4, tc<<4
					} else {
						raw = udpPacket(innerA, innerB, 1, 2, make([]byte, n))
						raw[1] = tc
						ipv4HeaderChecksum(raw[:20])
					}
					var h ipHeader
					if !parseIPInto(raw, &h) {
						t.Fatal("parse")
					}
					seq := uint64(0x1_2345_6789) + uint64(n)
					gen, fast := packetOf(t, pool, raw), packetOf(t, pool, raw)
					for _, p := range []*Packet{gen, fast} {
						p.b, p.Verdict = nil, VerdictDrop
					}
					if d := e.encap(gen, s, &h, true); d != DropNone {
						t.Fatal(d)
					}
					// Force the general setSeq (it runs whenever a test
					// IV hook is set); the hook writes what the AEAD path
					// writes, the sequence number.
					e.testIV = func(iv []byte) { put64(iv, seq) }
					e.setSeq(gen, s, seq)
					e.testIV = nil
					nh := uint8(protoIPIP)
					if v6 {
						nh = protoIPv6
					}
					if d := e.encapTunnel4(fast, s, h.tclass, nh); d != DropNone {
						t.Fatal(d)
					}
					setSeqTunnel4([]*crypto.Request{&fast.req}, s, seq)
					gr, fr := &gen.req, &fast.req
					// The ICV space after the trailer is written by the
					// crypto, not here: it holds the buffer's old bytes.
					gd, fd := gen.Data(), fast.Data()
					same := len(gd) == len(fd) && len(gd) > s.icvLen && bytes.Equal(gd[:len(gd)-s.icvLen], fd[:len(fd)-s.icvLen]) && gen.off == fast.off && gen.end == fast.end &&
						gen.l3len == fast.l3len && gen.l4off == fast.l4off && gen.espoff == fast.espoff &&
						gen.v6 == fast.v6 && gen.tunnel == fast.tunnel && gen.bytes == fast.bytes &&
						gen.Src == fast.Src && gen.Dst == fast.Dst && gen.SPI == fast.SPI && gen.Seq == fast.Seq &&
						gr.Dir == fr.Dir && gr.Status == fr.Status && gr.User == any(gen) && fr.User == any(fast)
					// Request slices: same place in the buffer and length,
					// and the same contents except the not yet written ICV.
					for i, pair := range [][2][]byte{{gr.ICV, fr.ICV}, {gr.Data, fr.Data}, {gr.IV, fr.IV}, {gr.AAD, fr.AAD}} {
						same = same && len(pair[0]) == len(pair[1]) && bufOffset(gen, pair[0]) == bufOffset(fast, pair[1]) &&
							(i == 0 || bytes.Equal(pair[0], pair[1]))
					}
					same = same && len(gr.AuthTrailer) == 0 && len(fr.AuthTrailer) == 0
					if !same {
						t.Fatalf("%s v6=%v tos=%#x n=%d: general and fast encapsulation differ\ngeneral %x\nfast    %x", xf.name, v6, tc, n, gen.Data(), fast.Data())
					}
					if checksum(fast.Data()[:20], 0) != 0 {
						t.Fatalf("outer IPv4 checksum")
					}
					gen.Release()
					fast.Release()
				}
			}
		}
	}
}
