package spd

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"github.com/keelinit/keel/internal/testwait"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func tunnelReq(a, b string) []IPsecRequest {
	return []IPsecRequest{{Mode: ModeTunnel, Src: addr(a), Dst: addr(b), Level: LevelRequire}}
}

func TestLookupTable(t *testing.T) {
	ps := []Policy{
		{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/24"), Dst: pfx("10.0.1.0/24"), Proto: 6, DstPort: 22}, Action: None, Pos: "a:1"},
		{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/24"), Dst: pfx("10.0.1.0/24")}, Action: IPsec, Requests: tunnelReq("192.0.2.1", "192.0.2.2"), Pos: "a:2"},
		{Dir: DirIn, Sel: Selector{Src: pfx("10.0.1.0/24"), Dst: pfx("10.0.0.0/24")}, Action: IPsec, Requests: tunnelReq("192.0.2.2", "192.0.2.1"), Pos: "a:3"},
		{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.7/32"), Dst: pfx("0.0.0.0/0"), Proto: 17}, Action: Discard, Pos: "a:4"},
		{Dir: DirOut, Sel: Selector{Src: pfx("2001:db8::/32"), Dst: pfx("::/0"), Proto: 58, SrcPort: 135}, Action: None, Pos: "a:5"},
		{Dir: DirOut, Sel: Selector{Src: pfx("::/0"), Dst: pfx("::/0")}, Action: Discard, Pos: "a:6"},
		{Dir: DirFwd, Sel: Selector{}, Action: None, Pos: "a:7"}, // zero selector: everything
	}
	s := New()
	if err := s.Replace(ps); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  Dir
		f    Flow
		want int // Index, -1 = no match
	}{
		{"ssh bypass", DirOut, Flow{Src: addr("10.0.0.5"), Dst: addr("10.0.1.9"), Proto: 6, SrcPort: 4000, DstPort: 22}, 0},
		{"tcp other port tunnels", DirOut, Flow{Src: addr("10.0.0.5"), Dst: addr("10.0.1.9"), Proto: 6, SrcPort: 4000, DstPort: 80}, 1},
		{"udp from .7 to subnet: subnet policy first", DirOut, Flow{Src: addr("10.0.0.7"), Dst: addr("10.0.1.1"), Proto: 17}, 1},
		{"udp from .7 elsewhere", DirOut, Flow{Src: addr("10.0.0.7"), Dst: addr("8.8.8.8"), Proto: 17}, 3},
		{"tcp from .7 elsewhere: none", DirOut, Flow{Src: addr("10.0.0.7"), Dst: addr("8.8.8.8"), Proto: 6}, -1},
		{"inbound", DirIn, Flow{Src: addr("10.0.1.3"), Dst: addr("10.0.0.3"), Proto: 1}, 2},
		{"direction matters", DirIn, Flow{Src: addr("10.0.0.5"), Dst: addr("10.0.1.9")}, -1},
		{"v4 does not match v6 ::/0", DirOut, Flow{Src: addr("1.2.3.4"), Dst: addr("5.6.7.8")}, -1},
		{"icmp6 NS bypass", DirOut, Flow{Src: addr("2001:db8::1"), Dst: addr("ff02::1"), Proto: 58, SrcPort: 135}, 4},
		{"icmp6 other type", DirOut, Flow{Src: addr("2001:db8::1"), Dst: addr("ff02::1"), Proto: 58, SrcPort: 128}, 5},
		{"zone ignored", DirOut, Flow{Src: addr("fe80::1%eth0"), Dst: addr("fe80::2")}, 5},
		{"mapped v4 is v6", DirOut, Flow{Src: addr("::ffff:10.0.0.5"), Dst: addr("::ffff:10.0.1.9")}, 5},
		{"invalid flow address only matches wildcard", DirOut, Flow{}, -1},
		{"fwd wildcard matches invalid address", DirFwd, Flow{}, 6},
		{"fwd wildcard", DirFwd, Flow{Src: addr("1.1.1.1"), Dst: addr("::1"), Proto: 6, SrcPort: 1, DstPort: 2}, 6},
		{"bad dir", Dir(7), Flow{Src: addr("10.0.0.5"), Dst: addr("10.0.1.9")}, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 3 { // miss, then cached hits
				for name, fn := range map[string]func(Dir, Flow) (*Policy, bool){"Lookup": s.Lookup, "Classify": s.Classify, "LookupLinear": s.LookupLinear} {
					p, ok := fn(tc.dir, tc.f)
					got := -1
					if ok {
						got = p.Index
					}
					if got != tc.want {
						t.Fatalf("round %d %s = %d, want %d", round, name, got, tc.want)
					}
				}
			}
		})
	}
}

func TestAddDeleteFlushGeneration(t *testing.T) {
	s := New()
	g0 := s.Generation()
	f := Flow{Src: addr("10.0.0.1"), Dst: addr("10.0.1.1"), Proto: 6, DstPort: 80}
	if _, ok := s.Lookup(DirOut, f); ok {
		t.Fatal("empty SPD matched")
	}
	broad := Policy{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/8"), Dst: pfx("10.0.0.0/8")}, Action: None}
	if err := s.Add(broad); err != nil {
		t.Fatal(err)
	}
	if g := s.Generation(); g <= g0 {
		t.Fatalf("generation %d did not advance from %d", g, g0)
	}
	// cached negative result must be invalidated by Add
	if p, ok := s.Lookup(DirOut, f); !ok || p.Action != None {
		t.Fatalf("after Add: %v %v", p, ok)
	}
	// Host bits are masked: 10.0.0.1/8 is the same selector as 10.0.0.0/8.
	dup := broad
	dup.Sel.Src = pfx("10.0.0.1/8")
	if err := s.Add(dup); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate Add: %v, want ErrExists", err)
	}
	narrow := Policy{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/24"), Dst: pfx("10.0.1.0/24"), Proto: 6}, Action: Discard}
	if err := s.Add(narrow); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Lookup(DirOut, f); p.Index != 0 {
		t.Fatalf("appended policy must not shadow earlier one, got %d", p.Index)
	}
	if err := s.Delete(DirOut, broad.Sel); err != nil {
		t.Fatal(err)
	}
	if p, ok := s.Lookup(DirOut, f); !ok || p.Action != Discard || p.Index != 0 {
		t.Fatalf("after Delete: %+v %v", p, ok)
	}
	if err := s.Delete(DirOut, broad.Sel); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(DirIn, narrow.Sel); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete wrong dir: %v, want ErrNotFound", err)
	}
	g := s.Generation()
	s.Flush()
	if s.Generation() <= g || s.Len() != 0 {
		t.Fatal("Flush did not advance generation or empty the SPD")
	}
	if _, ok := s.Lookup(DirOut, f); ok {
		t.Fatal("stale cache hit after Flush")
	}
}

func TestValidateAndReplaceAtomic(t *testing.T) {
	good := []Policy{{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/8")}, Action: None}}
	bad := []struct {
		name string
		p    Policy
	}{
		{"bad dir", Policy{Dir: 9, Action: None}},
		{"bad action", Policy{Action: 9}},
		{"ipsec without requests", Policy{Action: IPsec}},
		{"discard with requests", Policy{Action: Discard, Requests: tunnelReq("1.1.1.1", "2.2.2.2")}},
		{"tunnel without endpoints", Policy{Action: IPsec, Requests: []IPsecRequest{{Mode: ModeTunnel}}}},
		{"tunnel mixed family", Policy{Action: IPsec, Requests: tunnelReq("1.1.1.1", "::2")}},
		{"transport with endpoints", Policy{Action: IPsec, Requests: []IPsecRequest{{Mode: ModeTransport, Src: addr("1.1.1.1"), Dst: addr("2.2.2.2")}}}},
		{"mode any request", Policy{Action: IPsec, Requests: []IPsecRequest{{Mode: ModeAny}}}},
		{"bad level", Policy{Action: IPsec, Requests: []IPsecRequest{{Mode: ModeTransport, Level: 9}}}},
		{"bad prefix length", Policy{Action: None, Sel: Selector{Src: netip.PrefixFrom(addr("1.2.3.4"), 40)}}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			if err := s.Replace(good); err != nil {
				t.Fatal(err)
			}
			g := s.Generation()
			err := s.Replace(append(append([]Policy{}, good[0]), tc.p))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Replace = %v, want ErrInvalid", err)
			}
			if err := s.Add(tc.p); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Add = %v, want ErrInvalid", err)
			}
			if s.Generation() != g || s.Len() != 1 {
				t.Fatal("failed Replace changed the SPD")
			}
		})
	}
	dup := append(append([]Policy{}, good...), good...)
	if err := Validate(dup); !errors.Is(err, ErrExists) {
		t.Fatalf("Validate duplicate = %v, want ErrExists", err)
	}
}

func TestCopiesAreIndependent(t *testing.T) {
	s := New()
	in := []Policy{{Dir: DirOut, Action: IPsec, Requests: tunnelReq("1.1.1.1", "2.2.2.2"), Index: 42}}
	if err := s.Replace(in); err != nil {
		t.Fatal(err)
	}
	in[0].Requests[0].Level = LevelUse
	out := s.Policies()
	if out[0].Requests[0].Level != LevelRequire || out[0].Index != 0 {
		t.Fatalf("Replace did not deep-copy / reindex: %+v", out[0])
	}
	out[0].Requests[0].Level = LevelUse
	if p, _ := s.Lookup(DirOut, Flow{Src: addr("9.9.9.9"), Dst: addr("8.8.8.8")}); p.Requests[0].Level != LevelRequire {
		t.Fatal("Policies did not deep-copy")
	}
}

// randomPolicies builds n policies over a small address space so that they
// overlap heavily, with mixed families, prefix lengths, protos and ports.
func randomPolicies(r *rand.Rand, n int) []Policy {
	ps := make([]Policy, 0, n)
	seen := map[[2]any]bool{}
	for len(ps) < n {
		p := Policy{Dir: Dir(r.IntN(3)), Action: Action(r.IntN(2))}
		v6 := r.IntN(4) == 0
		p.Sel.Src = randPrefix(r, v6)
		p.Sel.Dst = randPrefix(r, v6)
		if r.IntN(10) == 0 {
			p.Sel.Src = netip.Prefix{}
		}
		if r.IntN(20) == 0 && p.Sel.Dst.Addr().Is4() { // IPv4-mapped IPv6 prefix
			p.Sel.Dst = netip.PrefixFrom(netip.AddrFrom16(p.Sel.Dst.Addr().As16()), 96+p.Sel.Dst.Bits())
		}
		if r.IntN(2) == 0 {
			p.Sel.Proto = []uint8{1, 6, 17, 58}[r.IntN(4)]
		}
		if r.IntN(3) == 0 {
			p.Sel.SrcPort = uint16(1 + r.IntN(4))
		}
		if r.IntN(3) == 0 {
			p.Sel.DstPort = uint16(1 + r.IntN(4))
		}
		k := [2]any{p.Dir, p.Sel.canonical()}
		if seen[k] {
			continue
		}
		seen[k] = true
		ps = append(ps, p)
	}
	return ps
}

func randPrefix(r *rand.Rand, v6 bool) netip.Prefix {
	a := randAddr(r, v6)
	bits := r.IntN(a.BitLen() + 1)
	if !v6 && r.IntN(2) == 0 {
		bits = 24 + r.IntN(9) // bias to interesting lengths
	}
	return netip.PrefixFrom(a, bits) // unmasked on purpose
}

// randAddr draws from 10.0.{0,1}.{0..7} / 2001:db8::{0..7}:{0..7}.
func randAddr(r *rand.Rand, v6 bool) netip.Addr {
	if v6 {
		b := netip.MustParseAddr("2001:db8::").As16()
		b[13] = byte(r.IntN(8))
		b[15] = byte(r.IntN(8))
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(2)), byte(r.IntN(8))})
}

func randFlow(r *rand.Rand) Flow {
	v6 := r.IntN(4) == 0
	f := Flow{Src: randAddr(r, v6), Dst: randAddr(r, v6 != (r.IntN(20) == 0))}
	if r.IntN(20) == 0 && f.Dst.Is4() {
		f.Dst = netip.AddrFrom16(f.Dst.As16()) // IPv4-mapped: only IPv6 prefixes match
	}
	if r.IntN(30) == 0 {
		f.Src = netip.Addr{} // invalid: only wildcard selectors match
	}
	f.Proto = []uint8{0, 1, 6, 17, 58, 50}[r.IntN(6)]
	f.SrcPort = uint16(r.IntN(5))
	f.DstPort = uint16(r.IntN(5))
	return f
}

func checkAgree(t *testing.T, s *SPD, d Dir, f Flow) {
	t.Helper()
	lp, lok := s.LookupLinear(d, f)
	for name, fn := range map[string]func(Dir, Flow) (*Policy, bool){"Lookup": s.Lookup, "Classify": s.Classify} {
		p, ok := fn(d, f)
		if ok != lok || ok && p != lp {
			t.Fatalf("%s(%v, %+v) = %v,%v; linear = %v,%v\npolicies: %v", name, d, f, p, ok, lp, lok, s.Policies())
		}
	}
}

// TestPropertyMatchesLinear compares Lookup and Classify with the linear
// scan over random overlapping policy sets, including after Add/Delete, and
// with a tiny cache so that entries are constantly evicted.
func TestPropertyMatchesLinear(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 60 {
		n := 1 + r.IntN(200)
		opts := []Option{}
		if iter%3 == 0 {
			opts = append(opts, WithCacheEntries(8))
		}
		if iter%5 == 0 {
			opts = append(opts, WithCacheEntries(0))
		}
		s := New(opts...)
		ps := randomPolicies(r, n)
		if err := s.Replace(ps); err != nil {
			t.Fatal(err)
		}
		for range 400 {
			checkAgree(t, s, Dir(r.IntN(3)), randFlow(r))
		}
		for range 10 {
			if r.IntN(2) == 0 && s.Len() > 0 {
				p := s.Policies()[r.IntN(s.Len())]
				if err := s.Delete(p.Dir, p.Sel); err != nil {
					t.Fatal(err)
				}
			} else {
				_ = s.Add(randomPolicies(r, 1)[0]) // may be ErrExists
			}
			for range 40 {
				checkAgree(t, s, Dir(r.IntN(3)), randFlow(r))
			}
		}
	}
}

// TestConcurrentLookupReplace runs lookups while the SPD alternates between
// two policy sets; every result must be the linear answer of one of them.
// Run with -race.
func TestConcurrentLookupReplace(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	a, b := randomPolicies(r, 50), randomPolicies(r, 80)
	ref := [2]*SPD{New(WithCacheEntries(0)), New(WithCacheEntries(0))}
	_ = ref[0].Replace(a)
	_ = ref[1].Replace(b)
	flows := make([]Flow, 256)
	for i := range flows {
		flows[i] = randFlow(r)
	}
	s := New(WithCacheEntries(64))
	_ = s.Replace(a)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan string, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f := flows[(i*7+w)%len(flows)]
				d := Dir(i % 3)
				p, ok := s.Lookup(d, f)
				okAny := false
				for _, rs := range ref {
					rp, rok := rs.LookupLinear(d, f)
					if rok == ok && (!ok || rp.Index == p.Index && rp.Sel == p.Sel && rp.Action == p.Action) {
						okAny = true
					}
				}
				if !okAny {
					errc <- "lookup result matches neither snapshot"
					return
				}
			}
		}()
	}
	for i := range 200 {
		if i%2 == 0 {
			_ = s.Replace(b)
		} else {
			_ = s.Replace(a)
		}
	}
	close(stop)
	testwait.Wait(t, testwait.Timeout, "readers stopped", &wg)
	select {
	case e := <-errc:
		t.Fatal(e)
	default:
	}
}

func TestLookupAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := New()
	_ = s.Replace(randomPolicies(r, 100))
	flows := make([]Flow, 64)
	for i := range flows {
		flows[i] = randFlow(r)
	}
	i := 0
	for name, fn := range map[string]func(Dir, Flow) (*Policy, bool){"Lookup": s.Lookup, "Classify": s.Classify} {
		if n := testing.AllocsPerRun(1000, func() {
			fn(Dir(i%3), flows[i%len(flows)])
			i++
		}); n != 0 {
			t.Errorf("%s allocates %v per call", name, n)
		}
	}
}

func TestStringers(t *testing.T) {
	p := Policy{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/24"), Dst: pfx("10.0.1.0/24"), Proto: 6, DstPort: 80}, Action: IPsec,
		Requests: []IPsecRequest{{Mode: ModeTunnel, Src: addr("192.0.2.1"), Dst: addr("192.0.2.2"), Level: LevelUnique, ReqID: 7}, {Mode: ModeTransport, Level: LevelUse}}}
	want := "10.0.0.0/24[any] 10.0.1.0/24[80] tcp -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/unique:7 esp/transport//use"
	if got := p.String(); got != want {
		t.Errorf("String() = %q\nwant %q", got, want)
	}
	icmp := Selector{Src: pfx("::/0"), Dst: pfx("::/0"), Proto: 58, SrcPort: 135}
	if got, want := icmp.String(), "::/0 ::/0 icmp6 135,0"; got != want {
		t.Errorf("icmp String() = %q, want %q", got, want)
	}
}

// TestConcurrentLookupAddDelete toggles one policy with Add/Delete while
// readers look up; each result must be the linear answer of the SPD either
// with or without that policy.
func TestConcurrentLookupAddDelete(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	base := randomPolicies(r, 40)
	x := Policy{Dir: DirOut, Sel: Selector{Src: pfx("10.0.0.0/31"), Dst: pfx("10.0.1.0/30")}, Action: None, Pos: "x"}
	for _, p := range base {
		if p.Dir == x.Dir && p.Sel.canonical() == x.Sel {
			t.Skip("random base contains the toggled selector")
		}
	}
	without, with := New(WithCacheEntries(0)), New(WithCacheEntries(0))
	_ = without.Replace(base)
	_ = with.Replace(append(append([]Policy{}, base...), x))
	s := New(WithCacheEntries(32))
	_ = s.Replace(base)
	flows := make([]Flow, 128)
	for i := range flows {
		flows[i] = randFlow(r)
	}
	same := func(p *Policy, ok bool, q *Policy, qok bool) bool {
		return ok == qok && (!ok || p.Index == q.Index && p.Sel == q.Sel && p.Pos == q.Pos)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	bad := make(chan Flow, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f := flows[i%len(flows)]
				p, ok := s.Lookup(DirOut, f)
				p0, ok0 := without.LookupLinear(DirOut, f)
				p1, ok1 := with.LookupLinear(DirOut, f)
				if !same(p, ok, p0, ok0) && !same(p, ok, p1, ok1) {
					bad <- f
					return
				}
			}
		}()
	}
	for range 300 {
		if err := s.Add(x); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(x.Dir, x.Sel); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	testwait.Wait(t, testwait.Timeout, "readers stopped", &wg)
	select {
	case f := <-bad:
		t.Fatalf("lookup of %+v matched neither snapshot", f)
	default:
	}
}
