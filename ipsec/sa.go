package ipsec

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/internal/keyedhash"
	"github.com/keelinit/keel/ipsec/replay"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
)

// NATTPort is the IKE/NAT-T UDP port used when an esp-udp SA gives none.
const NATTPort = setkey.NATTPort

// SA lifecycle states (RFC 2367 terms).
const (
	stateMature  uint32 = iota // usable
	stateDying                 // soft lifetime passed: usable, rekey due
	stateDead                  // hard lifetime passed: unusable
	stateDeleted               // removed from the SAD
)

var stateNames = [...]string{"mature", "dying", "dead", "deleted"}

// saConfig is an SA as configured (from a setkey "add").
type saConfig struct {
	Src, Dst     netip.AddrPort
	Proto        setkey.Proto
	SPI          uint32
	Mode         spd.Mode
	ReplayWindow int
	ReqID        uint32
	ESN          bool
	Alg          crypto.Algorithm
	EncKey       []byte
	AuthKey      []byte
	SoftBytes    uint64
	HardBytes    uint64
	SoftPackets  uint64 // 0: default (15/16 of the sequence space)
	HardPackets  uint64 // 0: the sequence space (2^32-1, or 2^64-1 with ESN)
	SoftTime     time.Duration
	HardTime     time.Duration
	Pos          string
}

// sa is one installed SA. Its identity and keys are immutable; counters are
// atomics; the replay window is guarded by mu.
type sa struct {
	cfg saConfig // keys are zeroed once the binding is made
	// fp is a keyed fingerprint of (alg, keys): a re-applied identical SA
	// keeps its state (sequence numbers!) instead of restarting at 1.
	fp [32]byte
	// ledger and nonceID: see NonceLedger (AEAD SAs only); nblock is the
	// size of the SA's last block (guarded by ledger.mu).
	ledger  *NonceLedger
	nonceID [32]byte
	nblock  uint64

	ivLen, icvLen, block int
	aead                 bool
	// fast4: outer IPv4, plain ESP (not in UDP), an AEAD with an 8-byte
	// IV and a 16-byte ICV: tunnel-mode packets take encapTunnel4.
	fast4 bool
	// inTunnel and inAny: the SA's mode is tunnel, or any (the next
	// header of each inbound packet decides).
	inTunnel, inAny    bool
	bind               binding
	hardPkts, softPkts uint64
	added              time.Time

	seq atomic.Uint64 // last sequence number assigned (outbound)
	// The range of numbers the SA may use, [nfloor, nlimit], and the
	// number from which its ledger should extend it (see NonceLedger;
	// unbounded for SAs without a ledger). On seq's cache line: reserve
	// reads them right after its atomic add.
	nfloor, nlimit, nrefresh atomic.Uint64
	_                        [32]byte

	state atomic.Uint32
	told  atomic.Uint32 // highest state reported through OnExpire

	outPkts, outBytes atomic.Uint64
	inPkts, inBytes   atomic.Uint64
	drops             dropCounters

	mu  sync.Mutex
	win *replay.Window // nil without replay protection or ESN

	// Outer header templates for tunnel mode (addresses, protocol, TTL),
	// with the IPv4 checksum's partial sum of the constant fields.
	hdr4    [20]byte
	hdr4Sum uint32
	hdr6    [40]byte

	closeOnce sync.Once

	// inPol is the inbound policy decision the last completion batch of
	// the SA ended with (guarded by mu): the next one starts with it if
	// the SPD generation is unchanged.
	inPol polCache
}

// fingerprint is a keyed digest of c's transform and keys under key (see
// keyedhash.Sum: no copy of the SA's keys is left behind).
func fingerprint(key []byte, c *saConfig) [32]byte {
	var b [8]byte
	b[0], b[1], b[2] = byte(c.Alg.Cipher), byte(c.Alg.KeyBits>>8), byte(c.Alg.KeyBits)
	b[3] = byte(c.Alg.Auth)
	if c.ESN {
		b[4] = 1
	}
	b[5] = byte(c.Mode)
	return keyedhash.Sum(key, b[:], c.EncKey, []byte{0}, c.AuthKey)
}

// sameSA reports whether a and b are the same SA (identity, transform,
// keys and replay configuration), so that a re-applied configuration keeps
// the installed one.
func sameSA(a, b *sa) bool {
	x, y := &a.cfg, &b.cfg
	return x.Src == y.Src && x.Dst == y.Dst && x.Proto == y.Proto && x.SPI == y.SPI &&
		x.Mode == y.Mode && x.ReqID == y.ReqID && x.ESN == y.ESN && x.Alg == y.Alg &&
		x.ReplayWindow == y.ReplayWindow && a.fp == b.fp
}

// newSA validates c and prepares an SA without binding crypto.
func newSA(c saConfig, fpKey []byte, now time.Time) (*sa, error) {
	s := &sa{cfg: c, added: now}
	s.nlimit.Store(nonceUnbounded)
	s.nrefresh.Store(nonceUnbounded)
	s.fp = fingerprint(fpKey, &c)
	s.ivLen = c.Alg.IVLen()
	s.icvLen = c.Alg.ICVLen()
	s.block = c.Alg.BlockSize()
	s.aead = c.Alg.IsAEAD()
	s.fast4 = s.aead && s.ivLen == 8 && s.icvLen == 16 && s.block == 4 &&
		c.Dst.Addr().Is4() && c.Proto != setkey.ProtoESPUDP
	s.inTunnel, s.inAny = c.Mode == spd.ModeTunnel, c.Mode == spd.ModeAny
	if s.cfg.Proto == setkey.ProtoESPUDP {
		if s.cfg.Src.Port() == 0 {
			s.cfg.Src = netip.AddrPortFrom(s.cfg.Src.Addr(), NATTPort)
		}
		if s.cfg.Dst.Port() == 0 {
			s.cfg.Dst = netip.AddrPortFrom(s.cfg.Dst.Addr(), NATTPort)
		}
	}
	proto := uint8(protoESP)
	if s.cfg.Proto == setkey.ProtoESPUDP {
		proto = protoUDP
	}
	if s.cfg.Dst.Addr().Is4() {
		putIPv4(s.hdr4[:], 0, 0, 0, proto, s.cfg.Src.Addr(), s.cfg.Dst.Addr())
		s.hdr4[10], s.hdr4[11] = 0, 0
		for i := 0; i < 20; i += 2 {
			s.hdr4Sum += uint32(s.hdr4[i])<<8 | uint32(s.hdr4[i+1])
		}
	} else if s.cfg.Dst.Addr().Is6() {
		putIPv6(s.hdr6[:], 0, 0, proto, s.cfg.Src.Addr(), s.cfg.Dst.Addr())
	}
	space := uint64(1<<32 - 1)
	if c.ESN {
		space = ^uint64(0)
	}
	s.hardPkts = space
	if c.HardPackets != 0 && c.HardPackets < space {
		s.hardPkts = c.HardPackets
	}
	s.softPkts = s.hardPkts - s.hardPkts/16
	if c.SoftPackets != 0 && c.SoftPackets < s.softPkts {
		s.softPkts = c.SoftPackets
	}
	if c.ReplayWindow > 0 || c.ESN {
		w, err := replay.New(c.ReplayWindow, c.ESN)
		if err != nil {
			return nil, err
		}
		w.SetMax(s.hardPkts)
		s.win = w
	}
	return s, nil
}

// zeroKeys wipes the key copies held in the configuration.
func (s *sa) zeroKeys() {
	clear(s.cfg.EncKey)
	clear(s.cfg.AuthKey)
	s.cfg.EncKey, s.cfg.AuthKey = nil, nil
}

// close marks the SA deleted, closes its binding (the session zeroes its
// keys) and wipes what the SA still holds.
func (s *sa) close(ctx context.Context) {
	s.closeOnce.Do(func() {
		s.state.Store(stateDeleted)
		if s.ledger != nil {
			s.ledger.retire(s)
		}
		if s.bind != nil {
			_ = s.bind.Close(ctx)
		}
		s.zeroKeys()
		s.fp = [32]byte{}
	})
}

// usable reports whether the SA may process packets.
func (s *sa) usable() bool { return s.state.Load() <= stateDying }

// setState raises the SA state to st (states only move forward).
func (s *sa) setState(st uint32) {
	for {
		cur := s.state.Load()
		if cur >= st || s.state.CompareAndSwap(cur, st) {
			return
		}
	}
}

// account adds n packets / b bytes to a direction's counters and applies
// the byte and packet lifetimes.
func (s *sa) accountOut(n, b int) {
	s.outPkts.Add(uint64(n))
	t := s.outBytes.Add(uint64(b))
	s.checkBytes(t + s.inBytes.Load())
}

func (s *sa) accountIn(n, b int) {
	s.inPkts.Add(uint64(n))
	t := s.inBytes.Add(uint64(b))
	s.checkBytes(t + s.outBytes.Load())
}

func (s *sa) checkBytes(t uint64) {
	if s.cfg.HardBytes != 0 && t >= s.cfg.HardBytes {
		s.setState(stateDead)
	} else if s.cfg.SoftBytes != 0 && t >= s.cfg.SoftBytes {
		s.setState(stateDying)
	}
}

// checkTime applies the time lifetimes at now.
func (s *sa) checkTime(now time.Time) {
	age := now.Sub(s.added)
	if s.cfg.HardTime > 0 && age >= s.cfg.HardTime {
		s.setState(stateDead)
	} else if s.cfg.SoftTime > 0 && age >= s.cfg.SoftTime {
		s.setState(stateDying)
	}
}

// reserve assigns n consecutive outbound sequence numbers and returns the
// first and how many of them are within the hard limit (the rest must be
// dropped). The counter never wraps: it stops at the limit, after which
// the SA is dead. Numbers outside the range granted by the SA's
// NonceLedger are refused too (and its refresher woken from 3/4 of the
// range on): a nonce is dropped rather than reused.
func (s *sa) reserve(n int) (first uint64, ok int) {
	last := s.seq.Add(uint64(n))
	first = last - uint64(n) + 1
	if last < first { // 64-bit wrap: impossible in practice, refuse all
		s.setState(stateDead)
		return first, 0
	}
	if last >= s.nrefresh.Load() {
		s.ledger.kickRefresh()
	}
	// The limit before the floor: see NonceLedger's grant.apply.
	limit := s.nlimit.Load()
	if first > limit || first < s.nfloor.Load() {
		return first, 0
	}
	if last > limit {
		n = int(limit - first + 1)
		last = limit
	}
	if last >= s.softPkts {
		s.setState(stateDying)
	}
	if first > s.hardPkts {
		s.setState(stateDead)
		return first, 0
	}
	if last >= s.hardPkts {
		s.setState(stateDead)
		return first, int(s.hardPkts - first + 1)
	}
	return first, n
}
