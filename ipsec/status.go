package ipsec

import (
	"net/netip"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

// SAStatus is a snapshot of one SA for status output. It never contains
// key material.
type SAStatus struct {
	Src, Dst     netip.AddrPort // ports only for esp-udp
	Proto        setkey.Proto
	SPI          uint32
	Mode         spd.Mode
	ReqID        uint32
	ESN          bool
	Alg          crypto.Algorithm
	ReplayWindow int // packets; 0: no replay check
	// State is "mature", "dying" (soft lifetime passed), "dead" (hard
	// lifetime passed) or "deleted".
	State string
	// Expired names the lifetime that made the SA dying or dead (see
	// ExpiredTime and the other Expired constants); "" otherwise.
	Expired string
	// Provider is the crypto provider the SA's binding currently uses;
	// Rebinds counts how often the binding moved.
	Provider string
	Rebinds  uint64
	// Seq is the last outbound sequence number assigned; ReplayTop the
	// highest authenticated inbound one.
	Seq       uint64
	ReplayTop uint64
	// Counters. Bytes are inner (plaintext) bytes, as counted against the
	// byte lifetimes.
	OutPackets, OutBytes uint64
	InPackets, InBytes   uint64
	Drops                Drops
	Added                time.Time
	SoftBytes, HardBytes uint64
	SoftTime, HardTime   time.Duration
	Pos                  string // where the SA was configured
}

// Counters are engine-wide totals.
type Counters struct {
	OutPackets, OutBytes uint64 // ESP packets sent / their outer bytes
	InPackets, InBytes   uint64 // packets decapsulated / their inner bytes
	Bypass               uint64 // packets passed by a "none" policy (or no inbound policy)
	Local                uint64 // NAT-T non-ESP (IKE) datagrams handed up
	Drops                Drops
}

// What SAStatus.Expired says ran out.
const (
	ExpiredTime    = "time"             // -lh / -ls seconds since the SA was added
	ExpiredBytes   = "bytes"            // -bh / -bs inner bytes, both directions
	ExpiredPackets = "packets"          // a configured packet limit
	ExpiredSeq     = "sequence numbers" // the sequence space: 2^32-1 (2^64-1 with ESN), or 15/16 of it for the soft limit
)

// expiredBy says which lifetime put the SA in state st (stateDying or
// stateDead), or "" for other states. It reads the counters, off the data
// path, rather than have the data path record why.
func (s *sa) expiredBy(st uint32) string {
	var pkts, bytes uint64
	var age time.Duration
	switch st {
	case stateDead:
		pkts, bytes, age = s.hardPkts, s.cfg.HardBytes, s.cfg.HardTime
	case stateDying:
		pkts, bytes, age = s.softPkts, s.cfg.SoftBytes, s.cfg.SoftTime
	default:
		return ""
	}
	seq := s.seq.Load()
	switch {
	case seq >= pkts:
		if st == stateDead && s.cfg.HardPackets != 0 && s.hardPkts == s.cfg.HardPackets ||
			st == stateDying && s.cfg.SoftPackets != 0 && s.softPkts == s.cfg.SoftPackets {
			return ExpiredPackets
		}
		return ExpiredSeq
	case bytes != 0 && s.outBytes.Load()+s.inBytes.Load() >= bytes:
		return ExpiredBytes
	case age > 0:
		// Neither numbers nor bytes ran out: only time (checked by
		// housekeeping) can have moved the SA.
		return ExpiredTime
	}
	return ExpiredSeq // the 64-bit counter wrapped (reserve)
}

func (s *sa) status() SAStatus {
	state := s.state.Load()
	st := SAStatus{
		Src: s.cfg.Src, Dst: s.cfg.Dst, Proto: s.cfg.Proto, SPI: s.cfg.SPI,
		Mode: s.cfg.Mode, ReqID: s.cfg.ReqID, ESN: s.cfg.ESN, Alg: s.cfg.Alg,
		ReplayWindow: s.cfg.ReplayWindow,
		State:        stateNames[state],
		Expired:      s.expiredBy(state),
		Seq:          min(s.seq.Load(), s.hardPkts),
		OutPackets:   s.outPkts.Load(), OutBytes: s.outBytes.Load(),
		InPackets: s.inPkts.Load(), InBytes: s.inBytes.Load(),
		Drops: s.drops.snapshot(), Added: s.added,
		SoftBytes: s.cfg.SoftBytes, HardBytes: s.cfg.HardBytes,
		SoftTime: s.cfg.SoftTime, HardTime: s.cfg.HardTime,
		Pos: s.cfg.Pos,
	}
	if s.bind != nil {
		st.Provider = s.bind.Provider()
		st.Rebinds = s.bind.Rebinds()
	}
	if s.win != nil {
		s.mu.Lock()
		st.ReplayTop = s.win.Top()
		s.mu.Unlock()
	}
	return st
}

// SAs returns the status of every installed SA in configuration order.
func (e *Engine) SAs() []SAStatus {
	all := e.sad.Load().all
	out := make([]SAStatus, len(all))
	for i, s := range all {
		out[i] = s.status()
	}
	return out
}

// Policies returns a copy of the SPD in order (as spd.SPD.Policies).
func (e *Engine) Policies() []spd.Policy { return e.spd.Policies() }

// SPD returns the engine's policy database (for statistics; Apply owns its
// contents).
func (e *Engine) SPD() *spd.SPD { return e.spd }

// Counters returns the engine-wide counters.
func (e *Engine) Counters() Counters {
	return Counters{
		OutPackets: e.outPkts.Load(), OutBytes: e.outBytes.Load(),
		InPackets: e.inPkts.Load(), InBytes: e.inBytes.Load(),
		Bypass: e.bypass.Load(), Local: e.local.Load(),
		Drops: e.drops.snapshot(),
	}
}
