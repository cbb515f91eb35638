package builtin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/services"
)

// pktgenService pushes traffic through the IPsec engine: for every
// outbound ipsec policy of the engine it encrypts packets, has a peer
// engine (the same SAs, policies mirrored) decrypt them, and sends the
// peer's traffic back through the engine's inbound SAs. Everything runs in
// process: no interface is needed.
type pktgenService struct {
	sys *System

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	peer   *ipsec.Engine

	sent, delivered, bytes atomic.Uint64
	rateMu                 sync.Mutex
	lastT                  time.Time
	lastBytes, lastPkts    uint64
	bps, pps               float64
}

// Settings include the IPsec configuration, whose SAs pktgen mirrors in
// its peer engine: a changed ipsec.conf restarts pktgen too.
func (g *pktgenService) Settings(env services.BuiltinEnv) map[string]string {
	out := map[string]string{"pktgen_rate": env.Config.Get("pktgen_rate"), "pktgen_size": env.Config.Get("pktgen_size")}
	for k, v := range fileSettings(env) {
		out[k] = v
	}
	return out
}

type flow struct {
	eng  *ipsec.Engine // encrypting side
	peer *ipsec.Engine // decrypting side
	pkt  []byte        // inner packet template
}

func (g *pktgenService) Start(ctx context.Context, env services.BuiltinEnv) error {
	rate, size, err := pktgenParams(env.Config)
	if err != nil {
		return err
	}
	eng := g.sys.ips.engine()
	fw := g.sys.Framework()
	if eng == nil || fw == nil {
		return errors.New("pktgen needs the ipsec service running")
	}
	env.Root = g.sys.ipsTx.runningRoot(env) // the SAs the engine runs
	cfg, _, err := readConfig(env)
	if err != nil {
		return err
	}
	// The peer encrypts with the keys of the engine's inbound SAs (and
	// holds its outbound keys): it shares the ipsec service's ledger, so
	// the two never use one nonce twice under a key.
	peer := ipsec.NewEngine(fw, ipsec.Options{NonceLedger: g.sys.ips.currentLedger(), Name: "pktgen peer"})
	m := mirror(cfg)
	err = peer.Apply(ctx, m)
	cfg.Zero()
	if err != nil {
		_ = peer.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("peer engine: %w", err)
	}
	var flows []flow
	for _, p := range eng.Policies() {
		if p.Dir == spd.DirOut && p.Action == spd.IPsec {
			flows = append(flows, flow{eng: eng, peer: peer, pkt: innerPacket(p.Sel, size)})
		}
	}
	for _, p := range peer.Policies() {
		if p.Dir == spd.DirOut && p.Action == spd.IPsec {
			flows = append(flows, flow{eng: peer, peer: eng, pkt: innerPacket(p.Sel, size)})
		}
	}
	if len(flows) == 0 {
		_ = peer.Close(ctx)
		return errors.New("no outbound ipsec policy to send traffic through")
	}
	// Send one batch synchronously so that a broken data path fails the start.
	pool := ipsec.NewPool(0)
	if n := g.push(pool, flows[0], 1); n != 1 {
		_ = peer.Close(ctx)
		return errors.New("first packet did not make it through the SAs")
	}
	rctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.cancel, g.done, g.peer = cancel, make(chan struct{}), peer
	done := g.done
	g.lastT = time.Now()
	g.mu.Unlock()
	go g.run(rctx, done, pool, flows, rate)
	env.Log.Info(fmt.Sprintf("pushing %d pkt/s of %d bytes through %d flow(s)", rate, size, len(flows)))
	return nil
}

func (g *pktgenService) run(ctx context.Context, done chan struct{}, pool *ipsec.Pool, flows []flow, rate int) {
	defer close(done)
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	per := float64(rate) * tick.Seconds() / float64(len(flows))
	acc := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		acc += per
		n := int(acc)
		acc -= float64(n)
		for _, f := range flows {
			for n2 := n; n2 > 0; n2 -= 32 {
				g.push(pool, f, min(n2, 32))
			}
		}
	}
}

// push sends n copies of f's packet through f.eng outbound and f.peer
// inbound; it returns how many arrived intact.
func (g *pktgenService) push(pool *ipsec.Pool, f flow, n int) int {
	var arr [32]*ipsec.Packet
	pkts := arr[:n]
	for i := range pkts {
		pkts[i] = pool.Get()
		pkts[i].SetData(f.pkt)
	}
	f.eng.Outbound(pkts)
	in := pkts[:0]
	for _, p := range pkts {
		if p.Verdict == ipsec.VerdictForward {
			p.SetData(p.Data())
			in = append(in, p)
		} else {
			p.Release()
		}
	}
	g.sent.Add(uint64(n))
	f.peer.Inbound(in)
	ok := 0
	for _, p := range in {
		if p.Verdict == ipsec.VerdictForward && p.Len() == len(f.pkt) {
			ok++
			g.bytes.Add(uint64(p.Len()))
		}
		p.Release()
	}
	g.delivered.Add(uint64(ok))
	return ok
}

func (g *pktgenService) Stop(ctx context.Context) error {
	g.mu.Lock()
	cancel, done, peer := g.cancel, g.done, g.peer
	g.cancel, g.done, g.peer = nil, nil, nil
	g.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	<-done
	return peer.Close(ctx)
}

// Status reports the delivered rate over the last window (at least one
// second, or 200 ms for the first) and the totals.
func (g *pktgenService) Status() string {
	g.rateMu.Lock()
	defer g.rateMu.Unlock()
	now := time.Now()
	b, p := g.bytes.Load(), g.delivered.Load()
	if dt := now.Sub(g.lastT).Seconds(); dt >= 1 || (g.pps == 0 && dt >= 0.2) {
		g.bps = float64(b-g.lastBytes) * 8 / dt
		g.pps = float64(p-g.lastPkts) / dt
		g.lastT, g.lastBytes, g.lastPkts = now, b, p
	}
	return fmt.Sprintf("%.0f pkt/s, %.1f Mbit/s delivered; %d sent, %d delivered", g.pps, g.bps/1e6, g.sent.Load(), p)
}

// innerPacket builds an IPv4 or IPv6 UDP packet of size bytes from the
// first host of sel.Src to the first host of sel.Dst.
func innerPacket(sel spd.Selector, size int) []byte {
	src, dst := host(sel.Src), host(sel.Dst)
	sp, dp := sel.SrcPort, sel.DstPort
	if sp == 0 {
		sp = 9
	}
	if dp == 0 {
		dp = 9 // discard
	}
	if src.Is4() && dst.Is4() {
		b := make([]byte, size)
		b[0], b[8], b[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(b[2:], uint16(size))
		binary.BigEndian.PutUint16(b[4:], 0x6b6c)
		s4, d4 := src.As4(), dst.As4()
		copy(b[12:], s4[:])
		copy(b[16:], d4[:])
		binary.BigEndian.PutUint16(b[10:], csum(b[:20]))
		udp(b[20:], sp, dp)
		return b
	}
	b := make([]byte, max(size, 48))
	b[0], b[6], b[7] = 0x60, 17, 64
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	s16, d16 := src.As16(), dst.As16()
	copy(b[8:], s16[:])
	copy(b[24:], d16[:])
	udp(b[40:], sp, dp)
	// UDP checksum over IPv6 is mandatory.
	var sum uint32
	for i := 8; i < 40; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	sum += uint32(len(b)-40) + 17
	c := ^fold(sum + sum16(b[40:]))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[46:], c)
	return b
}

func udp(b []byte, sp, dp uint16) {
	binary.BigEndian.PutUint16(b[0:], sp)
	binary.BigEndian.PutUint16(b[2:], dp)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	for i := 8; i < len(b); i++ {
		b[i] = byte(i)
	}
}

func host(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	if !a.IsValid() {
		return netip.MustParseAddr("10.255.0.1")
	}
	if p.Bits() < a.BitLen() {
		a = a.Next()
	}
	return a
}

func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func csum(b []byte) uint16 { return ^fold(sum16(b)) }
