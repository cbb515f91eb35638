package ipsec

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestExpiryReasons: OnExpire reports, once per transition and in order
// (soft, then hard), which lifetime ran out, and SAs says it too: bytes
// (-bs/-bh), time (-ls/-lh), the 32-bit sequence space (soft at 15/16 of
// it, hard at 2^32-1) and the 64-bit one of an ESN SA.
func TestExpiryReasons(t *testing.T) {
	type event struct {
		hard    bool
		expired string
		state   string
	}
	var mu sync.Mutex
	events := map[uint32][]event{}
	e := newTestEngine(t, Options{Tick: time.Hour, OnExpire: func(st SAStatus, hard bool) {
		mu.Lock()
		events[st.SPI] = append(events[st.SPI], event{hard, st.Expired, st.State})
		mu.Unlock()
	}})
	pool := NewPool(0)
	applyText(t, e, `
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -bs 60 -bh 100 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.3 esp 0x1003 -m tunnel -E aes-gcm-16 0x030102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.4 esp 0x1004 -m tunnel -ls 1 -lh 2 -E aes-gcm-16 0x040102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.5 esp 0x1005 -m tunnel -f esn -E aes-gcm-16 0x050102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.6 esp 0x1006 -m tunnel -ls 100 -lh 200 -bh 1000000 -E aes-gcm-16 0x060102030405060708090a0b0c0d0e0f10111213;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.1.0/24 192.168.3.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.3/require;
spdadd 192.168.1.0/24 192.168.4.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.4/require;
spdadd 192.168.1.0/24 192.168.5.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.5/require;
spdadd 192.168.1.0/24 192.168.6.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.6/require;
`)
	send := func(dst string, n int) {
		var ps []*Packet
		for range n {
			ps = append(ps, packetOf(t, pool, udpPacket(innerA, netip.MustParseAddr(dst), 1, 2, make([]byte, 7))))
		}
		e.Outbound(ps)
		for _, p := range ps {
			p.Release()
		}
	}
	now := time.Now()
	stateOf := func(spi uint32) SAStatus {
		for _, st := range e.SAs() {
			if st.SPI == spi {
				return st
			}
		}
		t.Fatalf("no SA 0x%x", spi)
		return SAStatus{}
	}
	// Bytes: 35 inner bytes a packet, soft at 60, hard at 100.
	send("192.168.2.1", 2)
	e.expire(now)
	if st := stateOf(0x1001); st.State != "dying" || st.Expired != ExpiredBytes {
		t.Errorf("0x1001 after 70 bytes: %s %q", st.State, st.Expired)
	}
	send("192.168.2.1", 1)
	// Sequence space: soft at 2^32-1 - (2^32-1)/16, hard at 2^32-1.
	s3 := e.sad.Load().bySPI[0x1003][0]
	seekSeq(s3, 1<<32-1-(1<<32-1)/16-1)
	send("192.168.3.1", 1)
	e.expire(now)
	if st := stateOf(0x1003); st.State != "dying" || st.Expired != ExpiredSeq {
		t.Errorf("0x1003 at 15/16: %s %q", st.State, st.Expired)
	}
	seekSeq(s3, 1<<32-2)
	send("192.168.3.1", 1)
	// ESN: the 64-bit space.
	seekSeq(e.sad.Load().bySPI[0x1005][0], 1<<64-3)
	send("192.168.5.1", 4)
	// Time, with a synthetic clock: soft at 1 s, hard at 2 s.
	e.expire(now.Add(1500 * time.Millisecond))
	if st := stateOf(0x1004); st.State != "dying" || st.Expired != ExpiredTime {
		t.Errorf("0x1004 after 1.5 s: %s %q", st.State, st.Expired)
	}
	e.expire(now.Add(2500 * time.Millisecond))
	// A second pass reports nothing new.
	e.expire(now.Add(3 * time.Second))

	mu.Lock()
	defer mu.Unlock()
	for spi, want := range map[uint32][]event{
		0x1001: {{false, ExpiredBytes, "dying"}, {true, ExpiredBytes, "dead"}},
		0x1003: {{false, ExpiredSeq, "dying"}, {true, ExpiredSeq, "dead"}},
		0x1004: {{false, ExpiredTime, "dying"}, {true, ExpiredTime, "dead"}},
		0x1005: {{false, ExpiredSeq, "dead"}, {true, ExpiredSeq, "dead"}},
	} {
		got := events[spi]
		if len(got) != len(want) {
			t.Errorf("OnExpire for 0x%x: %+v, want %+v", spi, got, want)
			continue
		}
		for i := range want {
			// The soft event of an SA that went dead in one step is
			// reported with the dead SA: its Expired is the hard reason.
			if got[i] != want[i] {
				t.Errorf("OnExpire for 0x%x event %d: %+v, want %+v", spi, i, got[i], want[i])
			}
		}
	}
	if got := events[0x1006]; len(got) != 0 {
		t.Errorf("OnExpire for the mature SA 0x1006: %+v", got)
	}
	if st := stateOf(0x1006); st.State != "mature" || st.Expired != "" {
		t.Errorf("0x1006: %s %q", st.State, st.Expired)
	}
}
