package ipsec

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fuzzConf is the receiver of FuzzInbound: one SA per transform family
// and framing. Replay checks are off so that runs are deterministic.
const fuzzConf = `
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -r 0 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.2 esp 0x1002 -m transport -r 0 -f esn -E aes-cbc 0x000102030405060708090a0b0c0d0e0f -A hmac-sha1 0x000102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1[4500] 192.0.2.2[4500] esp-udp 0x1003 -m tunnel -r 0 -E chacha20-poly1305 0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223;
add 2001:db8::1 2001:db8::2 esp 0x1004 -m any -r 0 -E null -A hmac-sha2-256 0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P in ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//require;
spdadd 192.0.2.1 192.0.2.2 any -P in ipsec esp/transport//require;
spdadd 192.168.3.0/24 192.168.4.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.3.0/24 192.168.4.0/24 any -P in ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd fd00:1::/64 fd00:2::/64 any -P out ipsec esp/tunnel/2001:db8::1-2001:db8::2/require;
spdadd fd00:1::/64 fd00:2::/64 any -P in ipsec esp/tunnel/2001:db8::1-2001:db8::2/require;
`

var (
	fuzzOnce sync.Once
	fuzzEng  *Engine
	fuzzPool = NewPool(0)
)

func fuzzEngine(t testing.TB) *Engine {
	fuzzOnce.Do(func() {
		fuzzEng = NewEngine(testFramework(t), Options{})
		applyText(t, fuzzEng, fuzzConf)
	})
	return fuzzEng
}

// fuzzSeeds returns valid inputs produced by the engine itself (each a
// frame byte and data), covering every SA and framing.
func fuzzSeeds(t testing.TB) [][]byte {
	e := fuzzEngine(t)
	var seeds [][]byte
	add := func(frame Frame, b []byte) { seeds = append(seeds, append([]byte{byte(frame)}, b...)) }
	for i, raw := range [][]byte{
		udpPacket(netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("192.168.2.1"), 1, 2, []byte("tunnel gcm")),
		udpPacket(addrA, addrB, 3, 4, []byte("transport cbc esn")),
		udpPacket(netip.MustParseAddr("192.168.3.1"), netip.MustParseAddr("192.168.4.1"), 5, 6, []byte("udp chacha")),
		udpPacket(netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::1"), 7, 8, []byte("v6 null")),
	} {
		p := fuzzPool.Get()
		p.SetData(raw)
		e.Outbound([]*Packet{p})
		if p.Verdict != VerdictForward {
			t.Fatalf("seed %d: %v", i, p.Drop)
		}
		add(FrameIP, p.Data())
		add(FrameESP, p.ESP())
		if i == 2 {
			add(FrameUDP, p.ESP())
		}
		p.Release()
	}
	add(FrameUDP, []byte{0xff})
	add(FrameUDP, []byte{0, 0, 0, 0, 1})
	add(FrameIP, nil)
	return seeds
}

// FuzzInbound: decapsulation of arbitrary input never panics, and a
// forwarded result is a well-formed IP packet inside the buffer and
// authentic: the input's ESP packet verifies under the SA's key (checked
// with the standard library, see checkForwardAuthenticated), and what is
// forwarded is its payload.
func FuzzInbound(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	for _, s := range refSeeds(f) {
		f.Add(s.in)
	}
	sas := refSAs(f, fuzzConf)
	f.Fuzz(func(t *testing.T, in []byte) {
		e := fuzzEngine(t)
		if len(in) == 0 {
			return
		}
		p := fuzzInboundPacket(in)
		if p == nil {
			return
		}
		defer p.Release()
		e.Inbound([]*Packet{p})
		switch p.Verdict {
		case VerdictForward:
			if p.Drop != DropNone {
				t.Fatalf("forwarded with drop reason %v", p.Drop)
			}
			h, ok := parseIP(p.Data())
			if !ok || h.total != p.Len() {
				t.Fatalf("forwarded a malformed packet %x", p.Data())
			}
			checkForwardAuthenticated(t, sas, Frame(in[0]%4), in[1:], p)
		case VerdictDrop:
			if p.Drop == DropNone || p.Drop >= NumDropReasons {
				t.Fatalf("dropped without a reason")
			}
		}
		if p.off < 0 || p.end > len(p.buf) || p.off > p.end {
			t.Fatalf("bounds %d..%d", p.off, p.end)
		}
	})
}

// fuzzInboundPacket decodes a FuzzInbound input: in[0]%4 is the Frame,
// in[0]&0x80 selects IPv6 outer addresses (the destination unknown), the
// rest is the data. It returns nil if the data does not fit.
func fuzzInboundPacket(in []byte) *Packet {
	p := fuzzPool.Get()
	if !p.SetData(in[1:]) {
		p.Release()
		return nil
	}
	p.Frame = Frame(in[0] % 4)
	p.Src = netip.AddrPortFrom(addrA, 4500)
	p.Dst = netip.AddrPortFrom(addrB, 4500)
	if in[0]&0x80 != 0 {
		p.Src, p.Dst = netip.AddrPortFrom(addrA6, 0), netip.AddrPort{}
	}
	return p
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzInbound and
// testdata/fuzz/FuzzOutbound when
// KEEL_WRITE_CORPUS=1 (the committed corpus is what FuzzInbound replays
// in every plain "go test" run).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("KEEL_WRITE_CORPUS") != "1" {
		t.Skip("set KEEL_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzInbound")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seeds := fuzzSeeds(t)
	// Truncations and bit flips of the first seed.
	base := seeds[0]
	for _, n := range []int{1, 10, 21, 29, 40, len(base) - 1} {
		seeds = append(seeds, base[:n])
	}
	for _, i := range []int{10, 25, 30, 45, len(base) - 1} {
		b := append([]byte(nil), base...)
		b[i] ^= 1
		seeds = append(seeds, b)
	}
	writeCorpus(t, dir, seeds)
	for _, s := range refSeeds(t) {
		writeCorpusFile(t, filepath.Join(dir, s.name), s.in)
	}
	writeCorpus(t, filepath.Join("testdata", "fuzz", "FuzzOutbound"), outboundSeeds())
}

func writeCorpus(t *testing.T, dir string, seeds [][]byte) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range seeds {
		writeCorpusFile(t, filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), s)
	}
}

// writeCorpusFile writes one []byte corpus entry.
func writeCorpusFile(t *testing.T, path string, in []byte) {
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", in)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// outboundSeeds are plaintext packets for FuzzOutbound: each policy's
// traffic, IPv4 options, an IPv6 extension header, a fragment.
func outboundSeeds() [][]byte {
	v4 := udpPacket(netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("192.168.2.1"), 1, 2, []byte("tunnel gcm"))
	opts := append(append([]byte{0x46}, v4[1:20]...), 1, 1, 1, 0) // IHL 6: 4 bytes of NOP/EOL options
	opts = append(opts, v4[20:]...)
	opts[3]++ // total length + 4 (low byte; no carry for this size)
	opts[3] += 3
	ipv4HeaderChecksum(opts[:24])
	v6 := udpPacket(netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:2::1"), 7, 8, []byte("v6 null"))
	ext := append(append([]byte(nil), v6[:40]...), protoUDP, 0, 1, 4, 0, 0, 0, 0) // hop-by-hop, 8 bytes
	ext = append(ext, v6[40:]...)
	ext[6] = protoHopByHop
	ext[5] += 8
	frag := append([]byte(nil), v4...)
	frag[6] = 0x20
	return [][]byte{
		v4,
		udpPacket(addrA, addrB, 3, 4, []byte("transport cbc esn")),
		udpPacket(netip.MustParseAddr("192.168.3.1"), netip.MustParseAddr("192.168.4.1"), 5, 6, []byte("udp chacha")),
		v6, opts, ext, frag,
	}
}

// FuzzOutbound: encapsulation of arbitrary "plaintext" (a TUN device
// delivers whatever local software writes) never panics, and a forwarded
// result is a well-formed outer IP packet carrying ESP or ESP in UDP,
// sealed under the SA's key with a fresh sequence number, that a
// standard-library reference opens to the input (checkOutboundSealed).
func FuzzOutbound(f *testing.F) {
	for _, s := range outboundSeeds() {
		f.Add(s)
	}
	sas := refSAs(f, fuzzConf)
	last := map[uint32]uint64{}
	f.Fuzz(func(t *testing.T, in []byte) {
		e := fuzzEngine(t)
		p := fuzzPool.Get()
		defer p.Release()
		if !p.SetData(in) {
			return
		}
		e.Outbound([]*Packet{p})
		switch p.Verdict {
		case VerdictForward:
			h, ok := parseIP(p.Data())
			if !ok || h.total != p.Len() || (h.proto != protoESP && h.proto != protoUDP) {
				t.Fatalf("forwarded a malformed packet %x", p.Data())
			}
			if len(p.ESP()) < 8 || p.IPPayload() == nil {
				t.Fatal("ESP views missing")
			}
			checkOutboundSealed(t, sas, last, in, p)
		case VerdictDrop:
			if p.Drop == DropNone {
				t.Fatal("dropped without a reason")
			}
		}
	})
}

// FuzzInboundAuthenticated: arbitrary decrypted contents (as a peer that
// holds the key could send them) in the middle of a batch of valid
// packets of one flow. The trailer, padding and inner-header checks and
// the per-batch SA and policy reuse must drop the bad packet with a
// reason, never panic, and still forward its valid neighbours. in[0]
// selects the next header, the rest is the plaintext before the trailer
// is checked (it carries its own padding and pad length bytes, or not).
func FuzzInboundAuthenticated(f *testing.F) {
	good := trailer(udpPacket(innerA, innerB, 1, 2, []byte("neighbour")), protoIPIP)
	f.Add(append([]byte{protoIPIP}, good...))
	f.Add(append([]byte{protoIPv6}, good...))
	f.Add(append([]byte{protoIPIP}, trailer(udpPacket(innerA, netip.MustParseAddr("192.168.9.9"), 1, 2, nil), protoIPIP)...))
	f.Add([]byte{protoIPIP, 0x45, 0, 0, 24, 0, 0, 0x20, 0, 64, 17, 0, 0, 192, 168, 1, 10, 192, 168, 2, 20, 0, 1, 0, 2, 1, 2, 2, 4})
	f.Add([]byte{protoNoNext, 1, 2, 2, 59})
	f.Add([]byte{protoIPIP, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in)%4 != 1 || len(in) > 1500 {
			return // GCM: ciphertext length a multiple of 4; one MTU
		}
		e, _ := dropEngine(t, 64)
		pool := NewPool(0)
		var pkts []*Packet
		seq := uint32(1)
		add := func(plain []byte) *Packet {
			p := packetOf(t, pool, ipv4(addrA, addrB, protoESP, sealGCM(spiTest, seq, plain)))
			seq++
			pkts = append(pkts, p)
			return p
		}
		plain := append([]byte(nil), in[1:]...)
		if len(plain) > 0 {
			plain[len(plain)-1] = in[0]
		}
		add(good)
		add(good)
		bad := add(plain)
		add(good)
		e.Inbound(pkts)
		for i, p := range pkts {
			if p == bad {
				if p.Verdict == VerdictForward {
					h, ok := parseIP(p.Data())
					if !ok || h.total != p.Len() || p.Drop != DropNone {
						t.Fatalf("forwarded a malformed packet %x", p.Data())
					}
				} else if p.Drop == DropNone || p.Drop >= NumDropReasons {
					t.Fatalf("bad packet: %v without a reason", p.Verdict)
				}
				continue
			}
			if p.Verdict != VerdictForward {
				t.Fatalf("valid neighbour %d: %v/%v", i, p.Verdict, p.Drop)
			}
		}
	})
}
