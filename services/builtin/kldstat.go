package builtin

import (
	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/modules"
)

// ModuleStat is kldstat: the loader's rows, with each crypto provider
// module's state following the framework. A loaded provider module whose
// provider the framework dropped after a fault (a device that died) is
// failed, one whose provider faulted and lost its bindings is degraded,
// and one whose provider is missing while cryptodev runs is failed; the
// Reason says why.
func (s *System) ModuleStat() []modules.Stat {
	rows := s.loader.Stat()
	fw := s.Framework()
	if fw == nil {
		return rows
	}
	provs := map[string]crypto.ProviderStatus{}
	for _, p := range fw.Providers() {
		provs[p.Name] = p
	}
	removed := fw.Removed()
	for i, r := range rows {
		if r.Kind != modules.KindCryptoProvider || r.State != modules.StateLoaded {
			continue
		}
		p, ok := provs[r.Name]
		switch {
		case !ok && removed[r.Name] != "":
			rows[i].State = modules.StateFailed
			rows[i].Reason = "provider removed by the crypto framework after a fault: " + removed[r.Name]
		case !ok:
			rows[i].State = modules.StateFailed
			rows[i].Reason = "provider not registered with the crypto framework"
		case p.State == crypto.StateDegraded:
			rows[i].State = modules.StateDegraded
			rows[i].Reason = "provider faulted: " + p.LastFault
		case p.State == crypto.StateQuarantined:
			rows[i].State = modules.StateFailed
			rows[i].Reason = "provider quarantined: " + p.SelfTest.FailedVector
		}
	}
	return rows
}
