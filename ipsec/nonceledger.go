package ipsec

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/keelinit/keel/internal/keyedhash"
)

// ErrLedgerClosed is returned by Apply when a new AEAD SA needs sequence
// numbers from a NonceLedger that was closed.
var ErrLedgerClosed = errors.New("ipsec: nonce ledger closed")

// NonceLedger hands out outbound sequence numbers — which are the AEAD
// nonces (the 64-bit IV of AES-GCM and ChaCha20-Poly1305, RFC 4106/7634) —
// per AEAD key, so that no number is ever used twice under one key: not
// when an SA is deleted and added again, not after a re-key away and back
// (A→B→A), not when one Apply replaces an SA by another with the same key,
// not when two installed SAs (of one engine, or of engines sharing the
// ledger) carry the same key, and, for a ledger backed by a file
// (OpenNonceLedger), not across restarts of the process or reboots.
//
// Every AEAD SA owns a range of numbers of its key, granted before it is
// published; the data path checks each batch against the range with three
// atomic loads (on the counter's cache line) and drops what falls outside (counted as DropSeqOverflow)
// rather than reuse a number. When 3/4 of a range is consumed the data
// path wakes a background refresher (never blocking, never allocating),
// which extends the range, or moves the SA to a fresh one above every
// other grant of the key (the sequence number then jumps forward, which
// receivers accept). An in-memory ledger grants unbounded ranges and caps
// an SA's range only when another SA takes the key; a file-backed ledger
// grants blocks of 2^16 numbers, doubling per refresh up to 2^22, each
// written and fsynced before use, so a crash wastes at most one block per
// SA and never reuses one. A closed SA gives back its unused numbers when
// no later grant was made for its key, so a clean restart continues
// exactly after the last number sent. Processes sharing a ledger file
// (flock'ed read-modify-write) get disjoint ranges too. Apply refuses a
// new SA without ESN whose key has used up the 32-bit space.
//
// Keys are identified by an HMAC-SHA-256 of (cipher, key size, key and
// salt) under a random 32-byte ledger key; the key material itself is
// never stored. Entries live as long as the ledger (a key may come back
// any time). A file-backed ledger carries an epoch, also kept in its
// record, so that it moves to another file with its entries (Move, or an
// open at a new path) and a lost or rolled-back file is never mistaken for
// a first start (see OpenNonceLedger and NoncePolicy). A failed write is
// logged once, counted, and reported by Err and Stats until one succeeds.
//
// A NonceLedger is safe for concurrent use by any number of engines and
// goroutines. Share one between every engine of a process that may hold
// the same keys. After Close, Apply fails (ErrLedgerClosed) for new AEAD
// SAs and installed ones are no longer refreshed: they drop once their
// range is consumed. The refresher goroutine runs only while the ledger
// has installed AEAD SAs.
type NonceLedger struct {
	mu       sync.Mutex
	key      [32]byte
	file     *ledgerFile   // nil: in memory
	opts     LedgerOptions // of a file-backed ledger
	epoch    uint64        // the file's epoch this process last wrote
	incident string        // why the ledger was unsafe when opened, if it was
	m        map[[32]byte]*nonceEntry
	live     map[*sa]struct{}
	running  bool
	closed   bool
	err      error // last persistence error, nil after a successful write
	kick     chan struct{}
	// Counters (see LedgerStats).
	unrecorded, writeErrors uint64
}

// nonceEntry is the state of one key (guarded by NonceLedger.mu).
type nonceEntry struct {
	next uint64 // highest number granted (possibly used) in this process
	disk uint64 // value this process last wrote for the key
	tail *sa    // the SA granted the range ending at next, if any
}

const (
	// nonceBlockMin and nonceBlockMax bound the blocks of a file-backed
	// ledger; nonceUnbounded is the range of an in-memory ledger.
	nonceBlockMin  = 1 << 16
	nonceBlockMax  = 1 << 22
	nonceUnbounded = math.MaxUint64
	// nonceCapMargin is how many numbers an SA keeps when another SA
	// takes its key and its range is capped.
	nonceCapMargin = 1 << 20
	// nonceRetry is the refresher's period (retries a failed write).
	nonceRetry = time.Second
)

// NewNonceLedger returns an empty in-memory ledger: it protects nonces
// within the process only (see OpenNonceLedger for restarts).
func NewNonceLedger() *NonceLedger {
	l := newLedger()
	_, _ = crand.Read(l.key[:])
	return l
}

func newLedger() *NonceLedger {
	return &NonceLedger{m: map[[32]byte]*nonceEntry{}, live: map[*sa]struct{}{}, kick: make(chan struct{}, 1)}
}

// String names the ledger ("nonce ledger /var/db/keel/esp-nonces", or
// "in-memory nonce ledger"), so that printing one never shows its key.
func (l *NonceLedger) String() string {
	if l.file == nil {
		return "in-memory nonce ledger"
	}
	return "nonce ledger " + l.file.path
}

// GoString is String: %#v does not show the key either.
func (l *NonceLedger) GoString() string { return l.String() }

// Path returns the ledger's file, or "" for an in-memory ledger.
func (l *NonceLedger) Path() string {
	if l.file == nil {
		return ""
	}
	return l.file.path
}

// LedgerStats describe a ledger for status lines and metrics. They hold
// no key material.
type LedgerStats struct {
	Path   string `json:"path,omitempty"`   // the file ("" in memory)
	Record string `json:"record,omitempty"` // its record
	Epoch  uint64 `json:"epoch,omitempty"`  // the file's epoch last written
	// Incident says why the ledger was unsafe when it was opened or moved
	// (lost, rolled back, previous ledger not carried over), which Policy
	// then opened anyway; "" when it was safe.
	Incident string      `json:"incident,omitempty"`
	Policy   NoncePolicy `json:"policy,omitempty"`
	// UnrecordedKeys counts the AEAD keys that started at sequence 1
	// because the ledger file had no entry for them.
	UnrecordedKeys uint64 `json:"unrecorded_starts"`
	// WriteErrors counts failed reads and writes of the file; Err is the
	// last one while it lasts ("" once a write succeeds again).
	WriteErrors uint64 `json:"write_errors"`
	Err         string `json:"error,omitempty"`
}

// Stats returns the ledger's state and counters.
func (l *NonceLedger) Stats() LedgerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := LedgerStats{Epoch: l.epoch, Incident: l.incident, UnrecordedKeys: l.unrecorded, WriteErrors: l.writeErrors}
	if l.file != nil {
		st.Path, st.Record, st.Policy = l.file.path, l.file.record, l.opts.Policy
	}
	if l.err != nil {
		st.Err = l.err.Error()
	}
	return st
}

// reportIncident logs how an unsafe ledger was opened (loudly: nonces of
// the keys it lost may be reused unless they were re-keyed).
func (l *NonceLedger) reportIncident() {
	if l.incident == "" {
		return
	}
	l.opts.Log.Error(fmt.Sprintf("nonce ledger %s was unsafe: %s; opened with policy %s: %s", l.file.path, l.incident, l.opts.Policy, policyEffect[l.opts.Policy]))
}

// policyEffect says what a policy did to an unsafe ledger.
var policyEffect = map[NoncePolicy]string{
	NoncePolicyFreshKeyOnly: "keys without an entry are taken as re-keyed (fresh) and start at 1, keys of a rolled-back ledger are retired",
	NoncePolicyTrust:        "keys continue above the surviving entries, keys without one start at 1: nonces may be reused unless every AEAD key was re-keyed",
}

// setErrLocked records the outcome of a file access: a failure is counted
// and logged when it starts, the recovery when it ends.
func (l *NonceLedger) setErrLocked(err error) {
	switch {
	case err != nil:
		l.writeErrors++
		if l.err == nil {
			l.opts.Log.Error(fmt.Sprintf("nonce ledger %s: %v: AEAD SAs get no new sequence numbers and drop once their range is used up (retrying every %v)", l.file.path, err, nonceRetry))
		}
	case l.err != nil:
		l.opts.Log.Info(fmt.Sprintf("nonce ledger %s: written again after %v", l.file.path, l.err))
	}
	l.err = err
}

// Err returns the last error writing the ledger file (nil once a write
// succeeds again). While it is set, ranges are not extended and SAs whose
// range is consumed drop their packets.
func (l *NonceLedger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// nonceID is the ledger's keyed fingerprint of s's AEAD key.
// It is HMAC-SHA-256 (the ledger file's key ids), computed by keyedhash.Sum.
func (l *NonceLedger) nonceID(s *sa) [32]byte {
	return keyedhash.Sum(l.key[:], []byte{byte(s.cfg.Alg.Cipher), byte(s.cfg.Alg.KeyBits >> 8), byte(s.cfg.Alg.KeyBits)}, s.cfg.EncKey)
}

// assign registers a new AEAD SA (before it is bound or published): it
// gets its identity but no numbers until commit. Non-AEAD SAs are left
// alone (their IVs are random).
func (l *NonceLedger) assign(s *sa) error {
	if !s.cfg.Alg.IsAEAD() {
		return nil
	}
	id := l.nonceID(s)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrLedgerClosed
	}
	s.ledger, s.nonceID = l, id
	s.nlimit.Store(0) // nothing granted yet: the data path drops
	s.nrefresh.Store(nonceUnbounded)
	l.live[s] = struct{}{}
	return nil
}

// commit grants the first range to each SA of ss registered with l and
// not granted one yet (the others are skipped) and, for a file-backed
// ledger, makes the grants durable before returning. On error no SA got
// numbers.
func (l *NonceLedger) commit(ss []*sa) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var todo []*sa
	for _, s := range ss {
		if s.ledger == l && s.nfloor.Load() == 0 { // never granted
			if _, ok := l.live[s]; ok {
				todo = append(todo, s)
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if l.closed {
		return ErrLedgerClosed
	}
	gs, err := l.grantLocked(todo, true)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if g.spent {
			return fmt.Errorf("%s: %w: SA spi 0x%x: its key already used sequence numbers (nonces) up to %d, or was retired after a nonce ledger rollback: re-key",
				g.s.cfg.Pos, ErrInvalidSA, g.s.cfg.SPI, uint64(nonceUnbounded))
		}
		if g.lo > g.s.hardPkts {
			return fmt.Errorf("%s: %w: SA spi 0x%x: its key already used sequence numbers (nonces) up to %d: re-key",
				g.s.cfg.Pos, ErrInvalidSA, g.s.cfg.SPI, g.lo-1)
		}
	}
	for _, g := range gs {
		g.apply()
		if g.unrecorded {
			l.reportUnrecordedLocked(g.s)
		}
	}
	if !l.running {
		l.running = true
		go l.refresher()
	}
	return nil
}

// reportUnrecordedLocked logs and counts an AEAD SA whose key had no entry
// in the ledger file (it starts at 1): routine in a safe ledger, loud in
// one opened unsafe.
func (l *NonceLedger) reportUnrecordedLocked(s *sa) {
	l.unrecorded++
	msg := fmt.Sprintf("%s: SA spi 0x%x: its AEAD key has no entry in nonce ledger %s: first use, sequence numbers start at 1", s.cfg.Pos, s.cfg.SPI, l.file.path)
	if l.incident == "" {
		l.opts.Log.Info(msg)
		return
	}
	l.opts.Log.Warn(msg + fmt.Sprintf(" (taken as a fresh key by policy %s: the ledger was unsafe when opened)", l.opts.Policy))
}

// grant is a range decided for an SA, applied once durable. A spent
// grant is none: the key's last number (2^64-1) was granted already.
type grant struct {
	s          *sa
	lo, hi     uint64
	contiguous bool
	spent      bool
	unrecorded bool // the key had no entry in the file: it starts at 1
}

// apply publishes the range to the data path. The order (floor, sequence,
// limit) is what makes sa.reserve's two loads safe.
func (g grant) apply() {
	s := g.s
	if !g.contiguous {
		s.nfloor.Store(g.lo)
		for {
			cur := s.seq.Load()
			if cur >= g.lo-1 || s.seq.CompareAndSwap(cur, g.lo-1) {
				break
			}
		}
	}
	s.nlimit.Store(g.hi)
	from := max(s.nfloor.Load(), s.seq.Load())
	if g.hi > from {
		s.nrefresh.Store(from + (g.hi-from)/4*3)
	} else { // the SA ran past the range meanwhile (dropping): again
		s.nrefresh.Store(from)
	}
}

// grantLocked decides ranges for ss (fresh: their first range), reading
// and writing the ledger file for a file-backed ledger. Caller holds mu.
func (l *NonceLedger) grantLocked(ss []*sa, fresh bool) ([]grant, error) {
	var disk ledgerData
	if l.file != nil {
		unlock, err := l.file.lock()
		if err != nil {
			l.setErrLocked(err)
			return nil, err
		}
		defer unlock()
		if disk, err = l.file.read(l.key, l.epoch); err != nil {
			l.setErrLocked(err)
			return nil, err
		}
	}
	gs := make([]grant, 0, len(ss))
	pending := map[*sa]int{} // SA -> its grant in gs, not applied yet
	for _, s := range ss {
		e := l.m[s.nonceID]
		_, ondisk := disk.m[s.nonceID]
		unrecorded := fresh && l.file != nil && e == nil && !ondisk
		if e == nil {
			e = &nonceEntry{}
			l.m[s.nonceID] = e
		}
		// Another SA holding the key's top range with more than
		// nonceCapMargin numbers left is capped first: a grant of this
		// call simply shrinks, an installed SA's range is capped (safe
		// while it runs: see capLocked).
		if t := e.tail; t != nil && t != s {
			if i, ok := pending[t]; ok {
				g := &gs[i]
				// Never below the limit t runs with: a shrink is not a cap.
				from := max(g.lo-1, t.seq.Load())
				if g.hi == e.next && g.hi-from > nonceCapMargin {
					g.hi = max(from+nonceCapMargin, t.nlimit.Load())
					e.next = g.hi
				}
			} else if _, ok := l.live[t]; ok {
				l.capLocked(t, e)
			}
		}
		size := uint64(nonceUnbounded)
		if l.file != nil {
			if fresh || s.nblock == 0 {
				s.nblock = nonceBlockMin
			} else if s.nblock < nonceBlockMax {
				s.nblock *= 2
			}
			size = s.nblock
		}
		base := max(e.next, disk.m[s.nonceID])
		cur := s.seq.Load()
		g := grant{s: s, unrecorded: unrecorded}
		switch top := max(base, cur); {
		case !fresh && e.tail == s && s.nlimit.Load() == base:
			g.contiguous, g.lo, g.hi = true, s.nfloor.Load(), satAdd(top, size)
		case top == nonceUnbounded: // 2^64-1 was granted: nothing is left
			gs = append(gs, grant{s: s, spent: true})
			continue
		default:
			g.lo = top + 1
			g.hi = satAdd(top, size)
		}
		e.next, e.tail = g.hi, s
		pending[s] = len(gs)
		gs = append(gs, g)
	}
	if l.file != nil {
		if err := l.writeLocked(disk); err != nil {
			return nil, err
		}
	}
	return gs, nil
}

// capLocked shrinks the range of installed SA t (the key's tail) to its
// current number plus nonceCapMargin, while t keeps sending: a batch that
// read the old limit reserved its numbers before the new one was stored,
// so they are at most the sequence read afterwards, which becomes the
// key's high-water mark.
// It only ever lowers the limit, and only of an SA holding the key's top
// range with more than nonceCapMargin numbers left.
func (l *NonceLedger) capLocked(t *sa, e *nonceEntry) {
	old, cur := t.nlimit.Load(), t.seq.Load()
	if old == 0 || old != e.next || cur >= old || old-cur <= nonceCapMargin {
		return
	}
	limit := cur + nonceCapMargin
	t.nlimit.Store(limit)
	after := t.seq.Load()
	e.next = max(limit, after)
	t.nrefresh.Store(min(t.nrefresh.Load(), limit-nonceCapMargin/4))
}

// retire revokes what s was granted and records what it used (after this,
// reserve refuses every number of s). If no later grant was made for the
// key, the unused rest goes back to the key.
func (l *NonceLedger) retire(s *sa) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.live[s]; !ok {
		return
	}
	delete(l.live, s)
	if len(l.live) == 0 {
		l.kickRefresh() // the refresher exits
	}
	granted := s.nlimit.Load() != 0
	s.nlimit.Store(0)
	used := s.seq.Load()
	e := l.m[s.nonceID]
	if !granted || e == nil || e.tail != s {
		return
	}
	e.tail = nil
	e.next = min(used, e.next)
	if floor := s.nfloor.Load(); floor > 0 {
		e.next = max(e.next, floor-1)
	}
}

// kickRefresh wakes the refresher; called by the data path, it never
// blocks or allocates.
func (l *NonceLedger) kickRefresh() {
	if l == nil {
		return
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// refresher extends the ranges of SAs past 3/4 of theirs. It exits when
// the ledger has no installed AEAD SA or is closed.
func (l *NonceLedger) refresher() {
	t := time.NewTicker(nonceRetry)
	defer t.Stop()
	for {
		select {
		case <-l.kick:
		case <-t.C:
		}
		l.mu.Lock()
		if len(l.live) == 0 || l.closed {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.refreshLocked()
		l.mu.Unlock()
	}
}

// refreshLocked grants new ranges to the SAs that need one; a failed
// write leaves them as they are (retried on the next tick).
func (l *NonceLedger) refreshLocked() {
	var todo []*sa
	for s := range l.live {
		if s.nlimit.Load() != 0 && s.seq.Load() >= s.nrefresh.Load() {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		if l.file != nil && l.err != nil {
			_ = l.syncLocked() // logged and counted by setErrLocked
		}
		return
	}
	gs, err := l.grantLocked(todo, false)
	if err != nil {
		return
	}
	for _, g := range gs {
		if _, ok := l.live[g.s]; ok && !g.spent {
			g.apply()
		}
	}
}

// Sync writes the ledger file now (recording numbers given back by closed
// SAs, so that a restart continues right after them). It is a no-op for
// an in-memory ledger.
func (l *NonceLedger) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncLocked()
}

func (l *NonceLedger) syncLocked() error {
	if l.file == nil {
		return nil
	}
	unlock, err := l.file.lock()
	if err != nil {
		l.setErrLocked(err)
		return err
	}
	defer unlock()
	disk, err := l.file.read(l.key, l.epoch)
	if err != nil {
		l.setErrLocked(err)
		return err
	}
	return l.writeLocked(disk)
}

// writeLocked merges l's entries into disk (read under the file lock) and
// writes the file. A value another process changed since this one last
// wrote it is only ever raised, never lowered.
func (l *NonceLedger) writeLocked(disk ledgerData) error {
	for id, e := range l.m {
		d := disk.m[id]
		if d != e.disk && d > e.next {
			e.next = d // another process granted beyond us
		}
		disk.m[id] = e.next
	}
	disk.epoch = max(disk.epoch, l.epoch) + 1
	if err := l.file.write(disk); err != nil {
		l.setErrLocked(err)
		return err
	}
	l.epoch = disk.epoch
	for id, e := range l.m {
		e.disk = disk.m[id]
	}
	l.setErrLocked(nil)
	return nil
}

// Move switches a file-backed ledger to the file at path with opts (its
// record and policy), as when ipsec_nonce_ledger changes under a running
// engine: the new file is opened as OpenNonceLedger describes, keeping the
// ledger key, with every entry of this ledger carried over (even when its
// current file can no longer be written), so installed SAs keep their
// ranges and no key restarts. On error the ledger stays on its file. A
// move to the current file and record only takes the new policy and log.
func (l *NonceLedger) Move(path string, opts LedgerOptions) error {
	opts = opts.withDefaults(path)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrLedgerClosed
	}
	if l.file == nil {
		return errors.New("nonce ledger: an in-memory ledger has no file to move")
	}
	if l.file.path == path && l.file.record == opts.Record {
		l.opts = opts
		return nil
	}
	_ = l.syncLocked() // best effort: the entries travel in memory anyway
	from := &moving{key: l.key, path: l.file.path, m: make(map[[32]byte]uint64, len(l.m))}
	for id, e := range l.m {
		from.m[id] = e.next
	}
	f, d, incident, err := loadLedger(path, opts, from)
	if err != nil {
		return err
	}
	for id, v := range d.m {
		e := l.m[id]
		if e == nil {
			e = &nonceEntry{}
			l.m[id] = e
		}
		e.next, e.disk = max(e.next, v), v
	}
	old := l.file.path
	l.file, l.opts, l.epoch, l.incident, l.err = f, opts, d.epoch, incident, nil
	l.opts.Log.Info(fmt.Sprintf("nonce ledger moved from %s to %s (epoch %d), %d entries carried over", old, path, d.epoch, len(d.m)))
	l.reportIncident()
	return nil
}

// Close writes the ledger file a last time (see Sync) and closes the
// ledger: Apply then fails for new AEAD SAs and installed ones are not
// refreshed. Close is idempotent.
func (l *NonceLedger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.syncLocked()
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// satAdd is a+b, saturating at 2^64-1.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
