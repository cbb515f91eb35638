package ipsec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

var (
	gcmKey  = []byte("0123456789abcdef" + "salt")
	innerA  = netip.MustParseAddr("192.168.1.10")
	innerB  = netip.MustParseAddr("192.168.2.20")
	netA    = netip.MustParsePrefix("192.168.1.0/24")
	netB    = netip.MustParsePrefix("192.168.2.0/24")
	gcmAlg  = crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	spiTest = uint32(0x2001)
)

// sealGCM builds an ESP packet with the standard library, independently
// of the engine: SPI | seq | IV | AES-GCM(plaintext) | tag.
func sealGCM(spi uint32, seq uint32, plaintext []byte) []byte {
	b, _ := aes.NewCipher(gcmKey[:16])
	g, _ := cipher.NewGCM(b)
	esp := binary.BigEndian.AppendUint32(nil, spi)
	esp = binary.BigEndian.AppendUint32(esp, seq)
	iv := binary.BigEndian.AppendUint64(nil, uint64(seq)+0x1000)
	nonce := append(append([]byte(nil), gcmKey[16:]...), iv...)
	esp = append(esp, iv...)
	return g.Seal(esp, nonce, plaintext, esp[:8])
}

// trailer appends default padding to 4-byte alignment, pad length and
// next header.
func trailer(payload []byte, nh uint8) []byte {
	pad := (4 - (len(payload)+2)%4) % 4
	out := append([]byte(nil), payload...)
	for i := 0; i < pad; i++ {
		out = append(out, byte(i+1))
	}
	return append(out, byte(pad), nh)
}

// dropEngine is a receiver with one tunnel SA from addrA to addrB and
// an inbound policy for netA -> netB.
func dropEngine(t *testing.T, window int) (*Engine, *sa) {
	e := newTestEngine(t, Options{})
	s := install(t, e, saConfig{Src: netip4(addrA), Dst: netip4(addrB), Proto: setkey.ProtoESP, SPI: spiTest,
		Mode: spd.ModeTunnel, ReplayWindow: window, Alg: gcmAlg, EncKey: gcmKey},
		spd.Policy{Dir: spd.DirIn, Sel: spd.Selector{Src: netA, Dst: netB}, Action: spd.IPsec,
			Requests: []spd.IPsecRequest{{Mode: spd.ModeTunnel, Src: addrA, Dst: addrB, Level: spd.LevelRequire}}})
	return e, s
}

// TestInboundDrops feeds malformed and hostile inputs and checks each is
// dropped under its own reason (and that good packets pass).
func TestInboundDrops(t *testing.T) {
	inner := udpPacket(innerA, innerB, 1, 2, []byte("hello"))
	good := func(seq uint32) []byte {
		return ipv4(addrA, addrB, protoESP, sealGCM(spiTest, seq, trailer(inner, protoIPIP)))
	}
	corrupt := func(b []byte, i int) []byte { b = append([]byte(nil), b...); b[i] ^= 0x40; return b }
	badPad := trailer(inner, protoIPIP)
	badPad = append(badPad[:len(badPad)-2], 9, protoIPIP) // pad length beyond the default bytes
	wrongInner := udpPacket(netip.MustParseAddr("192.168.9.9"), innerB, 1, 2, nil)
	type tc struct {
		name    string
		frame   Frame
		data    []byte
		verdict Verdict
		drop    DropReason
	}
	cases := []tc{
		{"good", FrameIP, good(1), VerdictForward, DropNone},
		{"replay", FrameIP, good(1), VerdictDrop, DropReplay},
		{"good2", FrameIP, good(2), VerdictForward, DropNone},
		{"empty", FrameIP, nil, VerdictDrop, DropMalformed},
		{"ip-truncated", FrameIP, good(3)[:30], VerdictDrop, DropMalformed},
		{"esp-short", FrameIP, ipv4(addrA, addrB, protoESP, []byte{0, 0, 0x20, 1, 0, 0}), VerdictDrop, DropShort},
		{"esp-no-room-for-icv", FrameIP, ipv4(addrA, addrB, protoESP, good(3)[20:50]), VerdictDrop, DropShort},
		{"unknown-spi", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(0x9999, 3, trailer(inner, 4))), VerdictDrop, DropNoSA},
		{"wrong-dst", FrameIP, ipv4(addrB, addrA, protoESP, sealGCM(spiTest, 3, trailer(inner, 4))), VerdictDrop, DropNoSA},
		{"bad-icv", FrameIP, corrupt(good(3), 60), VerdictDrop, DropAuth},
		{"bad-icv-tag", FrameIP, corrupt(good(4), len(good(4))-1), VerdictDrop, DropAuth},
		{"bad-length", FrameIP, ipv4(addrA, addrB, protoESP, append(sealGCM(spiTest, 5, trailer(inner, 4)), 0)), VerdictDrop, DropBadLength},
		{"bad-pad", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 6, badPad)), VerdictDrop, DropBadPad},
		{"pad-too-long", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 7, []byte{0, 0, 200, 4})), VerdictDrop, DropBadPad},
		{"next-header-tcp-in-tunnel", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 8, trailer(inner, protoTCP))), VerdictDrop, DropBadNextHeader},
		{"inner-garbage", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 9, trailer([]byte{0x45, 1, 2}, protoIPIP))), VerdictDrop, DropBadNextHeader},
		{"inner-v6-claimed-v4", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 10, trailer(inner, protoIPv6))), VerdictDrop, DropBadNextHeader},
		{"dummy", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 11, trailer([]byte{1, 2, 3}, protoNoNext))), VerdictDrop, DropDummy},
		{"policy-mismatch", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 12, trailer(wrongInner, protoIPIP))), VerdictDrop, DropPolicy},
		{"seq-zero", FrameIP, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, 0, trailer(inner, protoIPIP))), VerdictDrop, DropReplay},
		{"fragment", FrameIP, func() []byte { b := good(13); b[6] = 0x20; ipv4HeaderChecksum(b[:20]); return b }(), VerdictDrop, DropMalformed},
		{"nat-keepalive", FrameUDP, []byte{0xff}, VerdictDrop, DropKeepalive},
		{"non-esp-marker", FrameUDP, []byte{0, 0, 0, 0, 'i', 'k', 'e'}, VerdictLocal, DropNone},
		{"udp-short", FrameUDP, []byte{1, 2, 3}, VerdictDrop, DropShort},
		{"udp-to-esp-sa", FrameUDP, sealGCM(spiTest, 14, trailer(inner, 4)), VerdictDrop, DropNoSA},
		{"clear-ip-bypass", FrameIP, udpPacket(addrA, addrB, 1, 2, nil), VerdictBypass, DropNone},
		{"clear-ip-ipsec-required", FrameIP, inner, VerdictDrop, DropNotESP},
		{"bad-frame", Frame(9), good(15), VerdictDrop, DropMalformed},
		{"good-after-all", FrameIP, good(200), VerdictForward, DropNone},
		{"too-old", FrameIP, good(100), VerdictDrop, DropReplay},
	}
	e, s := dropEngine(t, 64)
	pool := NewPool(0)
	for _, c := range cases {
		p := pool.Get()
		p.SetData(c.data)
		p.Frame = c.frame
		p.Src, p.Dst = netip.AddrPortFrom(addrA, 4500), netip.AddrPortFrom(addrB, 4500)
		e.Inbound([]*Packet{p})
		if p.Verdict != c.verdict || p.Drop != c.drop {
			t.Errorf("%s: got %v/%v want %v/%v", c.name, p.Verdict, p.Drop, c.verdict, c.drop)
		}
		if c.name == "good" && !bytes.Equal(p.Data(), inner) {
			t.Errorf("good: inner %x", p.Data())
		}
		if c.name == "non-esp-marker" && string(p.Data()) != "ike" {
			t.Errorf("non-esp-marker: data %q", p.Data())
		}
		p.Release()
	}
	st := e.SAs()[0]
	if st.Drops["bad-icv"] != 2 || st.Drops["replay"] != 3 || st.InPackets != 3 {
		t.Errorf("SA status %+v", st)
	}
	if c := e.Counters(); c.Drops["no-sa"] != 3 || c.Local != 1 || c.Bypass != 1 {
		t.Errorf("counters %+v", c)
	}
	_ = s
}

// TestReplayWindowSizes: the window boundary through the whole engine.
func TestReplayWindowSizes(t *testing.T) {
	inner := udpPacket(innerA, innerB, 1, 2, nil)
	for _, w := range []int{0, 32, 64, 4096} {
		e, _ := dropEngine(t, w)
		pool := NewPool(0)
		send := func(seq uint32) DropReason {
			p := packetOf(t, pool, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, seq, trailer(inner, protoIPIP))))
			defer p.Release()
			e.Inbound([]*Packet{p})
			return p.Drop
		}
		top := uint32(10000)
		if d := send(top); d != DropNone {
			t.Fatalf("w=%d: top dropped: %v", w, d)
		}
		if w == 0 {
			if d := send(top); d != DropNone {
				t.Errorf("w=0: duplicate dropped without a window: %v", d)
			}
			continue
		}
		if d := send(top - uint32(w) + 1); d != DropNone {
			t.Errorf("w=%d: T-W+1 dropped: %v", w, d)
		}
		if d := send(top - uint32(w)); d != DropReplay {
			t.Errorf("w=%d: T-W got %v", w, d)
		}
		if d := send(top); d != DropReplay {
			t.Errorf("w=%d: duplicate got %v", w, d)
		}
	}
}

// TestOutboundPolicy: no policy, discard, none, use-without-SA, no SA.
func TestOutboundPolicy(t *testing.T) {
	e := newTestEngine(t, Options{})
	applyText(t, e, `
add 192.0.2.1 192.0.2.2 esp 0x3001 -m tunnel -E aes-gcm-16 0x0102030405060708090a0b0c0d0e0f1011121314;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.1.0/24 192.168.3.0/24 any -P out discard;
spdadd 192.168.1.0/24 192.168.4.0/24 any -P out none;
spdadd 192.168.1.0/24 192.168.5.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.9/use;
spdadd 192.168.1.0/24 192.168.6.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.9/require;
`)
	pool := NewPool(0)
	for _, c := range []struct {
		dst     string
		verdict Verdict
		drop    DropReason
	}{
		{"192.168.2.1", VerdictForward, DropNone},
		{"192.168.3.1", VerdictDrop, DropDiscard},
		{"192.168.4.1", VerdictBypass, DropNone},
		{"192.168.5.1", VerdictBypass, DropNone},
		{"192.168.6.1", VerdictDrop, DropNoOutSA},
		{"192.168.7.1", VerdictDrop, DropNoPolicy},
	} {
		raw := udpPacket(innerA, netip.MustParseAddr(c.dst), 1, 2, []byte("x"))
		p := packetOf(t, pool, raw)
		e.Outbound([]*Packet{p})
		if p.Verdict != c.verdict || p.Drop != c.drop {
			t.Errorf("%s: got %v/%v want %v/%v", c.dst, p.Verdict, p.Drop, c.verdict, c.drop)
		}
		if c.verdict == VerdictBypass && !bytes.Equal(p.Data(), raw) {
			t.Errorf("%s: bypass changed the packet", c.dst)
		}
		p.Release()
	}
	p := packetOf(t, pool, []byte{0x45, 0, 0})
	e.Outbound([]*Packet{p})
	if p.Drop != DropMalformed {
		t.Errorf("garbage: %v", p.Drop)
	}
	// No room: a packet filling the whole buffer cannot take the trailer.
	big := make([]byte, pool.MTU())
	copy(big, udpPacket(innerA, innerB, 1, 2, make([]byte, pool.MTU()-28)))
	p = packetOf(t, pool, big)
	e.Outbound([]*Packet{p})
	if p.Verdict != VerdictForward {
		t.Errorf("full-MTU packet: %v/%v (tailroom should cover the trailer)", p.Verdict, p.Drop)
	}
}

// TestInboundPadCheck covers the padding check for pad lengths 0 to 12
// (the one-load fast check up to 8, the loop beyond): default padding
// passes, any single wrong padding byte drops with DropBadPad.
func TestInboundPadCheck(t *testing.T) {
	e, _ := dropEngine(t, 64)
	pool := NewPool(0)
	seq := uint32(1)
	try := func(pt []byte) (Verdict, DropReason) {
		p := pool.Get()
		defer p.Release()
		p.SetData(ipv4(addrA, addrB, protoESP, sealGCM(spiTest, seq, pt)))
		seq++
		p.Frame = FrameIP
		e.Inbound([]*Packet{p})
		return p.Verdict, p.Drop
	}
	for pad := 0; pad <= 12; pad++ {
		// An inner length that makes payload, padding and the two
		// trailer bytes a multiple of 4.
		n := 14
		for (28+n+pad+2)%4 != 0 {
			n++
		}
		inner := udpPacket(innerA, innerB, 1, 2, make([]byte, n))
		mk := func() []byte {
			pt := append([]byte(nil), inner...)
			for i := 1; i <= pad; i++ {
				pt = append(pt, byte(i))
			}
			return append(pt, byte(pad), protoIPIP)
		}
		if v, d := try(mk()); v != VerdictForward {
			t.Errorf("pad %d: got %v/%v, want forward", pad, v, d)
		}
		for i := 0; i < pad; i++ {
			bad := mk()
			bad[len(inner)+i] ^= 0x10
			if v, d := try(bad); v != VerdictDrop || d != DropBadPad {
				t.Errorf("pad %d, byte %d wrong: got %v/%v, want drop/bad-pad", pad, i, v, d)
			}
		}
	}
}
