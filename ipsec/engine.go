package ipsec

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("ipsec: engine closed")

// Options tune an Engine. The zero value is usable.
type Options struct {
	// OnExpire, if set, is called from the engine's housekeeping
	// goroutine (never from the data path) when an SA passes its soft
	// (hard=false) or hard (hard=true) lifetime, once per transition. It
	// must not call Close.
	OnExpire func(st SAStatus, hard bool)
	// Tick is the housekeeping period for time lifetimes and OnExpire
	// (default 1s).
	Tick time.Duration
	// BusyTimeout bounds how long a batch waits for a crypto binding that
	// keeps refusing requests (backpressure) before dropping them with
	// DropBusy (default 1s).
	BusyTimeout time.Duration
	// SPD is the policy database to use; nil creates one. Apply replaces
	// its contents.
	SPD *spd.SPD
	// NonceLedger hands out the AEAD SAs' sequence numbers (nonces) per
	// key; share one between the engines of a process that may hold the
	// same keys (e.g. successive engines of a restarted service), and use
	// OpenNonceLedger for keys that must survive restarts. Nil: an
	// in-memory ledger private to the engine. The engine does not close it.
	NonceLedger *NonceLedger
	// Name names the engine in its SAs' crypto binding labels (e.g.
	// "ipsec": "ipsec SA esp 192.0.2.1->192.0.2.2 spi 0x1001"), so that
	// a refused provider unload says whose SAs hold it. Optional.
	Name string
	// PreferOldSA selects, when several SAs qualify for an outbound
	// packet, the oldest installed one instead of the newest (FreeBSD's
	// net.key.preferred_oldsa=1, draft-jenkins-ipsec-rekeying: useful
	// while a peer may not yet have the new SA of a rekey). Default: the
	// newest (FreeBSD's kernel defaults to the oldest). See
	// SetPreferOldSA.
	PreferOldSA bool
}

// Engine is the ESP engine: the SAD, the SPD and the ESP data path.
//
// Outbound and Inbound are safe for concurrent use from any number of
// goroutines and may run concurrently with Apply: each call runs under
// one configuration, the SAD and SPD as one Apply published them (never
// the policies of one with the SAs of another), and a packet whose SA is
// deleted mid-batch is dropped with DropBusy, DropExpired or
// DropSeqOverflow. A change made to the SPD directly (SPD()) is seen by
// the calls that start after it. Status methods are safe at any time. After Close, Apply fails with ErrClosed
// and Outbound/Inbound drop everything with DropNoSA/DropNoPolicy.
type Engine struct {
	bind binder
	spd  *spd.SPD
	sad  atomic.Pointer[sadTable]
	// pub is odd while Apply or Close publishes a new SPD and SAD (the
	// SPD first): see snapshot.
	pub   atomic.Uint64
	mu    sync.Mutex // serialises Apply and Close
	fpKey [32]byte
	opts  Options
	// preferOld is the current Options.PreferOldSA (SetPreferOldSA);
	// written under mu, published in each SAD snapshot.
	preferOld atomic.Bool

	drops                     dropCounters
	outPkts, outBytes, bypass atomic.Uint64
	inPkts, inBytes, local    atomic.Uint64

	batches sync.Pool
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool

	// testIV, set only by tests, overrides the IV of every outbound
	// packet (to reproduce published vectors).
	testIV func(iv []byte)
	// generalOnly, set only by tests before the first batch, sends every
	// packet through the general path: no outFast4 or inFast4, no reuse
	// of a flow's SA or of an SA's policy decision, no encapTunnel4 or
	// setSeqTunnel4 (the fast paths are checked against it).
	generalOnly bool
}

// sadTable is an immutable snapshot of the SAD.
type sadTable struct {
	all    []*sa
	bySPI  map[uint32][]*sa
	byPair map[[2]netip.Addr][]*sa
	ports  map[uint16]bool // local UDP ports of esp-udp SAs
	// preferOld: lookupOut prefers the oldest SA (Options.PreferOldSA).
	preferOld bool
	// pol is the SPD generation published with this snapshot (see
	// Engine.snapshot).
	pol spd.View
}

func newEngine(b binder, opts Options) *Engine {
	if opts.Tick <= 0 {
		opts.Tick = time.Second
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = time.Second
	}
	e := &Engine{bind: b, opts: opts, spd: opts.SPD, stop: make(chan struct{})}
	e.preferOld.Store(opts.PreferOldSA)
	if e.spd == nil {
		e.spd = spd.New()
	}
	if e.opts.NonceLedger == nil {
		e.opts.NonceLedger = NewNonceLedger()
	}
	_, _ = crand.Read(e.fpKey[:])
	t := e.newTable(nil)
	t.pol = e.spd.View()
	e.sad.Store(t)
	e.batches.New = func() any { return &batch{done: make(chan struct{}, 1)} }
	e.wg.Add(1)
	go e.housekeeping()
	return e
}

// NewEngineWithProvider returns an engine whose SAs bind directly to
// sessions of one provider, without live rebind. It exists for tools and
// tests that run without a framework; production code uses NewEngine.
func NewEngineWithProvider(p crypto.Provider, opts Options) *Engine {
	return newEngine(providerBinder(p), opts)
}

// buildTable indexes the SAs all (in installation order: Apply's order
// of statements, kept SAs where they were) into a new snapshot. Each
// byPair list is ordered newest first by the time the SA was installed,
// later in all first among SAs of one Apply, like FreeBSD's savtree_alive.
func buildTable(all []*sa) *sadTable {
	t := &sadTable{all: all, bySPI: map[uint32][]*sa{}, byPair: map[[2]netip.Addr][]*sa{}, ports: map[uint16]bool{}}
	for _, s := range all {
		t.bySPI[s.cfg.SPI] = append(t.bySPI[s.cfg.SPI], s)
		k := [2]netip.Addr{s.cfg.Src.Addr(), s.cfg.Dst.Addr()}
		t.byPair[k] = append(t.byPair[k], s)
		if s.cfg.Proto == setkey.ProtoESPUDP {
			t.ports[s.cfg.Dst.Port()] = true
		}
	}
	for _, l := range t.byPair {
		slices.Reverse(l)
		slices.SortStableFunc(l, func(a, b *sa) int { return b.added.Compare(a.added) })
	}
	return t
}

// newTable is buildTable with the engine's SA preference.
func (e *Engine) newTable(all []*sa) *sadTable {
	t := buildTable(all)
	t.preferOld = e.preferOld.Load()
	return t
}

// SetPreferOldSA sets which SA outbound traffic takes when several
// qualify (see Options.PreferOldSA); it takes effect for the next
// batches. Safe for concurrent use with the data path.
func (e *Engine) SetPreferOldSA(old bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() || e.preferOld.Load() == old {
		return
	}
	e.preferOld.Store(old)
	// A new snapshot: every per-batch cache keyed by the SAD snapshot
	// (batch.out4, batch.in4) lets go of selections made under the old
	// preference.
	t := e.newTable(e.sad.Load().all)
	t.pol = e.spd.View()
	e.sad.Store(t)
}

// PreferOldSA reports the current SA preference (Options.PreferOldSA,
// SetPreferOldSA).
func (e *Engine) PreferOldSA() bool { return e.preferOld.Load() }

// snapshot returns the configuration a batch runs under: the SAD
// snapshot and the SPD generation that go together. Apply publishes the
// SPD, then the SAD; a batch that started in between would otherwise
// select SAs of the old configuration for policies of the new one (or
// check an SA of the old one against the new policies). When no Apply
// published anything while the two were read, they belong together (the
// SPD may also have been changed directly, without Apply: that change is
// seen); otherwise the batch takes the SPD generation published with the
// SAD snapshot it got.
func (e *Engine) snapshot() (*sadTable, spd.View) {
	p := e.pub.Load()
	tab := e.sad.Load()
	v := e.spd.View()
	if p&1 == 0 && e.pub.Load() == p {
		return tab, v
	}
	return tab, tab.pol
}

// lookupIn finds the inbound SA for (dst, proto, spi). An invalid dst
// matches any destination.
func (t *sadTable) lookupIn(spi uint32, dst netip.Addr, udp bool) *sa {
	for _, s := range t.bySPI[spi] {
		if (s.cfg.Proto == setkey.ProtoESPUDP) != udp {
			continue
		}
		if dst.IsValid() && s.cfg.Dst.Addr() != dst {
			continue
		}
		return s
	}
	return nil
}

// lookupOut picks the outbound SA for request r of a matching policy,
// between src and dst (the request's tunnel endpoints, or the packet's
// addresses in transport mode), as FreeBSD's key_allocsa_policy does: the
// candidates are the usable (mature or dying) SAs with those endpoints,
// of the request's mode (or mode any) and, for a unique level with a
// reqid, of that reqid; of them it takes the newest installed, or the
// oldest when the table prefers old SAs (net.key.preferred_oldsa,
// Options.PreferOldSA). byPair lists are newest first (buildTable). A
// chosen SA stays the choice while it is usable and the table is the
// same: other SAs only ever leave the candidates.
func (t *sadTable) lookupOut(src, dst netip.Addr, r *spd.IPsecRequest) *sa {
	var best *sa
	for _, s := range t.byPair[[2]netip.Addr{src, dst}] {
		if !s.usable() || !s.serves(r) {
			continue
		}
		if !t.preferOld {
			return s
		}
		best = s
	}
	return best
}

// serves reports whether SA s may carry traffic of request r (endpoints
// aside): its mode is r's or any, and for a unique request with a reqid
// it has that reqid.
func (s *sa) serves(r *spd.IPsecRequest) bool {
	if s.cfg.Mode != spd.ModeAny && s.cfg.Mode != r.Mode {
		return false
	}
	return r.Level != spd.LevelUnique || r.ReqID == 0 || s.cfg.ReqID == r.ReqID
}

// hasDead reports whether an SA that would serve r between src and dst
// exists but is past its hard lifetime, or was deleted by an Apply while
// the batch ran (to count DropExpired rather than DropNoOutSA).
func (t *sadTable) hasDead(src, dst netip.Addr, r *spd.IPsecRequest) bool {
	for _, s := range t.byPair[[2]netip.Addr{src, dst}] {
		if s.state.Load() >= stateDead && s.serves(r) {
			return true
		}
	}
	return false
}

// batch is the per-call state of Outbound/Inbound, pooled.
type batch struct {
	pending atomic.Int64
	done    chan struct{}
	reqs    []*crypto.Request
	rng     *rand.ChaCha8
	// pf keeps the bytes read ahead by head (so that the loads are not
	// optimised away).
	pf byte
	// view is the SPD generation of the Inbound call using the batch
	// (Engine.snapshot): its packets' policy checks, in their
	// completions too, are on it.
	view spd.View
	// in4 is the SA of the last inbound run of plain IPv4 ESP packets
	// that used this batch (with the SAD snapshot it was found in): the
	// next Inbound call on the same snapshot starts with it, so that its
	// first packet takes the fast path too.
	in4 struct {
		tab  *sadTable
		s    *sa
		spi  uint32
		dst4 [4]byte
	}
	// out4 is Outbound's flow state at the end of the last call that used
	// this batch: the last simple IPv4 flow (its 5-tuple bytes and header)
	// with its policy, and the SA and mode it went out on, with the SPD
	// generation and SAD snapshot its policy and SA were selected in
	// (both from Engine.snapshot). The next Outbound call
	// starts with it while both are unchanged and the SA is still mature
	// (so that lookupOut would select it again). A pooled batch may keep a
	// replaced SAD snapshot (and its SAs, keys already zeroed) reachable
	// until its next use or until the pool drops it.
	out4 struct {
		gen    uint64
		tab    *sadTable
		k0, k1 uint64
		h      ipHeader
		pol    *spd.Policy // the flow's policy
		s      *sa
		tunnel bool
	}
}

var rngPool = sync.Pool{New: func() any {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic("ipsec: crypto/rand failed: " + err.Error())
	}
	return rand.NewChaCha8(seed)
}}

func (e *Engine) getBatch() *batch {
	b := e.batches.Get().(*batch)
	b.pending.Store(1) // guard, released by wait
	return b
}

// wait releases the guard and waits until every submitted request of the
// batch completed.
func (e *Engine) wait(b *batch) {
	if b.pending.Add(-1) != 0 {
		<-b.done
	}
	if b.rng != nil {
		rngPool.Put(b.rng)
		b.rng = nil
	}
	clear(b.reqs)
	b.reqs = b.reqs[:0]
	e.batches.Put(b)
}

func (b *batch) finishOne() { b.finish(1) }

// prefetchAhead is how many packets ahead of the one being processed the
// per-packet loops of Outbound and Inbound read a packet's first data
// byte (Packet.head). A batch is filled before it is processed (a
// recvmmsg, a TUN read loop), so by its turn a packet's header has
// usually left L1; reading it a few packets early puts the cache miss
// in parallel with the work on earlier packets, as DPDK's receive loops
// do with rte_prefetch0. Go has no prefetch instruction, so it is a load
// whose result is kept (in batch.pf).
const prefetchAhead = 4

// finish records k completed requests; the last one wakes the waiter.
func (b *batch) finish(k int64) {
	if b.pending.Add(-k) == 0 {
		b.done <- struct{}{}
	}
}

func (e *Engine) drop(p *Packet, s *sa, d DropReason) {
	p.Verdict, p.Drop = VerdictDrop, d
	e.drops[d].Add(1)
	if s != nil {
		s.drops[d].Add(1)
	}
}

// submit hands reqs (all of SA s, all already set up) to its binding,
// retrying on backpressure for at most BusyTimeout.
func (e *Engine) submit(b *batch, s *sa, reqs []*crypto.Request) {
	if len(reqs) == 0 {
		return
	}
	b.pending.Add(int64(len(reqs)))
	spins := 0
	var deadline time.Time
	for len(reqs) > 0 {
		n := s.bind.Submit(reqs)
		reqs = reqs[n:]
		if n > 0 {
			spins = 0
			continue
		}
		if len(reqs) == 0 {
			break
		}
		spins++
		if spins == 1 {
			deadline = time.Now().Add(e.opts.BusyTimeout)
		}
		if s.state.Load() == stateDeleted || (spins > 64 && time.Now().After(deadline)) {
			for _, r := range reqs {
				p := r.User.(*Packet)
				e.drop(p, s, DropBusy)
				b.finishOne()
			}
			return
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// completer returns the CompletionFunc of SA s. A completion batch holds
// the SA's encryptions (Outbound), its decryptions (Inbound), or both when
// one SA serves both directions: each run of one direction is finished
// by completeOut or completeIn.
func (e *Engine) completer(s *sa) crypto.CompletionFunc {
	return func(done []*crypto.Request) {
		for len(done) > 0 {
			dir := done[0].Dir
			n := 1
			for n < len(done) && done[n].Dir == dir {
				n++
			}
			if dir == crypto.Encrypt {
				e.completeOut(s, done[:n])
			} else {
				e.completeIn(s, done[:n])
			}
			done = done[n:]
		}
	}
}

// finishRun releases the waiters of the batches whose packets the
// completion held: cur is the batch of the current run of packets, k
// how many of them were finished.
type finishRun struct {
	cur *batch
	k   int64
}

// add counts p, releasing the previous batch's run if p belongs to
// another batch; it reports whether p starts the run of another batch.
func (f *finishRun) add(p *Packet) bool {
	if b := p.b; b != f.cur {
		if f.cur != nil {
			f.cur.finish(f.k)
		}
		f.cur, f.k = b, 1
		return true
	}
	f.k++
	return false
}

// flush releases the last run.
func (f *finishRun) flush() {
	if f.cur != nil {
		f.cur.finish(f.k)
	}
}

// completeOut finishes sealed outbound packets of SA s.
func (e *Engine) completeOut(s *sa, done []*crypto.Request) {
	var fr finishRun
	var n, bytes int
	udp6 := s.cfg.Proto == setkey.ProtoESPUDP && s.cfg.Dst.Addr().Is6() // finishOut sets the UDP checksum
	for _, r := range done {
		p := r.User.(*Packet)
		fr.add(p)
		if r.Status == crypto.StatusOK && !udp6 {
			// finishOut's common case, inline.
			p.Verdict = VerdictForward
			n++
			bytes += p.end - p.off
		} else if e.finishOut(p, s, r) {
			n++
			bytes += p.Len()
		}
	}
	fr.flush()
	if n > 0 {
		e.outPkts.Add(uint64(n))
		e.outBytes.Add(uint64(bytes))
	}
}

// completeIn finishes opened inbound packets of SA s: the replay window
// update for each verified packet (RFC 4303 section 3.4.3: only after the
// ICV verified), then finishIn. The SA lock is held once for the whole
// run: it covers the window and the SA's policy decision (sa.inPol).
func (e *Engine) completeIn(s *sa, done []*crypto.Request) {
	s.mu.Lock()
	var pc polCache
	var fr finishRun
	var n, bytes int
	w := s.win
	for _, r := range done {
		p := r.User.(*Packet)
		if fr.add(p) {
			// The packets of another Inbound call: their policy
			// decisions are on its SPD view (see polCache).
			if g := p.b.view.Generation(); g != pc.gen || !pc.valid {
				pc = polCache{gen: g}
				if s.inPol.gen == g {
					pc = s.inPol
				}
			}
		}
		if w != nil && r.Status == crypto.StatusOK && !w.Advance(p.Seq) && !w.Update(p.Seq) {
			p.Drop = DropReplay
		}
		if e.finishIn(p, s, r, &pc) {
			n++
			bytes += p.bytes
		}
	}
	if pc.valid && pc != s.inPol {
		s.inPol = pc
	}
	s.mu.Unlock()
	fr.flush()
	if n > 0 {
		s.accountIn(n, bytes)
		e.inPkts.Add(uint64(n))
		e.inBytes.Add(uint64(bytes))
	}
}

// housekeeping applies time lifetimes and reports expiries.
func (e *Engine) housekeeping() {
	defer e.wg.Done()
	t := time.NewTicker(e.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			e.expire(now)
		}
	}
}

// expire applies time lifetimes at now and calls OnExpire for SAs whose
// state advanced since the last report.
func (e *Engine) expire(now time.Time) {
	for _, s := range e.sad.Load().all {
		s.checkTime(now)
		st := s.state.Load()
		if st > stateDead {
			continue
		}
		told := s.told.Load()
		if st > told && s.told.CompareAndSwap(told, st) && e.opts.OnExpire != nil {
			if st >= stateDying && told < stateDying {
				e.opts.OnExpire(s.status(), false)
			}
			if st == stateDead {
				e.opts.OnExpire(s.status(), true)
			}
		}
	}
}

// Close stops housekeeping, removes every SA (closing its binding, which
// zeroes the session keys) and flushes the SPD. Batches in flight finish
// first on the closing bindings. Close is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	close(e.stop)
	e.wg.Wait()
	e.pub.Add(1)
	old := e.sad.Swap(e.newTable(nil)) // no policies: a zero View
	e.spd.Flush()
	e.pub.Add(1)
	for _, s := range old.all {
		s.close(ctx)
	}
	return nil
}

func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func put64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }
