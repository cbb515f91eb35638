package ipsec

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/ipsec/setkey"
)

const baseConf = `flush;
spdflush;
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.2 192.0.2.1 esp 0x1002 -m tunnel -E aes-cbc 0x000102030405060708090a0b0c0d0e0f -A hmac-sha1 0x000102030405060708090a0b0c0d0e0f10111213;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.2.0/24 192.168.1.0/24 any -P in ipsec esp/tunnel/192.0.2.2-192.0.2.1/require;
`

func parse(t *testing.T, text string) *setkey.Config {
	t.Helper()
	cfg, err := setkey.Parse("test.conf", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func sendOne(t *testing.T, e *Engine, pool *Pool) *Packet {
	t.Helper()
	p := packetOf(t, pool, udpPacket(innerA, innerB, 1, 2, []byte("payload")))
	e.Outbound([]*Packet{p})
	return p
}

// TestApplyAllOrNothing: a configuration whose last statement fails leaves
// the SAD and SPD exactly as they were, and zeroes the keys it carried.
func TestApplyAllOrNothing(t *testing.T) {
	e := newTestEngine(t, Options{})
	applyText(t, e, baseConf)
	before, pols := e.SAs(), e.Policies()
	for _, c := range []struct {
		name, text string
		want       error
	}{
		{"delete-missing", "flush;\nadd 192.0.2.1 192.0.2.3 esp 0x5000 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\ndelete 192.0.2.1 192.0.2.9 esp 0x7777;\n", ErrNoSuchSA},
		{"duplicate-sa", "add 192.0.2.1 192.0.2.2 esp 0x1001 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n", ErrSAExists},
		{"duplicate-policy", "spdadd 192.168.1.0/24 192.168.2.0/24 any -P out none;\n", ErrPolicy},
		{"spddelete-missing", "spdflush;\nspddelete 10.0.0.0/8 10.1.0.0/16 any -P out;\n", ErrPolicy},
		{"bundle", "spdadd 10.0.0.0/8 10.1.0.0/16 any -P out ipsec esp/transport//require esp/transport//require;\n", ErrUnsupported},
	} {
		cfg := parse(t, c.text)
		var keys [][]byte
		for _, op := range cfg.Ops {
			if op.SA != nil && len(op.SA.EncKey) > 0 {
				keys = append(keys, op.SA.EncKey[:len(op.SA.EncKey):len(op.SA.EncKey)])
			}
		}
		err := e.Apply(context.Background(), cfg)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), "test.conf:") {
			t.Errorf("%s: err = %v, want %v with position", c.name, err, c.want)
		}
		for _, k := range keys {
			for _, b := range k {
				if b != 0 {
					t.Errorf("%s: key material not zeroed after Apply", c.name)
					break
				}
			}
		}
		if got := e.SAs(); len(got) != len(before) || got[0].SPI != before[0].SPI || got[1].SPI != before[1].SPI {
			t.Errorf("%s: SAD changed: %+v", c.name, got)
		}
		if got := e.Policies(); len(got) != len(pols) {
			t.Errorf("%s: SPD changed: %d policies", c.name, len(got))
		}
	}
}

// TestApplyKeepsState: re-applying the same file (flush + add) keeps the
// installed SA and its sequence counter, so no AEAD nonce is ever reused;
// changing the key replaces the SA; delete removes it and closes its
// binding.
func TestApplyKeepsState(t *testing.T) {
	e := newTestEngine(t, Options{})
	pool := NewPool(0)
	applyText(t, e, baseConf)
	s1 := e.sad.Load().bySPI[0x1001][0]
	for i := 0; i < 3; i++ {
		if p := sendOne(t, e, pool); p.Seq != uint64(i+1) {
			t.Fatalf("seq %d", p.Seq)
		}
	}
	applyText(t, e, baseConf)
	if e.sad.Load().bySPI[0x1001][0] != s1 {
		t.Fatal("identical re-apply replaced the SA")
	}
	if p := sendOne(t, e, pool); p.Seq != 4 {
		t.Fatalf("after re-apply seq = %d, want 4 (nonce reuse!)", p.Seq)
	}
	if s1.cfg.EncKey != nil || s1.cfg.AuthKey != nil {
		t.Error("SA keeps key copies after binding")
	}
	// New key: a new SA starting at 1; the old one is closed.
	applyText(t, e, strings.Replace(baseConf, "0x000102030405060708090a0b0c0d0e0f10111213;", "0xff0102030405060708090a0b0c0d0e0f10111213;", 1))
	s2 := e.sad.Load().bySPI[0x1001][0]
	if s2 == s1 || s1.state.Load() != stateDeleted || s1.fp != [32]byte{} {
		t.Fatal("rekeyed SA not replaced / old not closed and wiped")
	}
	if p := sendOne(t, e, pool); p.Seq != 1 {
		t.Fatalf("new SA seq %d", p.Seq)
	}
	applyText(t, e, "delete 192.0.2.1 192.0.2.2 esp 0x1001;")
	if len(e.SAs()) != 1 || s2.state.Load() != stateDeleted {
		t.Fatal("delete did not remove the SA")
	}
	if p := sendOne(t, e, pool); p.Drop != DropNoOutSA {
		t.Fatalf("after delete: %v", p.Drop)
	}
	for _, st := range e.SAs() {
		if st.Provider != "aesni" {
			t.Errorf("provider %q", st.Provider)
		}
	}
}

// TestLifetimes: hard byte limit, sequence exhaustion without ESN, time
// lifetimes and OnExpire, with the lifetime that ran out.
func TestLifetimes(t *testing.T) {
	var mu sync.Mutex
	events := map[uint32][]bool{}
	reasons := map[uint32][]string{}
	e := newTestEngine(t, Options{Tick: 10 * time.Millisecond, OnExpire: func(st SAStatus, hard bool) {
		mu.Lock()
		events[st.SPI] = append(events[st.SPI], hard)
		reasons[st.SPI] = append(reasons[st.SPI], st.Expired)
		mu.Unlock()
	}})
	pool := NewPool(0)
	applyText(t, e, `
add 192.0.2.1 192.0.2.2 esp 0x1001 -m tunnel -bs 60 -bh 100 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.3 esp 0x1003 -m tunnel -E aes-gcm-16 0x030102030405060708090a0b0c0d0e0f10111213;
add 192.0.2.1 192.0.2.4 esp 0x1004 -m tunnel -ls 1 -lh 2 -E aes-gcm-16 0x040102030405060708090a0b0c0d0e0f10111213;
spdadd 192.168.1.0/24 192.168.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 192.168.1.0/24 192.168.3.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.3/require;
spdadd 192.168.1.0/24 192.168.4.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.4/require;
`)
	send := func(dst string, n int) []*Packet {
		var ps []*Packet
		for i := 0; i < n; i++ {
			ps = append(ps, packetOf(t, pool, udpPacket(innerA, netip.MustParseAddr(dst), 1, 2, make([]byte, 7))))
		}
		e.Outbound(ps)
		return ps
	}
	// Byte lifetime: 35 inner bytes per packet; soft at 60, hard at 100.
	ps := send("192.168.2.1", 3)
	for _, p := range ps {
		if p.Verdict != VerdictForward {
			t.Fatalf("bytes: %v", p.Drop)
		}
	}
	if ps := send("192.168.2.1", 1); ps[0].Drop != DropExpired {
		t.Fatalf("after hard bytes: %v", ps[0].Drop)
	}
	// Sequence exhaustion: without ESN the last sequence number is 2^32-1.
	s3 := e.sad.Load().bySPI[0x1003][0]
	s3.seq.Store(1<<32 - 3)
	ps = send("192.168.3.1", 4)
	want := []DropReason{DropNone, DropNone, DropSeqOverflow, DropSeqOverflow}
	for i, p := range ps {
		if p.Drop != want[i] {
			t.Errorf("seq exhaustion packet %d: %v (seq %d)", i, p.Drop, p.Seq)
		}
	}
	if ps[1].Seq != 1<<32-1 {
		t.Errorf("last seq %d", ps[1].Seq)
	}
	if ps := send("192.168.3.1", 1); ps[0].Drop != DropExpired {
		t.Errorf("after exhaustion: %v", ps[0].Drop)
	}
	// Time lifetimes via housekeeping: soft at 1s, hard at 2s (checked
	// with a synthetic clock rather than waiting).
	e.expire(time.Now().Add(1500 * time.Millisecond))
	e.expire(time.Now().Add(2500 * time.Millisecond))
	if ps := send("192.168.4.1", 1); ps[0].Drop != DropExpired {
		t.Errorf("after hard time: %v", ps[0].Drop)
	}
	mu.Lock()
	defer mu.Unlock()
	for spi, want := range map[uint32][]bool{0x1001: {false, true}, 0x1003: {false, true}, 0x1004: {false, true}} {
		got := events[spi]
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("OnExpire for 0x%x: %v, want %v", spi, got, want)
		}
	}
	// An SA past both limits in one step reports the hard limit's reason
	// with both events.
	for spi, want := range map[uint32]string{0x1001: ExpiredBytes, 0x1003: ExpiredSeq, 0x1004: ExpiredTime} {
		if got := reasons[spi]; len(got) != 2 || got[0] != want || got[1] != want {
			t.Errorf("OnExpire for 0x%x: Expired %q, want %q twice", spi, got, want)
		}
	}
}

// TestCloseZeroes: Close removes every SA and closes the bindings.
func TestCloseZeroes(t *testing.T) {
	e := NewEngine(testFramework(t), Options{})
	applyText(t, e, baseConf)
	all := e.sad.Load().all
	if err := e.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.state.Load() != stateDeleted || s.fp != [32]byte{} || s.cfg.EncKey != nil {
			t.Error("SA not wiped on Close")
		}
	}
	if err := e.Apply(context.Background(), parse(t, baseConf)); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v", err)
	}
	pool := NewPool(0)
	if p := sendOne(t, e, pool); p.Verdict != VerdictDrop {
		t.Error("packet forwarded after Close")
	}
	_ = netip.Addr{}
}

func TestApplyFile(t *testing.T) {
	e := newTestEngine(t, Options{})
	dir := t.TempDir()
	good := filepath.Join(dir, "ipsec.conf")
	os.WriteFile(good, []byte(baseConf), 0o600)
	if err := e.ApplyFile(context.Background(), good); err != nil || len(e.SAs()) != 2 {
		t.Fatalf("ApplyFile: %v, %d SAs", err, len(e.SAs()))
	}
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(bad, []byte("flush;\nadd 192.0.2.1 192.0.2.2 esp 0x100 -E aes-gcm-16 0x0102;\n"), 0o600)
	err := e.ApplyFile(context.Background(), bad)
	if !errors.Is(err, setkey.ErrSyntax) || !strings.Contains(err.Error(), "bad.conf:2:") || len(e.SAs()) != 2 {
		t.Fatalf("bad file: %v, %d SAs", err, len(e.SAs()))
	}
	if err := e.ApplyFile(context.Background(), filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}
