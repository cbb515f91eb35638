package ipsec

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/replay"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

// Errors of Apply, checked with errors.Is. The returned error wraps one of
// them (or a crypto/spd error) and names the statement's file:line:col.
var (
	ErrSAExists    = errors.New("ipsec: SA already exists")
	ErrNoSuchSA    = errors.New("ipsec: no such SA")
	ErrPolicy      = errors.New("ipsec: policy exists or not found")
	ErrInvalidSA   = errors.New("ipsec: invalid SA")
	ErrUnsupported = errors.New("ipsec: unsupported")
)

type sadKey struct {
	dst   netip.Addr
	proto setkey.Proto
	spi   uint32
}

// Apply applies a parsed setkey configuration all-or-nothing: it runs the
// statements in order against a copy of the current SAD and SPD, binds
// crypto for every new SA, and only if all of that succeeds installs the
// result (the SPD and the SAD, which a batch sees together: see
// Engine.snapshot). On error nothing changes and new bindings are closed.
//
// An SA that is still present afterwards with the same identity, mode,
// algorithm and keys keeps its state (sequence numbers, replay window,
// counters), even across "flush; add ..." of the same SA: restarting the
// sequence at 1 with the same key would reuse AEAD nonces (its lifetimes
// are kept too: change the SPI to change them). A new AEAD SA takes its
// sequence numbers from the engine's NonceLedger, so a key that comes back
// (delete then add, a re-key A→B→A, another SA or engine with the key)
// continues above every number used under it. SAs removed by
// the configuration are closed: their bindings close (zeroing session
// keys) after in-flight batches finish.
//
// Apply zeroes the key material in cfg before returning, whatever the
// outcome. It is safe for concurrent use with the data path; concurrent
// Apply calls are serialised.
func (e *Engine) Apply(ctx context.Context, cfg *setkey.Config) error {
	return e.ApplyThen(ctx, cfg, nil)
}

// ApplyThen is Apply with a last step that may veto the change: once
// the new configuration is ready (every new SA bound and granted its
// first nonces, the policies validated) and before any of it is
// installed, it calls prepare, if not nil, with the new policies. If
// prepare returns an error, nothing changes, as for any other failure of
// Apply, and ApplyThen returns that error; otherwise the configuration is
// installed, which can no longer fail. This is how a user reconfigures
// what depends on the engine (an interface, its routes) together with
// the engine, all or nothing: prepare sets up the new dependants, and
// undoes what it did before returning an error. During prepare the data
// path still runs on the old configuration. prepare runs with the
// engine's configuration lock held: it must not call Apply, ApplyThen or
// Close (the data path, status methods and Policies are fine).
func (e *Engine) ApplyThen(ctx context.Context, cfg *setkey.Config, prepare func(policies []spd.Policy) error) error {
	defer cfg.Zero()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	cur := e.sad.Load()
	var order []sadKey
	working := map[sadKey]*sa{}
	for _, s := range cur.all {
		k := keyOf(s)
		working[k] = s
		order = append(order, k)
	}
	policies := e.spd.Policies()
	var created []*sa
	fail := func(err error) error {
		for _, s := range created {
			s.close(ctx)
		}
		return err
	}
	now := time.Now()
	for _, op := range cfg.Ops {
		pos := op.Pos.String()
		switch op.Kind {
		case setkey.OpFlush:
			clear(working)
			order = order[:0]
		case setkey.OpSPDFlush:
			policies = policies[:0]
		case setkey.OpAdd:
			c, err := configOf(op.SA, pos)
			if err != nil {
				return fail(fmt.Errorf("%s: %w", pos, err))
			}
			k := sadKey{c.Dst.Addr(), c.Proto, c.SPI}
			if _, dup := working[k]; dup {
				return fail(fmt.Errorf("%s: %w: %v %v spi 0x%x", pos, ErrSAExists, c.Dst.Addr(), c.Proto, c.SPI))
			}
			s, err := newSA(c, e.fpKey[:], now)
			if err != nil {
				clear(c.EncKey)
				clear(c.AuthKey)
				return fail(fmt.Errorf("%s: %w", pos, err))
			}
			if err := e.opts.NonceLedger.assign(s); err != nil {
				s.zeroKeys()
				return fail(fmt.Errorf("%s: %w", pos, err))
			}
			created = append(created, s)
			working[k] = s
			order = append(order, k)
		case setkey.OpDelete:
			if op.SA == nil {
				return fail(fmt.Errorf("%s: %w: delete without SA", pos, ErrInvalidSA))
			}
			k := sadKey{op.SA.Dst.Addr().Unmap(), op.SA.Proto, op.SA.SPI}
			if _, ok := working[k]; !ok {
				return fail(fmt.Errorf("%s: %w: %v %v spi 0x%x", pos, ErrNoSuchSA, k.dst, k.proto, k.spi))
			}
			delete(working, k)
			for i, o := range order {
				if o == k {
					order = append(order[:i], order[i+1:]...)
					break
				}
			}
		case setkey.OpSPDAdd:
			p := *op.Policy
			p.Pos = pos
			if err := p.Validate(); err != nil {
				return fail(fmt.Errorf("%s: %w", pos, err))
			}
			if p.Action == spd.IPsec && len(p.Requests) > 1 {
				return fail(fmt.Errorf("%s: %w: SA bundles (more than one esp request)", pos, ErrUnsupported))
			}
			for _, q := range policies {
				if q.Dir == p.Dir && q.Sel == p.Sel {
					return fail(fmt.Errorf("%s: %w: policy %v -P %v exists", pos, ErrPolicy, p.Sel, p.Dir))
				}
			}
			policies = append(policies, p)
		case setkey.OpSPDDelete:
			found := false
			for i, q := range policies {
				if q.Dir == op.Policy.Dir && q.Sel == op.Policy.Sel {
					policies = append(policies[:i], policies[i+1:]...)
					found = true
					break
				}
			}
			if !found {
				return fail(fmt.Errorf("%s: %w: no policy %v -P %v", pos, ErrPolicy, op.Policy.Sel, op.Policy.Dir))
			}
		default:
			return fail(fmt.Errorf("%s: %w: statement %v", pos, ErrUnsupported, op.Kind))
		}
	}
	if err := spd.Validate(policies); err != nil {
		return fail(fmt.Errorf("%s: %w", cfgName(cfg), err))
	}
	// Resolve the final SAD: keep installed SAs, reuse an installed SA for
	// an identical re-add, bind crypto for the rest.
	final := make([]*sa, 0, len(order))
	keep := map[*sa]bool{}
	for _, k := range order {
		s := working[k]
		if s.bind == nil {
			for _, old := range cur.all {
				if !keep[old] && sameSA(old, s) {
					s = old
					break
				}
			}
		}
		if s.bind == nil {
			b, err := e.bind(e.saLabel(s), crypto.SessionParams{Alg: s.cfg.Alg, CipherKey: s.cfg.EncKey, AuthKey: s.cfg.AuthKey}, e.completer(s))
			if err != nil {
				return fail(fmt.Errorf("%s: SA spi 0x%x: %w", s.cfg.Pos, s.cfg.SPI, err))
			}
			s.bind = b
		}
		keep[s] = true
		final = append(final, s)
	}
	// New AEAD SAs get their first range of sequence numbers (nonces),
	// durably for a file-backed ledger, before anything is published.
	if err := e.opts.NonceLedger.commit(final); err != nil {
		return fail(err) // names the SA's file:line:col or the ledger file
	}
	if prepare != nil {
		if err := prepare(append([]spd.Policy(nil), policies...)); err != nil {
			return fail(err)
		}
	}
	// The SPD, then the SAD, published inside an odd pub: a batch that
	// overlaps takes the SPD generation published with its SAD snapshot
	// (snapshot). Replace cannot fail here: the policies were validated
	// above.
	tab := e.newTable(final)
	e.pub.Add(1)
	err := e.spd.Replace(policies)
	if err == nil {
		tab.pol = e.spd.View()
		e.sad.Store(tab)
	}
	e.pub.Add(1)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", cfgName(cfg), err))
	}
	for _, s := range created {
		if keep[s] {
			s.zeroKeys()
		} else {
			s.close(ctx)
		}
	}
	for _, s := range cur.all {
		if !keep[s] {
			s.close(ctx)
		}
	}
	return nil
}

func cfgName(cfg *setkey.Config) string {
	if len(cfg.Ops) > 0 {
		return cfg.Ops[0].Pos.File
	}
	return "config"
}

func keyOf(s *sa) sadKey { return sadKey{s.cfg.Dst.Addr(), s.cfg.Proto, s.cfg.SPI} }

// configOf validates a setkey SA and copies it (keys included).
func configOf(x *setkey.SA, pos string) (c saConfig, err error) {
	if x == nil {
		return saConfig{}, fmt.Errorf("%w: add without SA", ErrInvalidSA)
	}
	c = saConfig{
		Src:   netip.AddrPortFrom(x.Src.Addr().Unmap(), x.Src.Port()),
		Dst:   netip.AddrPortFrom(x.Dst.Addr().Unmap(), x.Dst.Port()),
		Proto: x.Proto, SPI: x.SPI, Mode: x.Mode, ReplayWindow: x.ReplayWindow,
		ReqID: x.ReqID, ESN: x.ESN, Alg: x.Alg,
		EncKey: append([]byte(nil), x.EncKey...), AuthKey: append([]byte(nil), x.AuthKey...),
		SoftBytes: x.SoftBytes, HardBytes: x.HardBytes, SoftTime: x.SoftTime, HardTime: x.HardTime,
		Pos: pos,
	}
	if len(c.AuthKey) == 0 {
		c.AuthKey = nil
	}
	defer func() {
		if err != nil {
			clear(c.EncKey)
			clear(c.AuthKey)
		}
	}()
	switch {
	case !c.Src.Addr().IsValid() || !c.Dst.Addr().IsValid() || c.Src.Addr().Is4() != c.Dst.Addr().Is4():
		return c, fmt.Errorf("%w: endpoints must be two addresses of one family", ErrInvalidSA)
	case c.SPI < 256:
		return c, fmt.Errorf("%w: SPI %d is reserved", ErrInvalidSA, c.SPI)
	case c.Proto != setkey.ProtoESP && c.Proto != setkey.ProtoESPUDP:
		return c, fmt.Errorf("%w: protocol %v", ErrInvalidSA, c.Proto)
	case c.ReplayWindow < 0 || c.ReplayWindow > replay.MaxSize:
		return c, fmt.Errorf("%w: replay window %d packets (max %d)", ErrInvalidSA, c.ReplayWindow, replay.MaxSize)
	}
	p := crypto.SessionParams{Alg: c.Alg, CipherKey: c.EncKey, AuthKey: c.AuthKey}
	if err := p.CheckParams(); err != nil {
		return c, err
	}
	return c, nil
}

// ApplyFile parses the setkey file at path and applies it all-or-nothing
// (see Apply). Parse errors name file:line:col and change nothing.
func (e *Engine) ApplyFile(ctx context.Context, path string) error {
	cfg, err := setkey.ParseFile(path)
	if err != nil {
		return err
	}
	return e.Apply(ctx, cfg)
}
