package ipsec

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/keelinit/keel/ipsec/spd"
)

// The generator of configurations and traffic for the tests against the
// reference model (refmodel_test.go): 1-16 peers of one local gateway,
// 1-8 outbound policies per peer (most mirrored inbound), unique:N,
// unique, require, use, none and discard, overlapping selectors, ports
// and protocols, IPv4 and IPv6 (inner and outer), tunnel, transport and
// mode-any SAs, ESP and ESP in UDP, AEAD and CBC+HMAC transforms.

// genSA is a generated SA: the model's view plus its transform.
type genSA struct {
	mSA
	xf int // index into genTransforms
}

// genTransforms: AES-GCM (the fast paths), ChaCha20-Poly1305 (an AEAD
// off the fast paths' cipher), AES-CBC + HMAC-SHA1 (not an AEAD).
var genTransforms = []struct {
	enc, auth   string
	encN, authN int
	aead        bool
}{
	{"aes-gcm-16", "", 20, 0, true},
	{"chacha20-poly1305", "", 36, 0, true},
	{"aes-cbc", "hmac-sha1", 16, 20, false},
}

// genConfig is one configuration: SAs in statement order and policies
// in SPD order.
type genConfig struct {
	sas  []genSA
	pols []mPolicy
}

// gen holds the generator state across configurations of one test run.
type gen struct {
	r       *rand.Rand
	peers   []genPeer
	nextSPI uint32
	serial  int
	serials map[uint32]int // SPI -> installation order
	xfs     map[uint32]int // SPI -> transform
}

// genPeer is one peer gateway: its outer address, and its inner
// addresses and prefixes in one family.
type genPeer struct {
	k        int
	local    netip.Addr // our outer address in the peer's outer family
	outer    netip.Addr
	inner6   bool
	hosts    []netip.Addr   // inner addresses behind the peer
	prefixes []netip.Prefix // selectors of those, narrow to wide
}

var (
	genLocal4 = netip.MustParseAddr("192.0.2.1")
	genLocal6 = netip.MustParseAddr("2001:db8::1")
)

func newGen(seed uint64) *gen {
	return newGenRand(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
}

// byteSource is a rand.Source that draws from fuzz input (8 bytes per
// number), then from a PCG seeded with what it read: the input decides
// the generator's first choices (peers, SAs, policies, traffic).
type byteSource struct {
	b   []byte
	pcg *rand.PCG
	h   uint64
}

func (s *byteSource) Uint64() uint64 {
	if len(s.b) > 0 {
		var w [8]byte
		n := copy(w[:], s.b)
		s.b = s.b[n:]
		v := binary.LittleEndian.Uint64(w[:])
		s.h = s.h*0x100000001b3 ^ v
		return v
	}
	if s.pcg == nil {
		s.pcg = rand.NewPCG(s.h, ^s.h)
	}
	return s.pcg.Uint64()
}

func newGenRand(r *rand.Rand) *gen {
	g := &gen{r: r, nextSPI: 0x1000, serials: map[uint32]int{}, xfs: map[uint32]int{}}
	n := 1 + g.r.IntN(16)
	for k := range n {
		p := genPeer{k: k, inner6: g.r.IntN(3) == 0}
		if g.r.IntN(3) == 0 {
			p.local, p.outer = genLocal6, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 15: byte(10 + k)})
		} else {
			p.local, p.outer = genLocal4, netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + k)})
		}
		if p.inner6 {
			for _, h := range []uint16{0x105, 0x106, 0x209} {
				p.hosts = append(p.hosts, netip.AddrFrom16([16]byte{0xfd, 0, 0, byte(100 + k), 0, byte(h >> 8), 15: byte(h)}))
			}
			p.prefixes = []netip.Prefix{
				netip.PrefixFrom(p.hosts[0], 128),
				netip.PrefixFrom(p.hosts[0], 80).Masked(),
				netip.PrefixFrom(p.hosts[0], 48).Masked(),
				netip.MustParsePrefix("fd00::/16"),
			}
		} else {
			for _, h := range [][2]byte{{1, 5}, {1, 6}, {2, 9}} {
				p.hosts = append(p.hosts, netip.AddrFrom4([4]byte{10, byte(100 + k), h[0], h[1]}))
			}
			p.prefixes = []netip.Prefix{
				netip.PrefixFrom(p.hosts[0], 32),
				netip.PrefixFrom(p.hosts[0], 24).Masked(),
				netip.PrefixFrom(p.hosts[0], 16).Masked(),
				netip.MustParsePrefix("10.0.0.0/8"),
			}
		}
		g.peers = append(g.peers, p)
	}
	return g
}

// localHosts and localPrefixes are the inner side of our gateway.
func localHosts(v6 bool) []netip.Addr {
	if v6 {
		return []netip.Addr{netip.MustParseAddr("fd00:1:1::1"), netip.MustParseAddr("fd00:1:2::7")}
	}
	return []netip.Addr{netip.MustParseAddr("10.1.1.1"), netip.MustParseAddr("10.1.2.7")}
}

func localPrefixes(v6 bool) []netip.Prefix {
	if v6 {
		return []netip.Prefix{netip.MustParsePrefix("fd00:1:1::1/128"), netip.MustParsePrefix("fd00:1:1::/48"), netip.MustParsePrefix("fd00:1::/32"), netip.MustParsePrefix("::/0")}
	}
	return []netip.Prefix{netip.MustParsePrefix("10.1.1.1/32"), netip.MustParsePrefix("10.1.1.0/24"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("0.0.0.0/0")}
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// newSA generates an SA from src to dst with a reqid from the peer's
// small set (so that several SAs often qualify for one request).
func (g *gen) newSA(p *genPeer, src, dst netip.Addr) genSA {
	s := genSA{xf: g.r.IntN(len(genTransforms))}
	s.spi = g.nextSPI
	g.nextSPI++
	g.xfs[s.spi] = s.xf
	s.mode = pick(g.r, []spd.Mode{spd.ModeTunnel, spd.ModeTunnel, spd.ModeTransport, spd.ModeAny})
	s.reqid = uint32(pick(g.r, []int{0, 1, 2, 3})) + uint32(8*(p.k%3))
	s.udp = g.r.IntN(4) == 0
	var port uint16
	if s.udp {
		port = NATTPort
	}
	s.src, s.dst = netip.AddrPortFrom(src, port), netip.AddrPortFrom(dst, port)
	return s
}

// newPolicy generates an outbound policy to peer p and, most of the
// time, its inbound mirror.
func (g *gen) newPolicy(p *genPeer) []mPolicy {
	o := mPolicy{dir: spd.DirOut}
	o.action = pick(g.r, []spd.Action{spd.IPsec, spd.IPsec, spd.IPsec, spd.IPsec, spd.None, spd.Discard})
	o.mode = spd.ModeTunnel
	if g.r.IntN(4) == 0 {
		o.mode = spd.ModeTransport
	}
	if o.mode == spd.ModeTransport {
		o.src, o.dst = netip.PrefixFrom(p.local, p.local.BitLen()), netip.PrefixFrom(p.outer, p.outer.BitLen())
		if g.r.IntN(4) == 0 {
			o.src = netip.PrefixFrom(p.local, 0).Masked()
		}
	} else {
		o.src, o.dst = pick(g.r, localPrefixes(p.inner6)), pick(g.r, p.prefixes)
		o.rsrc, o.rdst = p.local, p.outer
	}
	o.proto = pick(g.r, []uint8{0, 0, protoTCP, protoUDP, icmpOf(o.src.Addr().Is6())})
	if o.proto == protoTCP || o.proto == protoUDP {
		o.sport, o.dport = pick(g.r, []uint16{0, 0, 1000}), pick(g.r, []uint16{0, 80, 443})
	}
	if o.action == spd.IPsec {
		o.level = pick(g.r, []spd.Level{spd.LevelUnique, spd.LevelUnique, spd.LevelUnique, spd.LevelRequire, spd.LevelUse})
		if o.level == spd.LevelUnique && g.r.IntN(6) != 0 {
			// 1-3 have SAs (of some peers), 4 none.
			o.reqid = 1 + uint32(pick(g.r, []int{0, 1, 2, 3})) + uint32(8*(p.k%3))
		}
	} else {
		o.mode, o.rsrc, o.rdst = 0, netip.Addr{}, netip.Addr{}
	}
	out := []mPolicy{o}
	if g.r.IntN(5) != 0 {
		in := o
		in.dir = spd.DirIn
		in.src, in.dst = o.dst, o.src
		in.sport, in.dport = o.dport, o.sport
		in.rsrc, in.rdst = o.rdst, o.rsrc
		out = append(out, in)
	}
	return out
}

func icmpOf(v6 bool) uint8 {
	if v6 {
		return protoICMPv6
	}
	return protoICMP
}

// config generates a first configuration.
func (g *gen) config() genConfig {
	var c genConfig
	for i := range g.peers {
		p := &g.peers[i]
		for range 1 + g.r.IntN(3) {
			c.sas = append(c.sas, g.newSA(p, p.local, p.outer))
		}
		for range 1 + g.r.IntN(3) {
			c.sas = append(c.sas, g.newSA(p, p.outer, p.local))
		}
		for range 1 + g.r.IntN(8) {
			c.pols = append(c.pols, g.newPolicy(p)...)
		}
	}
	g.r.Shuffle(len(c.pols), func(i, j int) { c.pols[i], c.pols[j] = c.pols[j], c.pols[i] })
	c.pols = dedupPolicies(c.pols)
	return c
}

// mutate returns c changed as a reload might change it: SAs added and
// deleted, policies added, deleted and reordered.
func (g *gen) mutate(c genConfig) genConfig {
	n := genConfig{sas: append([]genSA(nil), c.sas...), pols: append([]mPolicy(nil), c.pols...)}
	for range 1 + g.r.IntN(4) {
		switch g.r.IntN(5) {
		case 0: // add SAs
			p := &g.peers[g.r.IntN(len(g.peers))]
			if g.r.IntN(2) == 0 {
				n.sas = append(n.sas, g.newSA(p, p.local, p.outer))
			} else {
				n.sas = append(n.sas, g.newSA(p, p.outer, p.local))
			}
		case 1: // delete an SA
			if len(n.sas) > 1 {
				i := g.r.IntN(len(n.sas))
				n.sas = append(n.sas[:i], n.sas[i+1:]...)
			}
		case 2: // add policies, anywhere
			for _, p := range g.newPolicy(&g.peers[g.r.IntN(len(g.peers))]) {
				i := g.r.IntN(len(n.pols) + 1)
				n.pols = append(n.pols[:i], append([]mPolicy{p}, n.pols[i:]...)...)
			}
		case 3: // delete a policy
			if len(n.pols) > 1 {
				i := g.r.IntN(len(n.pols))
				n.pols = append(n.pols[:i], n.pols[i+1:]...)
			}
		case 4: // reorder
			g.r.Shuffle(len(n.pols), func(i, j int) { n.pols[i], n.pols[j] = n.pols[j], n.pols[i] })
		}
	}
	n.pols = dedupPolicies(n.pols)
	return n
}

// dedupPolicies drops policies whose direction and selector repeat an
// earlier one's (Apply refuses those).
func dedupPolicies(ps []mPolicy) []mPolicy {
	seen := map[string]bool{}
	var out []mPolicy
	for _, p := range ps {
		k := fmt.Sprint(p.dir, p.src, p.dst, p.proto, p.sport, p.dport)
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

// model returns the reference model of c as installed after the
// configurations before it: an SA keeps the installation order it got
// when first installed.
func (g *gen) model(c genConfig, preferOld bool) *model {
	m := &model{pols: c.pols, preferOld: preferOld}
	for _, s := range c.sas {
		if _, ok := g.serials[s.spi]; !ok {
			g.serial++
			g.serials[s.spi] = g.serial
		}
		s.serial = g.serials[s.spi]
		m.sas = append(m.sas, s.mSA)
	}
	return m
}

// text renders c as a setkey file. reqidOf, if set, overrides each SA's
// reqid (for the sender engine).
func (c genConfig) text(reqidOf func(genSA) uint32) string {
	var b strings.Builder
	b.WriteString("flush;\nspdflush;\n")
	for _, s := range c.sas {
		proto, ep := "esp", func(a netip.AddrPort) string { return a.Addr().String() }
		if s.udp {
			proto = "esp-udp"
			ep = func(a netip.AddrPort) string { return fmt.Sprintf("%s[%d]", a.Addr(), a.Port()) }
		}
		reqid := s.reqid
		if reqidOf != nil {
			reqid = reqidOf(s)
		}
		xf := genTransforms[s.xf]
		fmt.Fprintf(&b, "add %s %s %s 0x%x -m %s -r 0 -u %d -E %s %s", ep(s.src), ep(s.dst), proto, s.spi, s.mode, reqid, xf.enc, hexKey(xf.encN, byte(s.spi)))
		if xf.auth != "" {
			fmt.Fprintf(&b, " -A %s %s", xf.auth, hexKey(xf.authN, byte(s.spi>>8)))
		}
		b.WriteString(";\n")
	}
	for _, p := range c.pols {
		b.WriteString(p.text())
	}
	return b.String()
}

func (p mPolicy) text() string {
	end := func(pr netip.Prefix, port uint16) string {
		if port != 0 {
			return fmt.Sprintf("%s[%d]", pr, port)
		}
		return pr.String()
	}
	proto := spd.ProtoName(p.proto)
	s := fmt.Sprintf("spdadd %s %s %s -P %s %s", end(p.src, p.sport), end(p.dst, p.dport), proto, p.dir, p.action)
	if p.action == spd.IPsec {
		r := spd.IPsecRequest{Mode: p.mode, Src: p.rsrc, Dst: p.rdst, Level: p.level, ReqID: p.reqid}
		s += " " + r.String()
	}
	return s + ";\n"
}

// genFlows returns flows for the policies of c: for each, flows inside
// its selector (overlaps decide which policy they meet first), plus
// flows between hosts no selector was made for.
func (g *gen) flows(c genConfig) []mFlow {
	var out []mFlow
	all := g.addrs()
	for _, p := range c.pols {
		for range 1 + g.r.IntN(2) {
			if f, ok := g.flowIn(p); ok {
				out = append(out, f)
			}
		}
	}
	for range 4 {
		a, b := pick(g.r, all), pick(g.r, all)
		if a.Is6() == b.Is6() && a != b {
			out = append(out, g.flowBetween(a, b, 0, 0, 0))
		}
	}
	return out
}

// addrs returns every address the generator uses.
func (g *gen) addrs() []netip.Addr {
	var all []netip.Addr
	for _, p := range g.peers {
		all = append(all, p.hosts...)
		all = append(all, p.outer, p.local)
	}
	all = append(all, localHosts(false)...)
	return append(all, localHosts(true)...)
}

// flowIn returns a flow inside the selector of p, if the generator's
// addresses have one.
func (g *gen) flowIn(p mPolicy) (mFlow, bool) {
	inside := func(pr netip.Prefix) (netip.Addr, bool) {
		var c []netip.Addr
		for _, a := range g.addrs() {
			if pr.Contains(a) {
				c = append(c, a)
			}
		}
		if len(c) == 0 {
			return netip.Addr{}, false
		}
		return pick(g.r, c), true
	}
	src, ok1 := inside(p.src)
	dst, ok2 := inside(p.dst)
	if !ok1 || !ok2 || src.Is6() != dst.Is6() {
		return mFlow{}, false
	}
	return g.flowBetween(src, dst, p.proto, p.sport, p.dport), true
}

// flowBetween is a flow from src to dst of the given protocol and ports
// (0: chosen here).
func (g *gen) flowBetween(src, dst netip.Addr, proto uint8, sport, dport uint16) mFlow {
	if proto == 0 {
		proto = pick(g.r, []uint8{protoTCP, protoUDP, icmpOf(src.Is6())})
	}
	f := mFlow{src: src, dst: dst, proto: proto}
	switch proto {
	case protoTCP, protoUDP:
		f.sport, f.dport = sport, dport
		if f.sport == 0 {
			f.sport = pick(g.r, []uint16{1000, 1001, 53})
		}
		if f.dport == 0 {
			f.dport = pick(g.r, []uint16{80, 443, 8080})
		}
	default: // ICMP echo request / reply
		f.sport = pick(g.r, []uint16{8, 0, 128, 129})
	}
	return f
}

// packet builds a packet of flow f with n payload bytes.
func (f mFlow) packet(n int, fill byte) []byte {
	var l4 []byte
	switch f.proto {
	case protoTCP:
		l4 = make([]byte, 20+n)
		binary.BigEndian.PutUint16(l4, f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		l4[12] = 5 << 4
	case protoUDP:
		l4 = make([]byte, 8+n)
		binary.BigEndian.PutUint16(l4, f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	default:
		l4 = make([]byte, 8+n)
		l4[0], l4[1] = byte(f.sport), byte(f.dport)
	}
	for i := len(l4) - n; i < len(l4); i++ {
		l4[i] = fill
	}
	if f.src.Is4() {
		return ipv4(f.src, f.dst, f.proto, l4)
	}
	return ipv6(f.src, f.dst, f.proto, l4)
}

func (f mFlow) String() string {
	return fmt.Sprintf("%s:%d>%s:%d/%d", f.src, f.sport, f.dst, f.dport, f.proto)
}
