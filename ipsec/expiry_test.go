package ipsec

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestExpiryReasons: beyond TestLifetimes, SAs says which lifetime made
// an SA dying (soft bytes, soft time, 15/16 of the sequence space) while
// it still carries traffic, an ESN SA dies at the end of the 64-bit space
// with ExpiredSeq, and a mature SA has no Expired and no OnExpire event.
func TestExpiryReasons(t *testing.T) {
	var mu sync.Mutex
	events := map[uint32][]string{}
	e := newTestEngine(t, Options{Tick: time.Hour, OnExpire: func(st SAStatus, hard bool) {
		mu.Lock()
		events[st.SPI] = append(events[st.SPI], fmt.Sprintf("%v %s %s", hard, st.State, st.Expired))
		mu.Unlock()
	}})
	pool := NewPool(0)
	var conf strings.Builder
	for i, opts := range []string{"-bs 60 -bh 100000", "", "-ls 1 -lh 100", "-f esn", "-ls 100 -lh 200 -bh 1000000"} {
		fmt.Fprintf(&conf, "add 192.0.2.1 192.0.2.%d esp 0x%x -m tunnel %s -E aes-gcm-16 0x%02x0102030405060708090a0b0c0d0e0f10111213;\n", 2+i, 0x2001+i, opts, i)
		fmt.Fprintf(&conf, "spdadd 192.168.1.0/24 192.168.%d.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.%d/require;\n", 2+i, 2+i)
	}
	applyText(t, e, conf.String())
	send := func(i, n int) *Packet {
		var ps []*Packet
		for range n {
			ps = append(ps, packetOf(t, pool, udpPacket(innerA, netip.AddrFrom4([4]byte{192, 168, byte(2 + i), 1}), 1, 2, make([]byte, 7))))
		}
		e.Outbound(ps)
		return ps[len(ps)-1]
	}
	stateOf := func(spi uint32) string {
		for _, st := range e.SAs() {
			if st.SPI == spi {
				return st.State + " " + st.Expired
			}
		}
		t.Fatalf("no SA 0x%x", spi)
		return ""
	}
	now := time.Now()
	send(0, 2) // 70 bytes: past the soft 60
	seekSeq(e.sad.Load().bySPI[0x2002][0], 1<<32-1-(1<<32-1)/16-1)
	send(1, 1) // the first number of the last 16th
	seekSeq(e.sad.Load().bySPI[0x2004][0], 1<<64-3)
	send(3, 4) // past 2^64-1
	e.expire(now.Add(1500 * time.Millisecond))
	for spi, want := range map[uint32]string{
		0x2001: "dying " + ExpiredBytes, 0x2002: "dying " + ExpiredSeq, 0x2003: "dying " + ExpiredTime,
		0x2004: "dead " + ExpiredSeq, 0x2005: "mature ",
	} {
		if got := stateOf(spi); got != want {
			t.Errorf("SA 0x%x: %q, want %q", spi, got, want)
		}
	}
	for i := range 3 {
		if p := send(i, 1); p.Verdict != VerdictForward {
			t.Errorf("dying SA 0x%x: %v", 0x2001+i, p.Drop)
		}
	}
	e.expire(now.Add(2 * time.Second)) // nothing new
	mu.Lock()
	defer mu.Unlock()
	for spi, want := range map[uint32][]string{
		0x2001: {"false dying bytes"}, 0x2002: {"false dying sequence numbers"}, 0x2003: {"false dying time"},
		0x2004: {"false dead sequence numbers", "true dead sequence numbers"},
	} {
		if got := events[spi]; !slices.Equal(got, want) {
			t.Errorf("OnExpire for 0x%x: %q, want %q", spi, got, want)
		}
	}
	if got := events[0x2005]; len(got) != 0 {
		t.Errorf("OnExpire for the mature SA: %q", got)
	}
}
