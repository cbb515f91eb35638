package exchange

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// TestRangePrefixes checks the split of address ranges against a model:
// the prefixes, in order, cover exactly the range's addresses.
func TestRangePrefixes(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < 500; i++ {
		base := r.Uint32() &^ 0xfff
		a, b := base+r.Uint32N(2048), base+r.Uint32N(4096)
		if b < a {
			a, b = b, a
		}
		start, end := addr4(a), addr4(b)
		ps, err := rangePrefixes(start, end)
		if err != nil {
			t.Fatal(err)
		}
		next := a
		for _, p := range ps {
			if p.Addr() != addr4(next) || p != p.Masked() {
				t.Fatalf("%v..%v: prefix %v does not start at %v", start, end, p, addr4(next))
			}
			next += 1 << (32 - p.Bits())
		}
		if next != b+1 {
			t.Fatalf("%v..%v: prefixes %v end at %v", start, end, ps, addr4(next-1))
		}
	}
	ps, err := rangePrefixes(netip.MustParseAddr("10.96.2.0"), netip.MustParseAddr("10.96.2.255"))
	if err != nil || len(ps) != 1 || ps[0] != netip.MustParsePrefix("10.96.2.0/24") {
		t.Fatalf("a /24 splits into %v, %v", ps, err)
	}
	if _, err := rangePrefixes(netip.MustParseAddr("::"), netip.MustParseAddr("::ffff:1.0.0.0")); err != nil {
		t.Fatal(err)
	}
}

func addr4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
