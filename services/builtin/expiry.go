package builtin

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keelinit/keel/ipsec"
)

// SAExpiry is one lifetime event of an SA of the ipsec service: its soft
// lifetime passed (Hard false: the SA still carries traffic and is due
// for a rekey) or its hard one (Hard true: it carries no more traffic,
// which is dropped and counted as sa-expired). SA.Expired says which
// lifetime: ipsec.ExpiredTime, ExpiredBytes, ExpiredPackets or
// ExpiredSeq (the sequence space is used up). It never holds key
// material.
type SAExpiry struct {
	SA   ipsec.SAStatus
	Hard bool
	At   time.Time
}

// ExpiryHook receives SA lifetime events; see System.AddExpiryHook.
type ExpiryHook func(SAExpiry)

// AddExpiryHook registers h to be told of every lifetime event of the
// ipsec service's SAs, after keeld logged and counted it. This is where a
// key manager (an IKE daemon) hooks rekeying: on a soft event it
// negotiates a new SA and installs it (the engine prefers a mature SA to
// a dying one), on a hard event it removes the dead SA. Each SA reports
// each transition once; an SA that goes from mature to dead in one step
// reports a soft and then a hard event. h is called on the engine's
// housekeeping goroutine, in registration order: it must return quickly
// and must not call the engine's Apply or Close, nor start, stop or
// reload the ipsec service, itself; it hands that work to a goroutine of
// its own. The returned function removes h.
func (s *System) AddExpiryHook(h ExpiryHook) (remove func()) {
	return s.ips.expiry.add(h)
}

// expiries logs, counts and remembers the lifetime events of the ipsec
// service's SAs and passes them to the hooks. Its counts live as long as
// the System (across ipsec restarts), as Prometheus counters should.
type expiries struct {
	mu     sync.Mutex
	counts map[expiryKind]uint64
	hooks  []*ExpiryHook
}

// expiryKind is a label set of keel_ipsec_sa_expired_total.
type expiryKind struct {
	hard   bool
	reason string
}

func (x *expiries) add(h ExpiryHook) (remove func()) {
	p := &h
	x.mu.Lock()
	x.hooks = append(x.hooks, p)
	x.mu.Unlock()
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.hooks = slices.DeleteFunc(x.hooks, func(q *ExpiryHook) bool { return q == p })
	}
}

// onExpire returns the engine's Options.OnExpire for the service: it logs
// the event to log, counts it and calls the hooks.
func (x *expiries) onExpire(log *slog.Logger) func(ipsec.SAStatus, bool) {
	return func(st ipsec.SAStatus, hard bool) {
		ev := SAExpiry{SA: st, Hard: hard, At: time.Now()}
		x.mu.Lock()
		if x.counts == nil {
			x.counts = map[expiryKind]uint64{}
		}
		x.counts[expiryKind{hard, st.Expired}]++
		hooks := slices.Clone(x.hooks)
		x.mu.Unlock()
		if hard {
			log.Error(fmt.Sprintf("%s: hard lifetime reached (%s): the SA carries no more traffic", saText(st), limitText(st, true)))
		} else {
			log.Warn(fmt.Sprintf("%s: soft lifetime passed (%s): rekey due", saText(st), limitText(st, false)))
		}
		for _, h := range hooks {
			(*h)(ev)
		}
	}
}

// snapshot returns the event counts.
func (x *expiries) snapshot() map[expiryKind]uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[expiryKind]uint64, len(x.counts))
	for k, v := range x.counts {
		out[k] = v
	}
	return out
}

// saText names an SA in log lines: "SA spi 0x1001 10.99.0.1->10.99.0.2
// aes-gcm-16-128 (ipsec.conf:9:1)".
func saText(st ipsec.SAStatus) string {
	return fmt.Sprintf("SA spi 0x%x %s->%s %s (%s)", st.SPI, st.Src.Addr(), st.Dst.Addr(), st.Alg, st.Pos)
}

// limitText says which limit an SA reached, with the numbers: "bytes:
// 630 of 600", "time: 2s", "sequence numbers: 4294967295 used".
func limitText(st ipsec.SAStatus, hard bool) string {
	switch st.Expired {
	case ipsec.ExpiredBytes:
		limit := st.SoftBytes
		if hard {
			limit = st.HardBytes
		}
		return fmt.Sprintf("bytes: %d of %d", st.OutBytes+st.InBytes, limit)
	case ipsec.ExpiredTime:
		limit := st.SoftTime
		if hard {
			limit = st.HardTime
		}
		return fmt.Sprintf("time: %v", limit)
	}
	return fmt.Sprintf("%s: %d used", st.Expired, st.Seq)
}

// lifetimeText is the part of the ipsec status line about SAs past a
// lifetime, "" when there is none: "; SA 0x1001 dead (bytes), SA 0x2001
// dying (time)", at most three, then "+N more".
func lifetimeText(sas []ipsec.SAStatus) string {
	var parts []string
	n := 0
	for _, sa := range sas {
		if sa.Expired == "" {
			continue
		}
		if n++; n <= 3 {
			parts = append(parts, fmt.Sprintf("SA 0x%x %s (%s)", sa.SPI, sa.State, sa.Expired))
		}
	}
	if n == 0 {
		return ""
	}
	if n > 3 {
		parts = append(parts, fmt.Sprintf("+%d more", n-3))
	}
	return "; " + strings.Join(parts, ", ")
}
