package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/netio"
)

// Gateway-specific drop reasons, counted after the engine's.
const (
	dropBypass     = int(ipsec.NumDropReasons) + iota // outbound "none" policy: the gateway has no clear path
	dropIKE                                           // inbound IKE datagram: no IKE daemon
	dropSendError                                     // outer socket send failed
	dropTUNError                                      // TUN write failed
	dropReadError                                     // TUN or socket read failed
	dropNoHeadroom                                    // inner packet has no room for the TUN header
	numReasons
)

var extraReasonNames = [...]string{
	"bypass-unsupported", "ike-unhandled", "send-error", "tun-write-error", "read-error", "no-headroom",
}

func reasonName(i int) string {
	if i < int(ipsec.NumDropReasons) {
		return ipsec.DropReason(i).String()
	}
	return extraReasonNames[i-int(ipsec.NumDropReasons)]
}

// dirCounters are one direction's counters, updated once per batch.
type dirCounters struct {
	read, readBytes atomic.Uint64
	pkts, bytes     atomic.Uint64
	drops           [numReasons]atomic.Uint64
}

// batchCounters accumulate one batch before they are published.
type batchCounters struct {
	read, readBytes uint64
	pkts, bytes     uint64
	drops           [numReasons]uint64
}

func (c *dirCounters) add(b *batchCounters) {
	c.read.Add(b.read)
	c.readBytes.Add(b.readBytes)
	c.pkts.Add(b.pkts)
	c.bytes.Add(b.bytes)
	for i, n := range b.drops {
		if n != 0 {
			c.drops[i].Add(n)
		}
	}
	*b = batchCounters{}
}

func (c *dirCounters) status() DirStatus {
	s := DirStatus{
		ReadPackets: c.read.Load(), ReadBytes: c.readBytes.Load(),
		Packets: c.pkts.Load(), Bytes: c.bytes.Load(),
	}
	for i := range c.drops {
		if n := c.drops[i].Load(); n != 0 {
			if s.Drops == nil {
				s.Drops = make(map[string]uint64)
			}
			s.Drops[reasonName(i)] = n
			s.DropTotal += n
		}
	}
	return s
}

// DirStatus are the counters of one direction.
type DirStatus struct {
	// ReadPackets and ReadBytes count what was read: plaintext from the
	// TUN (outbound) or datagrams from the outer socket (inbound).
	ReadPackets, ReadBytes uint64
	// Packets and Bytes count what was delivered: ESP packets sent and
	// their ESP bytes (outbound), inner packets written to the TUN and
	// their bytes (inbound).
	Packets, Bytes uint64
	// Drops counts dropped packets by reason (the engine's reason names,
	// e.g. "no-policy", "bad-icv", plus the gateway's: bypass-unsupported,
	// ike-unhandled, send-error, tun-write-error, read-error, no-headroom);
	// zero counts are omitted. DropTotal is their sum.
	Drops     map[string]uint64
	DropTotal uint64
}

// Status is a snapshot of a gateway for keelctl. It holds no key material.
type Status struct {
	Interface string
	MTU       int
	Outer     string // e.g. "udp:4500" or "esp:10.99.0.1"
	Encap     string
	Local     netip.Addr
	Peer      netip.Addr
	Out, In   DirStatus
	// Peers are the counters of every peer the SAs name (as of the last
	// Refresh), in the order of the SAs.
	Peers []PeerStatus
	// Err is the error that stopped a loop early, if any ("" while
	// healthy).
	Err string
}

// Gateway runs the dataplane loops for one TUN and one outer socket. Its
// methods are safe for concurrent use; after Close the loops have stopped and
// Status still reports the final counters.
type Gateway struct {
	eng   *ipsec.Engine
	tun   netio.TUN
	outer netio.Outer
	cfg   Config
	name  string
	log   *slog.Logger

	out, in dirCounters

	peersMu sync.Mutex // serialises Refresh
	peers   atomic.Pointer[peerTable]

	wg        sync.WaitGroup
	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	errMu     sync.Mutex
	err       error
	done      chan struct{}
}

// Start opens the TUN cfg.TUN and the outer socket (UDP port cfg.Port, or a
// raw ESP socket on cfg.Local), puts cfg.Addrs on the TUN, routes cfg.Routes
// (or, when empty, the destination of every outbound ipsec policy of eng)
// into it, brings it up and starts the loops. eng must be configured (Apply)
// before Start when the routes come from its policies (they are set once;
// after a policy change route the new PolicyRoutes with
// netio.ConfigureInterface, remove the old ones with netio.RemoveRoutes and
// call Refresh, as keeld's ipsec service does), and must outlive the
// gateway. It needs CAP_NET_ADMIN
// (and CAP_NET_RAW for raw ESP). ctx bounds only the setup; stop the gateway
// with Close.
func Start(ctx context.Context, eng *ipsec.Engine, cfg Config) (*Gateway, error) {
	cfg.defaults()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !cfg.Local.IsValid() {
		return nil, fmt.Errorf("%w: ipsec_local is required", ErrConfig)
	}
	t, err := netio.OpenTUN(cfg.TUN, cfg.MTU)
	if err != nil {
		return nil, err
	}
	var o netio.Outer
	switch cfg.Encap {
	case EncapESP:
		o, err = netio.ListenRawESP(cfg.Local)
	default:
		var u *netio.UDP
		if u, err = netio.ListenUDP(cfg.Port); err == nil {
			u.SetGSO(!cfg.NoUDPGSO)
			o = u
		}
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	name, _ := t.Name()
	if err := netio.ConfigureInterface(name, cfg.Addrs, Routes(cfg, eng)); err != nil {
		o.Close()
		t.Close()
		return nil, err
	}
	g, err := New(eng, t, o, cfg)
	if err != nil {
		o.Close()
		t.Close()
		return nil, err
	}
	return g, nil
}

// Routes returns the prefixes Start routes into the TUN: cfg.Routes
// (ipsec_routes) if set, else the routes of PolicyRoutes for eng's policies
// and SAs.
func Routes(cfg Config, eng *ipsec.Engine) []netip.Prefix {
	if len(cfg.Routes) > 0 {
		return cfg.Routes
	}
	var ends []netip.Addr
	for _, sa := range eng.SAs() {
		ends = append(ends, sa.Src.Addr().Unmap(), sa.Dst.Addr().Unmap())
	}
	routes, _ := PolicyRoutes(eng.Policies(), ends)
	return routes
}

// PolicyRoutes returns the destination prefixes of the outbound ipsec
// policies in pols, deduplicated, skipping any-address selectors.
// Prefixes that hold one of the SA endpoints ends (a peer's outer address,
// or the local one) are returned in skipped instead: routed into the TUN,
// the gateway's own ESP to that peer would enter the tunnel again (a
// transport-mode policy to the peer, say). ipsec_routes can still route
// them.
func PolicyRoutes(pols []spd.Policy, ends []netip.Addr) (routes, skipped []netip.Prefix) {
	seen := map[netip.Prefix]bool{}
	for _, p := range pols {
		if p.Dir != spd.DirOut || p.Action != spd.IPsec || !p.Sel.Dst.IsValid() || p.Sel.Dst.Bits() == 0 {
			continue
		}
		d := p.Sel.Dst.Masked()
		if seen[d] {
			continue
		}
		seen[d] = true
		if slices.ContainsFunc(ends, d.Contains) {
			skipped = append(skipped, d)
		} else {
			routes = append(routes, d)
		}
	}
	return routes, skipped
}

// New starts a gateway on already open I/O (real or netio/netiotest fakes).
// On success the gateway owns t and o and closes them on Close; on error the
// caller still owns them.
func New(eng *ipsec.Engine, t netio.TUN, o netio.Outer, cfg Config) (*Gateway, error) {
	cfg.defaults()
	if eng == nil || t == nil || o == nil {
		return nil, errors.New("dataplane: New needs an engine, a TUN and an outer socket")
	}
	name, err := t.Name()
	if err != nil {
		name = cfg.TUN
	}
	g := &Gateway{eng: eng, tun: t, outer: o, cfg: cfg, name: name, log: slog.Default().With("if", name), done: make(chan struct{})}
	rs := o.Receivers()
	if len(rs) == 0 {
		return nil, errors.New("dataplane: outer socket has no receivers")
	}
	g.Refresh()
	g.wg.Add(1 + len(rs))
	go g.outbound()
	for _, r := range rs {
		go g.inbound(r)
	}
	go func() { g.wg.Wait(); close(g.done) }()
	return g, nil
}

// Done is closed when every loop has stopped (after Close, or after all
// loops failed).
func (g *Gateway) Done() <-chan struct{} { return g.done }

// Close stops the loops, closes the TUN and the outer socket and waits for
// the loops to return. It is idempotent. The engine is not closed.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		g.closing.Store(true)
		e1 := g.tun.Close()
		e2 := g.outer.Close()
		g.wg.Wait()
		g.closeErr = errors.Join(e1, e2)
	})
	return g.closeErr
}

// Status returns the gateway's counters.
func (g *Gateway) Status() Status {
	st := Status{
		Interface: g.name, MTU: g.cfg.MTU, Outer: g.outer.Name(), Encap: g.cfg.Encap.String(),
		Local: g.cfg.Local, Peer: g.cfg.Peer, Out: g.out.status(), In: g.in.status(), Peers: g.peerStatus(),
	}
	g.errMu.Lock()
	if g.err != nil {
		st.Err = g.err.Error()
	}
	g.errMu.Unlock()
	return st
}

func (g *Gateway) fail(err error) {
	g.errMu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.errMu.Unlock()
	g.log.Error("dataplane loop stopped", "err", err)
}

// maxReadErrors is how many consecutive read errors stop a loop.
const maxReadErrors = 100

// readFailed handles a read error; it reports whether the loop must stop.
func (g *Gateway) readFailed(err error, consecutive *int, c *batchCounters) bool {
	if g.closing.Load() || errors.Is(err, netio.ErrClosed) || errors.Is(err, os.ErrClosed) {
		return true
	}
	c.drops[dropReadError]++
	*consecutive++
	if *consecutive >= maxReadErrors {
		g.fail(fmt.Errorf("%s: %d consecutive read errors, last: %w", g.name, *consecutive, err))
		return true
	}
	time.Sleep(time.Millisecond)
	return false
}

// newBatch allocates one loop's batch, once: BatchSize packets from a pool
// of MaxSegment buffers (big enough for a GSO/GRO run), and the read slices
// the I/O layer fills. The packets are reused for the life of the loop.
func newBatch() (pkts []*ipsec.Packet, bufs [][]byte, sizes []int) {
	pool := ipsec.NewPool(netio.MaxSegment)
	pkts = make([]*ipsec.Packet, netio.BatchSize)
	for i := range pkts {
		pkts[i] = pool.Get()
	}
	return pkts, make([][]byte, len(pkts)), make([]int, len(pkts))
}

// releaseBatch returns a loop's packets to their pool.
func releaseBatch(pkts []*ipsec.Packet) {
	for _, p := range pkts {
		p.Release()
	}
}

// outbound is the TUN → engine → socket loop.
func (g *Gateway) outbound() {
	defer g.wg.Done()
	// Buffers are big so that a GSO run can be coalesced into the spare
	// capacity of its first packet (netio.Outer.Send).
	pkts, bufs, sizes := newBatch()
	defer releaseBatch(pkts)
	send := make([][]byte, 0, len(pkts))
	var c batchCounters
	errs := 0
	// Packets are prepared (reset to an empty read buffer) once here and
	// afterwards only those the previous batch used.
	used := len(pkts)
	for {
		for i, p := range pkts[:used] {
			bufs[i] = p.ReadBuffer()
		}
		used = 0
		n, err := g.tun.Read(bufs, sizes, 0)
		if err != nil && n == 0 {
			stop := g.readFailed(err, &errs, &c)
			g.out.add(&c)
			if stop {
				return
			}
			continue
		}
		errs = 0
		used = n
		batch := pkts[:n]
		for i, p := range batch {
			p.Commit(sizes[i])
			c.read++
			c.readBytes += uint64(sizes[i])
		}
		send = g.forwardOut(batch, send, &c)
		clear(send)
		g.out.add(&c)
	}
}

// forwardOut runs a batch read from the TUN through the engine and sends
// the ESP packets, one Send per run of packets to the same peer: the
// remote endpoint of the SA each packet's policy selected. send is scratch
// space, returned for reuse.
func (g *Gateway) forwardOut(batch []*ipsec.Packet, send [][]byte, c *batchCounters) [][]byte {
	g.eng.Outbound(batch)
	peers := g.peers.Load()
	send = send[:0]
	var dst netip.AddrPort
	for _, p := range batch {
		switch p.Verdict {
		case ipsec.VerdictForward:
			d := p.Dst
			if d.Port() == 0 && g.cfg.Encap == EncapUDP {
				d = netip.AddrPortFrom(d.Addr(), DefaultPort)
			}
			if d != dst && len(send) > 0 {
				g.send(send, dst, c, peers)
				send = send[:0]
			}
			dst = d
			send = append(send, p.ESP())
		case ipsec.VerdictBypass:
			c.drops[dropBypass]++
		default:
			c.drops[p.Drop]++
		}
	}
	if len(send) > 0 {
		g.send(send, dst, c, peers)
	}
	return send
}

// send sends a run of ESP packets to dst and counts them for the interface
// and for dst's peer.
func (g *Gateway) send(bufs [][]byte, dst netip.AddrPort, c *batchCounters, peers *peerTable) {
	var bytes uint64
	for _, b := range bufs {
		bytes += uint64(len(b))
	}
	run := peerRun{c: peers.byDst[g.peerKey(dst)]}
	if err := g.outer.Send(bufs, dst); err != nil {
		c.drops[dropSendError] += uint64(len(bufs))
		run.drop = uint64(len(bufs))
	} else {
		c.pkts += uint64(len(bufs))
		c.bytes += bytes
		run.pkts, run.bytes = uint64(len(bufs)), bytes
	}
	run.flush(true)
}

func frameOf(k netio.Kind) ipsec.Frame {
	switch k {
	case netio.KindIP:
		return ipsec.FrameIP
	case netio.KindESP:
		return ipsec.FrameESP
	}
	return ipsec.FrameUDP
}

// inbound is the socket → engine → TUN loop for one receiver.
func (g *Gateway) inbound(r netio.Receiver) {
	defer g.wg.Done()
	pkts, bufs, sizes := newBatch()
	defer releaseBatch(pkts)
	srcs := make([]netip.AddrPort, len(pkts))
	batch := make([]*ipsec.Packet, 0, len(pkts))
	wbufs := make([][]byte, 0, len(pkts))
	frame := frameOf(r.Kind)
	var local netip.AddrPort
	if g.cfg.Local.IsValid() {
		port := uint16(0)
		if r.Kind == netio.KindUDP {
			port = g.cfg.Port
		}
		local = netip.AddrPortFrom(g.cfg.Local, port)
	}
	var c batchCounters
	errs := 0
	used := len(pkts) // see outbound
	for {
		for i, p := range pkts[:used] {
			bufs[i] = p.ReadBuffer()
		}
		used = 0
		n, err := r.Receive(bufs, sizes, srcs)
		if err != nil && n == 0 {
			stop := g.readFailed(err, &errs, &c)
			g.in.add(&c)
			if stop {
				return
			}
			continue
		}
		errs = 0
		used = n
		batch = batch[:0]
		for i := 0; i < n; i++ {
			if sizes[i] <= 0 {
				continue
			}
			p := pkts[i]
			p.Commit(sizes[i])
			p.Frame = frame
			p.Src = srcs[i]
			p.Dst = local
			c.read++
			c.readBytes += uint64(sizes[i])
			batch = append(batch, p)
		}
		if len(batch) == 0 {
			continue
		}
		var stop bool
		wbufs, stop = g.forwardIn(batch, wbufs, &c)
		if stop {
			return
		}
		clear(wbufs)
		g.in.add(&c)
	}
}

// forwardIn runs a received batch through the engine and writes the inner
// packets to the TUN in one Write, each with netio.TUNOffset bytes of its
// headroom in front (where the TUN puts its virtio-net header) and its
// buffer's spare capacity behind (where GRO coalesces). wbufs is scratch
// space, returned for reuse; stop reports that the gateway is closing.
func (g *Gateway) forwardIn(batch []*ipsec.Packet, wbufs [][]byte, c *batchCounters) ([][]byte, bool) {
	g.eng.Inbound(batch)
	peers := g.peers.Load()
	var (
		run  peerRun
		last spiCache
	)
	wbufs = wbufs[:0]
	var bytes uint64
	for _, p := range batch {
		run.switchTo(peers.inPeer(p, &last), false)
		switch p.Verdict {
		case ipsec.VerdictForward:
			w := p.Front(netio.TUNOffset)
			if w == nil {
				c.drops[dropNoHeadroom]++
				run.drop++
				continue
			}
			wbufs = append(wbufs, w)
			bytes += uint64(p.Len())
			run.pkts++
			run.bytes += uint64(p.Len())
			continue
		case ipsec.VerdictLocal:
			c.drops[dropIKE]++
		case ipsec.VerdictBypass:
			c.drops[dropBypass]++
		default:
			c.drops[p.Drop]++
		}
		run.drop++
	}
	run.flush(false)
	if len(wbufs) > 0 {
		if _, err := g.tun.Write(wbufs, netio.TUNOffset); err != nil {
			if g.closing.Load() {
				return wbufs, true
			}
			// A failed packet (the TUN joins per-packet errors) is
			// counted once per batch; the batch is still accounted as
			// delivered.
			c.drops[dropTUNError]++
		}
		c.pkts += uint64(len(wbufs))
		c.bytes += bytes
	}
	clear(wbufs)
	return wbufs, false
}
