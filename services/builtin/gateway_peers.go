package builtin

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/ipsec/setkey"
)

// A gateway serves every peer its SAs name; ipsec_peer is optional. When it
// is set, it must be the remote endpoint of some SA of ipsec_file, so that a
// typo there is an error rather than a gateway that serves someone else.

// checkPeer checks ipsec_peer (gw.Peer, if set) against the SAs of cfg,
// read from file: some add statement must have it as source or
// destination.
func checkPeer(gw dataplane.Config, cfg *setkey.Config, file string) error {
	if !gw.Peer.IsValid() {
		return nil
	}
	var named []netip.Addr
	for _, op := range cfg.Ops {
		if op.Kind != setkey.OpAdd || op.SA == nil {
			continue
		}
		for _, a := range []netip.Addr{op.SA.Src.Addr(), op.SA.Dst.Addr()} {
			if a == gw.Peer {
				return nil
			}
			if a != gw.Local && !slices.Contains(named, a) {
				named = append(named, a)
			}
		}
	}
	return fmt.Errorf("rc.conf: ipsec_peer=%q: no SA in %s has it as an endpoint (the SAs' peers: %v); set it to one of them or leave it empty",
		gw.Peer, file, named)
}

// pruneRoutes removes the routes into the gateway interface name that were
// installed (at its start or by a reload) but are not in want (the routes
// of removed policies), and records want as installed. It runs once the new
// policies are installed: until then the old ones use their routes. A
// failure is logged, and the routes not removed are tried again at the next
// reload (meanwhile what they carry is dropped as no-policy).
func (s *ipsecService) pruneRoutes(name string, want []netip.Prefix, log *slog.Logger) {
	s.mu.RLock()
	had := s.gwRoutes
	s.mu.RUnlock()
	var gone []netip.Prefix
	for _, r := range had {
		if !slices.Contains(want, r) {
			gone = append(gone, r)
		}
	}
	if len(gone) > 0 {
		if err := s.delRoutes(name, gone); err != nil {
			log.Warn(fmt.Sprintf("ipsec_tun %s: removing the routes of removed policies: %v", name, err))
			want = append(slices.Clone(want), gone...)
		}
	}
	s.mu.Lock()
	s.gwRoutes = want
	s.mu.Unlock()
}
