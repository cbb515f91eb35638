package ipsec

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

var (
	fwOnce sync.Once
	fwAES  *crypto.Framework
	fwErr  error
)

// testFramework is a process-wide framework with aesni admitted (self
// tests and a short calibration run once).
func testFramework(tb testing.TB) *crypto.Framework {
	tb.Helper()
	fwOnce.Do(func() {
		fwAES = crypto.New(crypto.Options{CalibrationBudget: 5 * time.Millisecond})
		fwErr = fwAES.Register(context.Background(), aesni.New())
	})
	if fwErr != nil {
		tb.Fatalf("aesni registration: %v", fwErr)
	}
	return fwAES
}

// newTestEngine returns an engine bound through the real framework + aesni.
func newTestEngine(tb testing.TB, opts Options) *Engine {
	tb.Helper()
	return newTestEngineOn(tb, testFramework(tb), opts)
}

// newTestEngineOn returns an engine bound through fw, closed at cleanup.
func newTestEngineOn(tb testing.TB, fw *crypto.Framework, opts Options) *Engine {
	tb.Helper()
	e := NewEngine(fw, opts)
	tb.Cleanup(func() { _ = e.Close(testwait.Context(tb)) })
	return e
}

// applyText parses and applies a setkey configuration.
func applyText(tb testing.TB, e *Engine, text string) {
	tb.Helper()
	cfg, err := setkey.Parse("test.conf", strings.NewReader(text))
	if err != nil {
		tb.Fatalf("parse: %v", err)
	}
	if err := e.Apply(context.Background(), cfg); err != nil {
		tb.Fatalf("apply: %v", err)
	}
}

// install adds an SA built directly (bypassing setkey validation, e.g.
// for the SPI 0 of a published vector) and sets the policies.
func install(tb testing.TB, e *Engine, c saConfig, pols ...spd.Policy) *sa {
	tb.Helper()
	c.EncKey = append([]byte(nil), c.EncKey...)
	c.AuthKey = append([]byte(nil), c.AuthKey...)
	s, err := newSA(c, e.fpKey[:], time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	b, err := e.bind(e.saLabel(s), crypto.SessionParams{Alg: c.Alg, CipherKey: c.EncKey, AuthKey: c.AuthKey}, e.completer(s))
	if err != nil {
		tb.Fatal(err)
	}
	s.bind = b
	s.zeroKeys()
	cur := e.sad.Load()
	e.sad.Store(buildTable(append(append([]*sa(nil), cur.all...), s)))
	if len(pols) > 0 {
		if err := e.spd.Replace(pols); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

func anyPolicy(dir spd.Dir, mode spd.Mode, src, dst netip.Addr) spd.Policy {
	r := spd.IPsecRequest{Mode: mode, Level: spd.LevelRequire}
	if mode == spd.ModeTunnel {
		r.Src, r.Dst = src, dst
	}
	return spd.Policy{Dir: dir, Action: spd.IPsec, Requests: []spd.IPsecRequest{r}}
}

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// ipv4 builds an IPv4 packet with the given protocol and payload.
func ipv4(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	b := make([]byte, 20+len(payload))
	putIPv4(b, 0, len(b), 0x1234, proto, src, dst)
	copy(b[20:], payload)
	return b
}

// ipv6 builds an IPv6 packet.
func ipv6(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	b := make([]byte, 40+len(payload))
	putIPv6(b, 0, len(payload), proto, src, dst)
	copy(b[40:], payload)
	return b
}

// udpPacket builds an IPv4/IPv6 UDP packet with a valid checksum-less
// header (IPv4) or zero checksum (the engine does not check inner ones).
func udpPacket(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	u := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(u, sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], payload)
	if src.Is4() {
		return ipv4(src, dst, protoUDP, u)
	}
	return ipv6(src, dst, protoUDP, u)
}

func packetOf(tb testing.TB, pool *Pool, data []byte) *Packet {
	tb.Helper()
	p := pool.Get()
	if !p.SetData(data) {
		tb.Fatalf("packet of %d bytes does not fit", len(data))
	}
	return p
}

var (
	addrA  = netip.MustParseAddr("192.0.2.1")
	addrB  = netip.MustParseAddr("192.0.2.2")
	addrA6 = netip.MustParseAddr("2001:db8::1")
	addrB6 = netip.MustParseAddr("2001:db8::2")
)
