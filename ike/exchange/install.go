package exchange

import (
	"fmt"
	"math/big"
	"net/netip"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ike/wire"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

// Config returns the setkey.Config that installs c in an ipsec.Engine
// (Engine.Apply): its outbound and inbound SAs (esp-udp when Encap) with
// reqid, and for each pair of local and remote selectors an "out" and an
// "in" policy bound to them with unique:reqid. The keys are copies, which
// Apply wipes. A selector whose address range is not a set of prefixes
// is split into them; one whose port range is neither one port nor all
// ports cannot be expressed in the engine's SPD and is an error.
func (c *ChildSA) Config(reqid uint32) (*setkey.Config, error) {
	alg, err := algorithm(c)
	if err != nil {
		return nil, err
	}
	mode := spd.ModeTunnel
	if c.Transport {
		mode = spd.ModeTransport
	}
	proto := setkey.ProtoESP
	local, remote := netip.AddrPortFrom(c.Local.Addr(), 0), netip.AddrPortFrom(c.Remote.Addr(), 0)
	if c.Encap {
		proto, local, remote = setkey.ProtoESPUDP, c.Local, c.Remote
	}
	pos := setkey.Pos{File: fmt.Sprintf("ike CHILD_SA reqid %d", reqid)}
	sa := func(src, dst netip.AddrPort, spi uint32, ek, ik []byte) setkey.Op {
		return setkey.Op{Kind: setkey.OpAdd, Pos: pos, SA: &setkey.SA{
			Src: src, Dst: dst, Proto: proto, SPI: spi, Mode: mode, ReplayWindow: setkey.DefaultReplayWindow,
			ReqID: reqid, ESN: c.Suite.ESN, Alg: alg,
			EncKey: append([]byte(nil), ek...), AuthKey: append([]byte(nil), ik...)}}
	}
	cfg := &setkey.Config{Ops: []setkey.Op{
		sa(local, remote, c.OutSPI, c.OutEncr, c.OutInteg),
		sa(remote, local, c.InSPI, c.InEncr, c.InInteg),
	}}
	req := func(src, dst netip.Addr) []spd.IPsecRequest {
		r := spd.IPsecRequest{Mode: mode, Level: spd.LevelUnique, ReqID: reqid}
		if mode == spd.ModeTunnel {
			r.Src, r.Dst = src, dst
		}
		return []spd.IPsecRequest{r}
	}
	lsel, err := selectors(c.LocalTS)
	if err != nil {
		cfg.Zero()
		return nil, fmt.Errorf("ike: local traffic selectors: %w", err)
	}
	rsel, err := selectors(c.RemoteTS)
	if err != nil {
		cfg.Zero()
		return nil, fmt.Errorf("ike: remote traffic selectors: %w", err)
	}
	ppos := fmt.Sprintf("ike reqid %d", reqid)
	for _, l := range lsel {
		for _, r := range rsel {
			if l.proto != r.proto && l.proto != 0 && r.proto != 0 {
				continue
			}
			p := max(l.proto, r.proto)
			cfg.Ops = append(cfg.Ops,
				setkey.Op{Kind: setkey.OpSPDAdd, Pos: pos, Policy: &spd.Policy{Dir: spd.DirOut, Action: spd.IPsec, Pos: ppos,
					Sel: spd.Selector{Src: l.prefix, Dst: r.prefix, Proto: p, SrcPort: l.port, DstPort: r.port}, Requests: req(c.Local.Addr(), c.Remote.Addr())}},
				setkey.Op{Kind: setkey.OpSPDAdd, Pos: pos, Policy: &spd.Policy{Dir: spd.DirIn, Action: spd.IPsec, Pos: ppos,
					Sel: spd.Selector{Src: r.prefix, Dst: l.prefix, Proto: p, SrcPort: r.port, DstPort: l.port}, Requests: req(c.Remote.Addr(), c.Local.Addr())}})
		}
	}
	return cfg, nil
}

func algorithm(c *ChildSA) (crypto.Algorithm, error) {
	var a crypto.Algorithm
	switch c.Suite.Encr.ID {
	case wire.ENCR_AES_GCM_16:
		a.Cipher, a.KeyBits = crypto.CipherAESGCM, int(c.Suite.Encr.KeyBits)
	case wire.ENCR_AES_CBC:
		a.Cipher, a.KeyBits = crypto.CipherAESCBC, int(c.Suite.Encr.KeyBits)
	case wire.ENCR_CHACHA20_POLY1305:
		a.Cipher, a.KeyBits = crypto.CipherChaCha20Poly1305, 256
	default:
		return a, fmt.Errorf("ike: ESP encryption transform %d has no engine algorithm", c.Suite.Encr.ID)
	}
	switch c.Suite.Integ.ID {
	case wire.AUTH_NONE:
	case wire.AUTH_HMAC_SHA2_256_128:
		a.Auth = crypto.AuthHMACSHA256_128
	case wire.AUTH_HMAC_SHA2_384_192:
		a.Auth = crypto.AuthHMACSHA384_192
	case wire.AUTH_HMAC_SHA2_512_256:
		a.Auth = crypto.AuthHMACSHA512_256
	default:
		return a, fmt.Errorf("ike: ESP integrity transform %d has no engine algorithm", c.Suite.Integ.ID)
	}
	return a, nil
}

type spdSel struct {
	prefix netip.Prefix
	proto  uint8
	port   uint16
}

// selectors turns traffic selectors into the engine's prefix selectors.
func selectors(ts []wire.Selector) ([]spdSel, error) {
	var out []spdSel
	for _, s := range ts {
		var port uint16
		switch {
		case s.StartPort == 0 && s.EndPort == 0xffff:
		case s.StartPort == s.EndPort:
			port = s.StartPort
		default:
			return nil, fmt.Errorf("selector %v: port range %d-%d is not one port or all", s, s.StartPort, s.EndPort)
		}
		ps, err := rangePrefixes(s.StartAddr, s.EndAddr)
		if err != nil {
			return nil, fmt.Errorf("selector %v: %w", s, err)
		}
		for _, p := range ps {
			out = append(out, spdSel{p, s.Protocol, port})
		}
	}
	return out, nil
}

// maxRangePrefixes bounds the split of one address range.
const maxRangePrefixes = 256

// rangePrefixes returns the smallest list of prefixes covering exactly
// the addresses from start to end.
func rangePrefixes(start, end netip.Addr) ([]netip.Prefix, error) {
	if start.BitLen() != end.BitLen() || end.Less(start) {
		return nil, fmt.Errorf("address range %v..%v is empty or mixes families", start, end)
	}
	bits := start.BitLen()
	lo, hi := new(big.Int).SetBytes(start.AsSlice()), new(big.Int).SetBytes(end.AsSlice())
	one := big.NewInt(1)
	var out []netip.Prefix
	for lo.Cmp(hi) <= 0 {
		// The largest block aligned at lo that stays within hi.
		size := 0
		for size < bits {
			if lo.Bit(size) != 0 {
				break
			}
			top := new(big.Int).Add(lo, new(big.Int).Sub(new(big.Int).Lsh(one, uint(size+1)), one))
			if top.Cmp(hi) > 0 {
				break
			}
			size++
		}
		b := lo.FillBytes(make([]byte, bits/8))
		a, _ := netip.AddrFromSlice(b)
		out = append(out, netip.PrefixFrom(a, bits-size))
		if len(out) > maxRangePrefixes {
			return nil, fmt.Errorf("address range %v..%v needs more than %d prefixes", start, end, maxRangePrefixes)
		}
		lo.Add(lo, new(big.Int).Lsh(one, uint(size)))
	}
	return out, nil
}
