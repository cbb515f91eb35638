package builtin

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
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
	ends := sadEndpoints(cfg)
	if slices.Contains(ends, gw.Peer.Unmap()) {
		return nil
	}
	named := slices.DeleteFunc(ends, func(a netip.Addr) bool { return a == gw.Local.Unmap() })
	return fmt.Errorf("rc.conf: ipsec_peer=%q: no SA in %s has it as an endpoint (the SAs' peers: %v); set it to one of them or leave it empty",
		gw.Peer, file, named)
}

// sadEndpoints returns the addresses the SAs of cfg (its add statements)
// name as source or destination.
func sadEndpoints(cfg *setkey.Config) []netip.Addr {
	var out []netip.Addr
	for _, op := range cfg.Ops {
		if op.Kind != setkey.OpAdd || op.SA == nil {
			continue
		}
		for _, a := range []netip.Addr{op.SA.Src.Addr().Unmap(), op.SA.Dst.Addr().Unmap()} {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// policyRoutes returns the routes of the policies pols
// (dataplane.PolicyRoutes, with the SA endpoints ends) and logs the
// prefixes it does not route because they hold an SA endpoint.
func policyRoutes(pols []spd.Policy, ends []netip.Addr, log *slog.Logger) []netip.Prefix {
	routes, skipped := dataplane.PolicyRoutes(pols, ends)
	for _, p := range skipped {
		log.Warn(fmt.Sprintf("not routing %s into the tunnel: it holds an SA endpoint, so the ESP itself would enter the tunnel (set ipsec_routes to route it anyway)", p))
	}
	return routes
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
