package ipsec

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/ipsec/setkey"
)

// TestApplyAtomicPerBatch: while another goroutine applies two
// configurations in turn, every packet is processed entirely under one
// of them, never with the policies of one and the SAs of the other.
// C1 has SA 0x1001 (reqid 1) and a policy unique:1; C2 adds SA 0x1002
// (reqid 2) and the policy becomes unique:2. A packet that met C2's
// policy with C1's SAs would be dropped as no-outbound-sa, which neither
// configuration does. Inbound likewise: SA 0x2002 exists in C2 only, and
// C1's inbound policy (unique:1) rejects it; a packet decapsulated by
// C2's SA and checked against C1's policy would be a policy-mismatch,
// which neither configuration gives.
func TestApplyAtomicPerBatch(t *testing.T) {
	const sas1 = `flush;
spdflush;
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -r 0 -u 1 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.2 192.0.2.1 esp 0x2001 -m tunnel -r 0 -u 1 -E aes-gcm-16 0x100102030405060708090a0b0c0d0e0f10111213;
`
	const sas2 = `add 192.0.2.1 192.0.2.2 esp 0x1002 -m tunnel -r 0 -u 2 -E aes-gcm-16 0x200102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.2 192.0.2.1 esp 0x2002 -m tunnel -r 0 -u 2 -E aes-gcm-16 0x300102030405060708090a0b0c0d0e0f10111213;
`
	pols := func(n string) string {
		return "spdadd 10.1.0.0/16 10.2.0.0/16 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/unique:" + n + ";\n" +
			"spdadd 10.2.0.0/16 10.1.0.0/16 any -P in ipsec esp/tunnel/192.0.2.2-192.0.2.1/unique:" + n + ";\n"
	}
	c1, c2 := sas1+pols("1"), sas1+sas2+pols("2")
	e := newTestEngine(t, Options{})
	applyText(t, e, c1)
	// The sender holds both inbound SAs with reqids that select them.
	snd := newTestEngine(t, Options{})
	applyText(t, snd, sas1+sas2+
		"spdadd 10.2.0.1/32 10.1.0.0/16 any -P out ipsec esp/tunnel/192.0.2.2-192.0.2.1/unique:1;\n"+
		"spdadd 10.2.0.2/32 10.1.0.0/16 any -P out ipsec esp/tunnel/192.0.2.2-192.0.2.1/unique:2;\n")
	pool := NewPool(0)
	const n = 32
	var wire [n][]byte
	for i := range wire {
		src := netip.MustParseAddr([]string{"10.2.0.1", "10.2.0.2"}[i%2])
		p := packetOf(t, pool, udpPacket(src, netip.MustParseAddr("10.1.0.1"), 1000, 2000, make([]byte, 64)))
		snd.Outbound([]*Packet{p})
		if p.Verdict != VerdictForward {
			t.Fatalf("sender: %v %v", p.Verdict, p.Drop)
		}
		wire[i] = append([]byte(nil), p.Data()...)
		pool.Put(p)
	}
	parse := func(s string) *setkey.Config {
		cfg, err := setkey.Parse("c.conf", strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.Apply(context.Background(), parse([]string{c2, c1}[i%2])); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	ps := make([]*Packet, n)
	for i := range ps {
		ps[i] = pool.Get()
	}
	deadline := time.Now().Add(2 * time.Second)
	if testing.Short() {
		deadline = time.Now().Add(300 * time.Millisecond)
	}
	plain := udpPacket(netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1"), 1000, 2000, make([]byte, 64))
	for round := 0; time.Now().Before(deadline); round++ {
		for _, p := range ps {
			p.SetData(plain)
		}
		e.Outbound(ps)
		for i, p := range ps {
			// Forward on the SA of C1 or C2, or dropped because C1's
			// Apply deleted 0x1002 under it: once selected (busy), or
			// before (expired), or with its nonce range retired before
			// its sequence numbers were assigned (seq-overflow); the
			// last two without an SPI.
			ok := (p.Verdict == VerdictForward && (p.SPI == 0x1001 || p.SPI == 0x1002)) ||
				((p.SPI == 0x1002 || p.SPI == 0) && (p.Drop == DropBusy || p.Drop == DropExpired || p.Drop == DropSeqOverflow))
			if !ok {
				t.Fatalf("round %d: outbound packet %d: %v %v SPI %#x: under neither configuration", round, i, p.Verdict, p.Drop, p.SPI)
			}
		}
		for i, p := range ps {
			p.SetData(wire[i])
		}
		e.Inbound(ps)
		for i, p := range ps {
			var ok bool
			if i%2 == 0 { // SA 0x2001: C1 accepts, C2's policy rejects
				ok = p.Verdict == VerdictForward || p.Drop == DropPolicy
			} else { // SA 0x2002: C2 accepts, C1 has no such SA
				ok = p.Verdict == VerdictForward || p.Drop == DropNoSA || p.Drop == DropBusy || p.Drop == DropExpired
			}
			if !ok {
				t.Fatalf("round %d: inbound packet %d: %v %v SPI %#x: under neither configuration", round, i, p.Verdict, p.Drop, p.SPI)
			}
		}
	}
}
