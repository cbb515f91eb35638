package ipsec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

// refSA is what the reference check of FuzzInbound knows about an SA: the
// keys and transforms as written in the configuration text, read with a
// regular expression rather than the setkey parser.
type refSA struct {
	enc, auth       string
	encKey, authKey []byte
	esn             bool
}

var refSALine = regexp.MustCompile(`esp(?:-udp)? 0x([0-9a-f]+) .*?(-f esn )?-E (\S+) (?:0x([0-9a-f]+))?(?: ?-A (\S+) 0x([0-9a-f]+))?;`)

// refSAs reads the SAs of a configuration like fuzzConf.
func refSAs(tb testing.TB, conf string) map[uint32]refSA {
	tb.Helper()
	m := map[uint32]refSA{}
	for _, l := range refSALine.FindAllStringSubmatch(conf, -1) {
		spi, err := strconv.ParseUint(l[1], 16, 32)
		if err != nil {
			tb.Fatal(err)
		}
		ek, _ := hex.DecodeString(l[4])
		ak, _ := hex.DecodeString(l[6])
		m[uint32(spi)] = refSA{enc: l[3], auth: l[5], encKey: ek, authKey: ak, esn: l[2] != ""}
	}
	if len(m) == 0 {
		tb.Fatal("no SAs in the configuration")
	}
	return m
}

// refESP returns the ESP packet inside a FuzzInbound input (frame, data),
// found with a plain reading of RFC 791/8200 and RFC 3948; nil if there is
// none.
func refESP(frame Frame, d []byte) []byte {
	if frame != FrameIP {
		return d
	}
	if len(d) < 20 {
		return nil
	}
	var body []byte
	var proto byte
	switch d[0] >> 4 {
	case 4:
		hl, tot := int(d[0]&15)*4, int(binary.BigEndian.Uint16(d[2:]))
		if hl < 20 || tot < hl || tot > len(d) {
			return nil
		}
		body, proto = d[hl:tot], d[9]
	case 6:
		if len(d) < 40 {
			return nil
		}
		tot := 40 + int(binary.BigEndian.Uint16(d[4:]))
		if tot > len(d) {
			return nil
		}
		body, proto = d[40:tot], d[6]
		for proto == 0 || proto == 43 || proto == 60 { // hop-by-hop, routing, destination options
			if len(body) < 8 || len(body) < 8+int(body[1])*8 {
				return nil
			}
			proto, body = body[0], body[8+int(body[1])*8:]
		}
	default:
		return nil
	}
	switch proto {
	case 50:
		return body
	case 17:
		if len(body) < 8 {
			return nil
		}
		ul := int(binary.BigEndian.Uint16(body[4:]))
		if ul < 8 || ul > len(body) {
			return nil
		}
		return body[8:ul]
	}
	return nil
}

// refOpen verifies the ICV of esp under sa's keys with sequence number
// seq (its high half is the ESN's, when the SA has ESN) and returns the
// decrypted ESP payload with its trailer (RFC 4303, RFC 4106, RFC 7634,
// RFC 3602, RFC 2404, RFC 4868).
func refOpen(sa refSA, esp []byte, seq uint64) ([]byte, error) {
	if len(esp) < 8 {
		return nil, fmt.Errorf("%d bytes: shorter than an ESP header", len(esp))
	}
	if a, salt := refAEAD(sa); a != nil {
		if len(esp) < 8+8+a.Overhead() {
			return nil, fmt.Errorf("%d bytes: too short for %s", len(esp), sa.enc)
		}
		return a.Open(nil, append(salt, esp[8:16]...), esp[16:], refAAD(sa, esp, seq))
	}
	h, icvLen := refMAC(sa)
	if h == nil {
		return nil, fmt.Errorf("reference: no %q", sa.auth)
	}
	if len(esp) < 8+icvLen {
		return nil, fmt.Errorf("%d bytes: too short for %s", len(esp), sa.auth)
	}
	n := len(esp) - icvLen
	if !hmac.Equal(refICV(sa, esp[:n], seq), esp[n:]) {
		return nil, fmt.Errorf("%s ICV does not verify", sa.auth)
	}
	switch sa.enc {
	case "null":
		return append([]byte(nil), esp[8:n]...), nil
	case "aes-cbc":
		ct := esp[8+aes.BlockSize : n]
		if len(esp) < 8+aes.BlockSize || len(ct)%aes.BlockSize != 0 {
			return nil, fmt.Errorf("%d bytes: not whole AES blocks", len(ct))
		}
		b, _ := aes.NewCipher(sa.encKey)
		pt := make([]byte, len(ct))
		cipher.NewCBCDecrypter(b, esp[8:8+aes.BlockSize]).CryptBlocks(pt, ct)
		return pt, nil
	}
	return nil, fmt.Errorf("reference: no %q", sa.enc)
}

// checkForwardAuthenticated is FuzzInbound's property for a forwarded
// packet: its ESP input verifies under the SA's key with the sequence
// number the engine reports, and the forwarded packet is the payload
// decrypted here (tunnel mode: the inner packet, a prefix of the payload
// up to the inner header's length; transport mode: an IP header followed
// by the payload).
func checkForwardAuthenticated(t *testing.T, sas map[uint32]refSA, frame Frame, in []byte, p *Packet) {
	t.Helper()
	esp := refESP(frame, in)
	if len(esp) < 8 {
		t.Fatalf("forwarded, but the input holds no ESP packet: %x", in)
	}
	spi, seql := binary.BigEndian.Uint32(esp), binary.BigEndian.Uint32(esp[4:])
	sa, ok := sas[spi]
	if !ok || p.SPI != spi {
		t.Fatalf("forwarded under SPI %#x (reported %#x), which is not configured", spi, p.SPI)
	}
	if uint32(p.Seq) != seql || (!sa.esn && p.Seq>>32 != 0) {
		t.Fatalf("SPI %#x: reported sequence number %#x, the packet carries %#x", spi, p.Seq, seql)
	}
	pt, err := refOpen(sa, esp, p.Seq)
	if err != nil {
		t.Fatalf("forwarded a packet that is not authentic under SPI %#x: %v", spi, err)
	}
	payload, ok := refPayload(pt)
	if !ok {
		t.Fatalf("SPI %#x: forwarded a payload without a valid trailer", spi)
	}
	out := p.Data()
	switch {
	case len(out) > 0 && bytes.HasPrefix(payload, out):
	case len(out) > len(payload) && bytes.HasSuffix(out, payload) && refHeaderLen(out) == len(out)-len(payload):
	default:
		t.Fatalf("SPI %#x: forwarded %x, but the payload decrypted by the reference is %x", spi, out, payload)
	}
}

// refHeaderLen is the length of the IP header (IPv6: with extension
// headers) at the start of b, or -1.
func refHeaderLen(b []byte) int {
	if len(b) < 20 {
		return -1
	}
	switch b[0] >> 4 {
	case 4:
		return int(b[0]&15) * 4
	case 6:
		if len(b) < 40 {
			return -1
		}
		off, nh := 40, b[6]
		for nh == 0 || nh == 43 || nh == 60 {
			if len(b) < off+8 {
				return -1
			}
			nh, off = b[off], off+8+int(b[off+1])*8
		}
		return off
	}
	return -1
}

// refSeal is refOpen's inverse: the ESP packet SPI | seq | IV | sealed
// payload with RFC 4303 default padding to block bytes | ICV, built with
// the standard library.
func refSeal(sa refSA, spi uint32, seq uint64, payload []byte, nh byte) []byte {
	block := 4
	if sa.enc == "aes-cbc" {
		block = aes.BlockSize
	}
	pt := append([]byte(nil), payload...)
	for i := 1; (len(pt)+2)%block != 0; i++ {
		pt = append(pt, byte(i))
	}
	pt = append(pt, byte(len(pt)-len(payload)), nh)
	esp := binary.BigEndian.AppendUint32(nil, spi)
	esp = binary.BigEndian.AppendUint32(esp, uint32(seq))
	iv := binary.BigEndian.AppendUint64(nil, seq^0x5a5a5a5a)
	if a, salt := refAEAD(sa); a != nil {
		return a.Seal(append(esp, iv...), append(salt, iv...), pt, refAAD(sa, esp, seq))
	}
	switch sa.enc {
	case "aes-cbc":
		iv = append(iv, iv...)
		b, _ := aes.NewCipher(sa.encKey)
		ct := make([]byte, len(pt))
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, pt)
		esp = append(append(esp, iv...), ct...)
	default: // null
		esp = append(esp, pt...)
	}
	return append(esp, refICV(sa, esp, seq)...)
}

// refAEAD returns sa's AEAD and a copy of its salt (RFC 4106, RFC 7634:
// the key material's last 4 bytes), or nil if sa's cipher is not one.
func refAEAD(sa refSA) (cipher.AEAD, []byte) {
	key, salt := sa.encKey[:max(len(sa.encKey)-4, 0)], sa.encKey[max(len(sa.encKey)-4, 0):]
	var a cipher.AEAD
	switch sa.enc {
	case "aes-gcm-16":
		b, _ := aes.NewCipher(key)
		a, _ = cipher.NewGCM(b)
	case "chacha20-poly1305":
		a, _ = chacha20poly1305.New(key)
	default:
		return nil, nil
	}
	return a, append([]byte(nil), salt...)
}

// refAAD is the AEAD's additional data: SPI || seq, or with ESN SPI ||
// the 64-bit sequence number (RFC 4106 section 5).
func refAAD(sa refSA, esp []byte, seq uint64) []byte {
	if !sa.esn {
		return esp[:8:8]
	}
	return binary.BigEndian.AppendUint64(append([]byte(nil), esp[:4]...), seq)
}

// refMAC returns sa's HMAC hash and ICV length (RFC 2404, RFC 4868), or
// nil.
func refMAC(sa refSA) (func() hash.Hash, int) {
	switch sa.auth {
	case "hmac-sha1":
		return sha1.New, 12
	case "hmac-sha2-256":
		return sha256.New, 16
	}
	return nil, 0
}

// refICV is the truncated HMAC of the ESP packet without its ICV, with the
// ESN's high half appended when sa has ESN (RFC 4303 section 2.2.1).
func refICV(sa refSA, esp []byte, seq uint64) []byte {
	h, icvLen := refMAC(sa)
	m := hmac.New(h, sa.authKey)
	m.Write(esp)
	if sa.esn {
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(seq>>32)))
	}
	return m.Sum(nil)[:icvLen]
}

// refSeed is a FuzzInbound input sealed by refSeal, independently of the
// engine's outbound path and its SA selection.
type refSeed struct {
	name    string
	in      []byte // frame byte, data
	forward bool   // authentic: the engine must forward it
}

// refSeeds are, for each SA of fuzzConf, a packet in each of its framings
// and for each a forged ICV and a flipped ciphertext byte.
func refSeeds(tb testing.TB) []refSeed {
	sas := refSAs(tb, fuzzConf)
	udp := func(src, dst string, data string) []byte {
		return udpPacket(netip.MustParseAddr(src), netip.MustParseAddr(dst), 1, 2, []byte(data))
	}
	natt := func(esp []byte) []byte {
		u := binary.BigEndian.AppendUint16(nil, NATTPort)
		u = binary.BigEndian.AppendUint16(u, NATTPort)
		u = binary.BigEndian.AppendUint16(u, uint16(8+len(esp)))
		return append(append(u, 0, 0), esp...)
	}
	var seeds []refSeed
	add := func(name string, frame byte, data []byte) {
		in := append([]byte{frame}, data...)
		seeds = append(seeds, refSeed{name, in, true})
		icv := append([]byte(nil), in...)
		icv[len(icv)-1] ^= 0x80
		body := append([]byte(nil), in...)
		body[len(body)-30] ^= 0x01
		seeds = append(seeds, refSeed{name + "-forged-icv", icv, false}, refSeed{name + "-flipped-ciphertext", body, false})
	}
	gcm := refSeal(sas[0x1001], 0x1001, 7, udp("192.168.1.1", "192.168.2.1", "ref gcm tunnel"), protoIPIP)
	add("ref-gcm-tunnel-ip", byte(FrameIP), ipv4(addrA, addrB, protoESP, gcm))
	add("ref-gcm-tunnel-esp", byte(FrameESP), gcm)
	// Transport mode: the payload is the UDP segment.
	cbc := refSeal(sas[0x1002], 0x1002, 9, udp("192.0.2.1", "192.0.2.2", "ref cbc transport esn")[20:], protoUDP)
	add("ref-cbc-sha1-transport-esn-ip", byte(FrameIP), ipv4(addrA, addrB, protoESP, cbc))
	add("ref-cbc-sha1-transport-esn-esp", byte(FrameESP), cbc)
	cc := refSeal(sas[0x1003], 0x1003, 11, udp("192.168.3.1", "192.168.4.1", "ref chacha nat-t"), protoIPIP)
	add("ref-chacha-natt-ip", byte(FrameIP), ipv4(addrA, addrB, protoUDP, natt(cc)))
	add("ref-chacha-natt-udp", byte(FrameUDP), cc)
	// -m any with IPv6 inside: tunnel.
	null6 := refSeal(sas[0x1004], 0x1004, 13, udp("fd00:1::1", "fd00:2::1", "ref null v6 tunnel"), protoIPv6)
	add("ref-null-sha256-v6-ip", byte(FrameIP), ipv6(addrA6, addrB6, protoESP, null6))
	add("ref-null-sha256-v6-esp", byte(FrameESP)|0x80, null6)
	return seeds
}

// TestRefSeedsVerdicts: the engine forwards each SA's packets sealed by
// the standard library in every framing, and drops their forgeries.
// This keeps refSeeds meaningful as FuzzInbound seeds.
func TestRefSeedsVerdicts(t *testing.T) {
	e := fuzzEngine(t)
	for _, s := range refSeeds(t) {
		p := fuzzInboundPacket(s.in)
		if p == nil {
			t.Fatalf("%s does not fit", s.name)
		}
		e.Inbound([]*Packet{p})
		if got := p.Verdict == VerdictForward; got != s.forward {
			t.Errorf("%s (SPI %#x): verdict %v/%v, want forwarded %v", s.name, p.SPI, p.Verdict, p.Drop, s.forward)
		}
		p.Release()
	}
}

// checkOutboundSealed is FuzzOutbound's property for a forwarded packet:
// its ESP verifies under the SA's key with the sequence number the engine
// reports, which is above every one this SA used before (last, per SPI,
// kept across the fuzz target's calls), and it decrypts to the input
// (tunnel mode: the whole input packet; transport mode: its payload).
func checkOutboundSealed(t *testing.T, sas map[uint32]refSA, last map[uint32]uint64, in []byte, p *Packet) {
	t.Helper()
	esp := refESP(FrameIP, p.Data())
	if len(esp) < 8 {
		t.Fatalf("forwarded %x: no ESP packet inside", p.Data())
	}
	spi := binary.BigEndian.Uint32(esp)
	sa, ok := sas[spi]
	if !ok || p.SPI != spi {
		t.Fatalf("sealed under SPI %#x (reported %#x), which is not configured", spi, p.SPI)
	}
	if uint32(p.Seq) != binary.BigEndian.Uint32(esp[4:]) || p.Seq <= last[spi] {
		t.Fatalf("SPI %#x: sequence number %d after %d: reused or not the one on the wire", spi, p.Seq, last[spi])
	}
	last[spi] = p.Seq
	pt, err := refOpen(sa, esp, p.Seq)
	if err != nil {
		t.Fatalf("SPI %#x: the reference cannot open what the engine sealed: %v", spi, err)
	}
	payload, ok := refPayload(pt)
	if !ok {
		t.Fatalf("SPI %#x: sealed a payload without a valid trailer", spi)
	}
	tot := refTotalLen(in)
	if tot < 0 || tot > len(in) {
		t.Fatalf("SPI %#x: forwarded an input that is not an IP packet: %x", spi, in)
	}
	in = in[:tot]
	if !bytes.Equal(payload, in) && !(bytes.HasSuffix(in, payload) && refHeaderLen(in) == len(in)-len(payload)) {
		t.Fatalf("SPI %#x: sealed %x, the input was %x", spi, payload, in)
	}
}

// refPayload strips the ESP trailer (padding, pad length, next header)
// from a decrypted payload; false if the pad length does not fit.
func refPayload(pt []byte) ([]byte, bool) {
	if len(pt) < 2 || int(pt[len(pt)-2])+2 > len(pt) {
		return nil, false
	}
	return pt[:len(pt)-2-int(pt[len(pt)-2])], true
}

// refTotalLen is the length an IP packet's header gives it, or -1.
func refTotalLen(b []byte) int {
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		return int(binary.BigEndian.Uint16(b[2:]))
	case len(b) >= 40 && b[0]>>4 == 6:
		return 40 + int(binary.BigEndian.Uint16(b[4:]))
	}
	return -1
}
