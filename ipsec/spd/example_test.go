package spd_test

import (
	"fmt"
	"net/netip"

	"github.com/keelinit/keel/ipsec/spd"
)

func Example() {
	s := spd.New()
	err := s.Replace([]spd.Policy{
		{Dir: spd.DirOut, Sel: spd.Selector{Src: netip.MustParsePrefix("10.0.0.0/24"), Dst: netip.MustParsePrefix("10.0.1.0/24"), Proto: 6, DstPort: 22}, Action: spd.None},
		{Dir: spd.DirOut, Sel: spd.Selector{Src: netip.MustParsePrefix("10.0.0.0/24"), Dst: netip.MustParsePrefix("10.0.1.0/24")}, Action: spd.IPsec,
			Requests: []spd.IPsecRequest{{Mode: spd.ModeTunnel, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Level: spd.LevelRequire}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	f := spd.Flow{Src: netip.MustParseAddr("10.0.0.5"), Dst: netip.MustParseAddr("10.0.1.7"), Proto: 6, SrcPort: 40000, DstPort: 443}
	if p, ok := s.Lookup(spd.DirOut, f); ok {
		fmt.Println(p.Index, p)
	}
	f.DstPort = 22
	if p, ok := s.Lookup(spd.DirOut, f); ok {
		fmt.Println(p.Index, p)
	}
	// Output:
	// 1 10.0.0.0/24[any] 10.0.1.0/24[any] any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require
	// 0 10.0.0.0/24[any] 10.0.1.0/24[22] tcp -P out none
}
