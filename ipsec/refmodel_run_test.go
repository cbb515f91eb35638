package ipsec

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/ipsec/spd"
)

var modelSeedFlag = flag.Uint64("model.seed", 0, "seed of TestAgainstModel (0: KEEL_MODEL_SEED, else from the clock)")

// modelSeed returns the seed of the model tests (the flag, else
// KEEL_MODEL_SEED, else the clock) and prints it if the test fails.
func modelSeed(t *testing.T) uint64 {
	seed := *modelSeedFlag
	if seed == 0 {
		if v := os.Getenv("KEEL_MODEL_SEED"); v != "" {
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				t.Fatalf("KEEL_MODEL_SEED=%q: %v", v, err)
			}
			seed = n
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: rerun with -model.seed=%d or KEEL_MODEL_SEED=%d", seed, seed, seed)
		}
	})
	return seed
}

// TestAgainstModel generates configurations and traffic (refmodel_gen_test.go)
// and checks every packet against the reference model: outbound verdict,
// drop reason, SPI and outer addresses and ports; inbound acceptance,
// including the policy check after decapsulation, of the engine's own
// ESP, of ESP on any SA with any inner flow, and of clear traffic. Each
// round applies a changed configuration (SAs added and deleted, policies
// added, deleted and reordered) between two calls: the packets after it
// follow the new configuration. Every batch also goes through an engine
// restricted to the general path (no outFast4, inFast4 or per-flow
// reuse), which must agree too; for AEAD SAs (IV = sequence number) the
// two engines' ESP packets are byte-identical.
func TestAgainstModel(t *testing.T) {
	seed := modelSeed(t)
	runs := 6
	if testing.Short() {
		runs = 2
	}
	for i := range runs {
		s := seed + uint64(i)
		t.Run(fmt.Sprint(s), func(t *testing.T) { runModel(t, newGen(s), 4) })
	}
}

// FuzzAgainstModel is TestAgainstModel's property with the generator's
// choices taken from the input (byteSource): the configuration, its
// changes and the traffic. Seed corpus: testdata/fuzz/FuzzAgainstModel.
func FuzzAgainstModel(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x0f\x00\x00\x00\x00\x00\x00\x00two policies to one peer"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 4096 {
			return
		}
		runModel(t, newGenRand(rand.New(&byteSource{b: in})), 2)
	})
}

// modelRig is the engines of one model run: e (all paths), gp (general
// path only) and snd, which holds the same SAs and sends ESP on any of
// them with any inner flow.
type modelRig struct {
	t         *testing.T
	g         *gen
	e, gp     *Engine
	snd       *Engine
	pool      *Pool
	preferOld bool
	cfgText   string
	// stats counts the model's outcomes ("out forward", "in drop
	// policy-mismatch", ...), logged at the end: evidence that the
	// generator reaches every case.
	stats map[string]int
}

func runModel(t *testing.T, g *gen, rounds int) {
	rig := &modelRig{t: t, g: g, preferOld: g.r.IntN(2) == 0, pool: NewPool(0), stats: map[string]int{}}
	defer func() { t.Logf("%d peers, preferOld %v, outcomes %v", len(g.peers), rig.preferOld, rig.stats) }()
	rig.e = newTestEngine(t, Options{PreferOldSA: rig.preferOld})
	rig.gp = newTestEngine(t, Options{PreferOldSA: rig.preferOld})
	rig.gp.generalOnly = true
	rig.snd = newTestEngine(t, Options{})
	c := g.config()
	var prev genConfig
	for round := range rounds {
		if round > 0 {
			prev, c = c, g.mutate(c)
		}
		m := rig.apply(c, prev)
		flows := g.flows(c)
		if len(flows) == 0 {
			continue
		}
		in := rig.outbound(m, flows, 64)
		rig.inbound(m, c, prev, flows, in)
		if t.Failed() {
			t.Logf("round %d configuration (preferOld %v):\n%s", round, rig.preferOld, rig.cfgText)
			return
		}
	}
}

// apply installs c in the engines (the sender gets prev's SAs too, to
// send on SAs just deleted) and returns its model.
func (r *modelRig) apply(c, prev genConfig) *model {
	r.cfgText = c.text(nil)
	applyText(r.t, r.e, r.cfgText)
	applyText(r.t, r.gp, r.cfgText)
	all := genConfig{sas: append([]genSA(nil), c.sas...)}
	for _, s := range prev.sas {
		dup := false
		for _, x := range c.sas {
			dup = dup || x.spi == s.spi
		}
		if !dup {
			all.sas = append(all.sas, s)
		}
	}
	applyText(r.t, r.snd, all.text(senderReqID))
	return r.g.model(c, r.preferOld)
}

// inItem is one packet for Inbound with what the model expects.
type inItem struct {
	data  []byte
	want  mResult
	inner []byte // the decapsulated packet expected (forward)
	what  string
}

// order returns n flow indices in runs of one flow (1-6 packets), so that
// the fast paths take some of them.
func (r *modelRig) order(nflows, n int) []int {
	var out []int
	for len(out) < n {
		f := r.g.r.IntN(nflows)
		for k := 1 + r.g.r.IntN(6); k > 0 && len(out) < n; k-- {
			out = append(out, f)
		}
	}
	return out
}

// outbound sends a batch of the flows through e and gp and checks them
// against the model. It returns the forwarded packets as inbound items.
func (r *modelRig) outbound(m *model, flows []mFlow, n int) []inItem {
	t := r.t
	idx := r.order(len(flows), n)
	plain := make([][]byte, n)
	for i, fi := range idx {
		plain[i] = flows[fi].packet(r.g.r.IntN(200), byte(i))
	}
	ps, qs := r.packets(plain), r.packets(plain)
	r.e.Outbound(ps)
	r.gp.Outbound(qs)
	var rows []string
	var items []inItem
	for i, fi := range idx {
		f := flows[fi]
		want := m.outbound(f)
		r.stats[fmt.Sprint("out ", want.verdict, " ", want.drop)]++
		for k, p := range []*Packet{ps[i], qs[i]} {
			if msg := checkOut(p, want, plain[i]); msg != "" {
				rows = append(rows, fmt.Sprintf("%3d %-8s %-44s %s", i, []string{"engine", "general"}[k], f, msg))
			}
		}
		if p, q := ps[i], qs[i]; p.Verdict != q.Verdict || p.Drop != q.Drop || p.SPI != q.SPI || p.Seq != q.Seq || p.Src != q.Src || p.Dst != q.Dst {
			rows = append(rows, fmt.Sprintf("%3d %-8s %-44s fast and general paths differ: %v %v %#x/%d, %v %v %#x/%d", i, "both", f,
				p.Verdict, p.Drop, p.SPI, p.Seq, q.Verdict, q.Drop, q.SPI, q.Seq))
		}
		if want.verdict != VerdictForward || ps[i].Verdict != VerdictForward {
			continue
		}
		if genTransforms[r.g.xfOf(want.spi)].aead && !bytes.Equal(ps[i].Data(), qs[i].Data()) {
			rows = append(rows, fmt.Sprintf("%3d %-8s %-44s fast and general paths built different ESP", i, "both", f))
		}
		items = append(items, inItem{
			data: append([]byte(nil), ps[i].Data()...), inner: plain[i], what: "own " + f.String(),
			want: m.inbound(want.spi, want.dst.Addr(), want.dst.Port() != 0, f, want.tunnel),
		})
	}
	report(t, "outbound", rows)
	r.release(ps)
	r.release(qs)
	return items
}

// checkOut compares an outbound packet with the model's result; "" if
// they agree.
func checkOut(p *Packet, want mResult, plain []byte) string {
	got := fmt.Sprintf("%v %v", p.Verdict, p.Drop)
	exp := fmt.Sprintf("%v %v", want.verdict, want.drop)
	if want.verdict == VerdictForward {
		exp += fmt.Sprintf(" spi %#x %v>%v", want.spi, want.src, want.dst)
	}
	if p.Verdict == VerdictForward {
		got += fmt.Sprintf(" spi %#x %v>%v", p.SPI, p.Src, p.Dst)
		if o := outerOf(p.Data()); o != fmt.Sprintf("%v>%v", want.src, want.dst) {
			got += " wire " + o
		}
	}
	if p.Verdict == VerdictBypass && !bytes.Equal(p.Data(), plain) {
		got += " (data changed)"
	}
	if got != exp {
		return "got " + got + ", want " + exp
	}
	return ""
}

// outerOf returns the outer addresses (and UDP ports) of an ESP packet as
// "src>dst" in netip.AddrPort form.
func outerOf(d []byte) string {
	var h ipHeader
	if !parseIPInto(d, &h) {
		return "unparsable"
	}
	var sp, dp uint16
	switch h.proto {
	case protoUDP:
		sp, dp = binary.BigEndian.Uint16(d[h.hlen:]), binary.BigEndian.Uint16(d[h.hlen+2:])
	case protoESP:
	default:
		return fmt.Sprintf("protocol %d", h.proto)
	}
	return fmt.Sprintf("%v>%v", netip.AddrPortFrom(h.src, sp), netip.AddrPortFrom(h.dst, dp))
}

// inbound builds a batch of the engine's own ESP (own), ESP from the
// sender on random SAs (this round's and the previous round's, deleted
// ones included) with random inner flows, and clear packets, and checks
// e's and gp's verdicts against the model.
func (r *modelRig) inbound(m *model, c, prev genConfig, flows []mFlow, own []inItem) {
	t := r.t
	items := own
	insert := func(it inItem) {
		i := r.g.r.IntN(len(items) + 1)
		items = append(items[:i], append([]inItem{it}, items[i:]...)...)
	}
	cands := append(append([]genSA(nil), c.sas...), prev.sas...)
	for range 32 {
		s := pick(r.g.r, cands)
		tunnel := s.mode == spd.ModeTunnel || (s.mode == spd.ModeAny && r.g.r.IntN(2) == 0)
		var f mFlow
		if sf, x, tun, ok := r.g.servedFlow(c); ok && r.g.r.IntN(3) != 0 {
			// A flow of an inbound ipsec policy on an SA that serves
			// it (unless an earlier policy takes the flow).
			f, s, tunnel = sf, x, tun
		} else if !tunnel {
			f = r.g.flowBetween(s.src.Addr(), s.dst.Addr(), 0, 0, 0)
		} else {
			f = pick(r.g.r, flows)
			if r.g.r.IntN(3) != 0 {
				f = mFlow{src: f.dst, dst: f.src, proto: f.proto, sport: f.dport, dport: f.sport}
				if f.proto == protoICMP || f.proto == protoICMPv6 {
					f.sport, f.dport = f.dport, f.sport
				}
			}
		}
		plain := f.packet(r.g.r.IntN(100), 0xa5)
		insert(inItem{data: r.send(s, f, tunnel, plain), inner: plain, what: fmt.Sprintf("sent spi %#x %s", s.spi, f),
			want: m.inbound(s.spi, s.dst.Addr(), s.udp, f, tunnel)})
	}
	for range 8 {
		f := pick(r.g.r, flows)
		plain := f.packet(r.g.r.IntN(100), 0x5a)
		insert(inItem{data: plain, inner: plain, what: "clear " + f.String(), want: m.clear(f)})
	}
	data := make([][]byte, len(items))
	for i := range items {
		data[i] = items[i].data
	}
	ps, qs := r.packets(data), r.packets(data)
	r.e.Inbound(ps)
	r.gp.Inbound(qs)
	var rows []string
	for i, it := range items {
		r.stats[fmt.Sprint("in ", it.want.verdict, " ", it.want.drop)]++
		for k, p := range []*Packet{ps[i], qs[i]} {
			got := fmt.Sprintf("%v %v", p.Verdict, p.Drop)
			exp := fmt.Sprintf("%v %v", it.want.verdict, it.want.drop)
			if p.Verdict == VerdictForward {
				got += fmt.Sprintf(" spi %#x", p.SPI)
				if !bytes.Equal(p.Data(), it.inner) {
					got += " (inner differs)"
				}
			}
			if it.want.verdict == VerdictForward {
				exp += fmt.Sprintf(" spi %#x", it.want.spi)
			}
			if p.Verdict == VerdictBypass && !bytes.Equal(p.Data(), it.inner) {
				got += " (data changed)"
			}
			if got != exp {
				rows = append(rows, fmt.Sprintf("%3d %-8s %-58s got %s, want %s", i, []string{"engine", "general"}[k], it.what, got, exp))
			}
		}
	}
	for i, it := range items {
		// The fast and general paths agree on everything a caller
		// reads, not only on what the model predicts (Data only when
		// the packet is not dropped).
		p, q := ps[i], qs[i]
		if p.Verdict != q.Verdict || p.Drop != q.Drop || p.SPI != q.SPI || p.Seq != q.Seq || p.Src != q.Src || p.Dst != q.Dst ||
			(p.Verdict != VerdictDrop && !bytes.Equal(p.Data(), q.Data())) {
			rows = append(rows, fmt.Sprintf("%3d %-8s %-58s fast and general paths differ: %v %v %#x/%d %v>%v, %v %v %#x/%d %v>%v", i, "both", it.what,
				p.Verdict, p.Drop, p.SPI, p.Seq, p.Src, p.Dst, q.Verdict, q.Drop, q.SPI, q.Seq, q.Src, q.Dst))
		}
	}
	report(t, "inbound", rows)
	r.release(ps)
	r.release(qs)
}

// servedFlow picks an inbound ipsec policy of c, a flow inside its
// selector and an SA of c that serves its request, and returns them with
// the policy's mode.
func (g *gen) servedFlow(c genConfig) (f mFlow, s genSA, tunnel, ok bool) {
	var ins []mPolicy
	for _, p := range c.pols {
		if p.dir == spd.DirIn && p.action == spd.IPsec {
			ins = append(ins, p)
		}
	}
	if len(ins) == 0 {
		return f, s, false, false
	}
	p := pick(g.r, ins)
	if f, ok = g.flowIn(p); !ok {
		return f, s, false, false
	}
	src, dst := p.rsrc, p.rdst
	if p.mode == spd.ModeTransport {
		src, dst = f.src, f.dst
	}
	var sas []genSA
	for _, s := range c.sas {
		if s.src.Addr() == src && s.dst.Addr() == dst && (s.mode == spd.ModeAny || s.mode == p.mode) &&
			(p.level != spd.LevelUnique || p.reqid == 0 || p.reqid == s.reqid) {
			sas = append(sas, s)
		}
	}
	if len(sas) == 0 {
		return f, s, false, false
	}
	return f, pick(g.r, sas), p.mode == spd.ModeTunnel, true
}

// senderReqID is the reqid of SA s in the sender engine, which selects
// it alone: SAs with the same endpoints differ in SPI or port.
func senderReqID(s genSA) uint32 { return s.spi + uint32(s.dst.Port())<<16 }

// send encapsulates plain on SA s through the sender engine, whose SAs
// have the reqids senderReqID.
func (r *modelRig) send(s genSA, f mFlow, tunnel bool, plain []byte) []byte {
	req := spd.IPsecRequest{Mode: spd.ModeTransport, Level: spd.LevelUnique, ReqID: senderReqID(s)}
	if tunnel {
		req.Mode, req.Src, req.Dst = spd.ModeTunnel, s.src.Addr(), s.dst.Addr()
	}
	sel := spd.Selector{Src: netip.PrefixFrom(f.src, f.src.BitLen()), Dst: netip.PrefixFrom(f.dst, f.dst.BitLen()), Proto: f.proto, SrcPort: f.sport, DstPort: f.dport}
	if err := r.snd.SPD().Replace([]spd.Policy{{Dir: spd.DirOut, Sel: sel, Action: spd.IPsec, Requests: []spd.IPsecRequest{req}}}); err != nil {
		r.t.Fatal(err)
	}
	p := packetOf(r.t, r.pool, plain)
	defer r.pool.Put(p)
	r.snd.Outbound([]*Packet{p})
	if p.Verdict != VerdictForward || p.SPI != s.spi {
		r.t.Fatalf("sender: %s on SPI %#x: %v %v SPI %#x", f, s.spi, p.Verdict, p.Drop, p.SPI)
	}
	return append([]byte(nil), p.Data()...)
}

func (r *modelRig) packets(data [][]byte) []*Packet {
	ps := make([]*Packet, len(data))
	for i, d := range data {
		ps[i] = packetOf(r.t, r.pool, d)
	}
	return ps
}

func (r *modelRig) release(ps []*Packet) {
	for _, p := range ps {
		r.pool.Put(p)
	}
}

// report fails t with a table of the disagreements (the first 20).
func report(t *testing.T, dir string, rows []string) {
	t.Helper()
	if len(rows) == 0 {
		return
	}
	more := ""
	if len(rows) > 20 {
		more = fmt.Sprintf("\n... and %d more", len(rows)-20)
		rows = rows[:20]
	}
	t.Errorf("%s: %d packet(s) disagree with the model:\n  # path     flow / packet\n  %s%s", dir, len(rows), strings.Join(rows, "\n  "), more)
}

// xfOf returns the transform of the SA with the given SPI (SPIs are
// never reused by one generator).
func (g *gen) xfOf(spi uint32) int { return g.xfs[spi] }
