package builtin

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"path"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keelinit/keel/internal/keyedhash"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/netio"
	"github.com/keelinit/keel/services"
)

// ErrNoFramework is returned by ipsec when cryptodev is not running.
var ErrNoFramework = errors.New("crypto framework not running (is cryptodev enabled?)")

// dataplaneVars are the rc.conf variables of the gateway (see
// dataplane.ConfigFromRC). A change to any of them restarts the gateway.
var dataplaneVars = []string{"ipsec_tun", "ipsec_local", "ipsec_peer", "ipsec_encap", "ipsec_tun_addr",
	"ipsec_tun_mtu", "ipsec_routes", "ipsec_natt_port", "ipsec_udp_gso"}

// gatewayStarter opens a gateway's I/O and starts its loops; it is
// dataplane.Start except in tests, which use in-memory I/O.
type gatewayStarter func(ctx context.Context, eng *ipsec.Engine, cfg dataplane.Config) (*dataplane.Gateway, error)

// routeSetter adds (routes) or removes (unroutes) routes of prefixes into
// the interface name; netio.ConfigureInterface and netio.RemoveRoutes
// except in tests.
type routeSetter func(name string, routes []netip.Prefix) error

// ipsecService runs the IPsec engine from ipsec_file and, when ipsec_tun is
// set, the gateway (TUN and outer socket) on top of it.
type ipsecService struct {
	sys       *System
	startGW   gatewayStarter
	setRoutes routeSetter
	delRoutes routeSetter

	mu    sync.RWMutex
	eng   *ipsec.Engine
	src   string             // file the configuration came from
	gw    *dataplane.Gateway // nil without ipsec_tun
	gwCfg dataplane.Config   // what gw was started with
	// gwRoutes are the routes into gw: those it was started with, then
	// those of the last syncRoutes.
	gwRoutes []netip.Prefix

	// ledger hands out the AEAD nonces of every engine of the System (the
	// service's, successive ones across restarts, and pktgen's peer). It
	// is opened at the first Start and stays open for the life of the
	// System; a later Start naming another file switches to it.
	ledgerMu      sync.Mutex
	ledger        *ipsec.NonceLedger
	ledgerRefused atomic.Uint64 // opens and moves that failed

	expiry expiries // SA lifetime events (expiry.go)
}

// preferOldVar is the rc.conf variable choosing the oldest SA over the
// newest when several qualify (ipsec.Options.PreferOldSA).
const preferOldVar = "ipsec_preferred_oldsa"

func newIPsecService(sys *System) *ipsecService {
	return &ipsecService{sys: sys, startGW: dataplane.Start, setRoutes: func(name string, routes []netip.Prefix) error {
		return netio.ConfigureInterface(name, nil, routes)
	}, delRoutes: netio.RemoveRoutes}
}

// gateway returns the running gateway, or nil.
func (s *ipsecService) gateway() *dataplane.Gateway {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gw
}

func (s *ipsecService) engine() *ipsec.Engine {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.eng
}

func (s *ipsecService) running() bool { return s.engine() != nil }

// readConfig reads and parses ipsec_file from the root. The caller zeroes
// the returned Config.
func readConfig(env services.BuiltinEnv) (*setkey.Config, string, error) {
	file := env.Config.Get("ipsec_file")
	if file == "" {
		return nil, "", errors.New("ipsec_file is empty")
	}
	rel := strings.TrimPrefix(path.Clean("/"+file), "/")
	data, err := fs.ReadFile(env.Root, rel)
	if err != nil {
		return nil, file, fmt.Errorf("ipsec_file: %w", err)
	}
	defer clear(data)
	name := rel
	if hn := services.HostName(env.Config.Get("keel_root")); hn != nil {
		name = hn(rel) // errors name the file the operator edits
	} else {
		name = file
	}
	cfg, err := setkey.Parse(name, bytes.NewReader(data))
	if err != nil {
		return nil, file, err
	}
	return cfg, file, nil
}

// Settings are the ipsec_file (name and content hash), the gateway's
// variables and the nonce ledger's: a change is applied in place by Reload.
func (s *ipsecService) Settings(env services.BuiltinEnv) map[string]string {
	out := fileSettings(env)
	for _, v := range dataplaneVars {
		out[v] = env.Config.Get(v)
	}
	ledgerSettings(env, out)
	return out
}

// settingsKey keys the digest of ipsec_file in the settings: random per
// process, since the settings are readable (/v1/services/ipsec) and the
// file holds the keys; the digest only needs to detect changes.
var settingsKey = func() []byte {
	k := make([]byte, 32)
	if _, err := crand.Read(k); err != nil {
		panic("builtin: crypto/rand failed: " + err.Error())
	}
	return k
}()

// fileSettings identify the SAs and policies: ipsec_file and an HMAC of
// its content under settingsKey (never a plain hash of the keys).
func fileSettings(env services.BuiltinEnv) map[string]string {
	out := map[string]string{"ipsec_file": env.Config.Get("ipsec_file")}
	rel := strings.TrimPrefix(path.Clean("/"+env.Config.Get("ipsec_file")), "/")
	if data, err := fs.ReadFile(env.Root, rel); err == nil {
		sum := keyedhash.Sum(settingsKey, data) // leaves no copy of the keys in data
		clear(data)
		out["ipsec_file_hmac"] = hex.EncodeToString(sum[:16])
	}
	return out
}

// gatewayConfig returns the gateway configuration of env, and false when
// ipsec_tun is unset (no gateway: the engine serves in-process users such
// as pktgen only).
func gatewayConfig(env services.BuiltinEnv) (dataplane.Config, bool, error) {
	if strings.TrimSpace(env.Config.Get("ipsec_tun")) == "" {
		return dataplane.Config{}, false, nil
	}
	cfg, err := dataplane.ConfigFromRC(env.Config.Get)
	if err != nil {
		return cfg, true, fmt.Errorf("rc.conf: %w", err)
	}
	return cfg, true, nil
}

func (s *ipsecService) Start(ctx context.Context, env services.BuiltinEnv) error {
	fw := s.sys.Framework()
	if fw == nil {
		return ErrNoFramework
	}
	// Check the gateway settings before anything is started.
	gwCfg, tun, err := gatewayConfig(env)
	if err != nil {
		return err
	}
	cfg, file, err := readConfig(env)
	if err != nil {
		return err
	}
	defer cfg.Zero()
	if tun {
		if err := checkPeer(gwCfg, cfg, file); err != nil {
			return err
		}
	}
	ledger, err := s.nonceLedger(env)
	if err != nil {
		return err
	}
	eng := ipsec.NewEngine(fw, ipsec.Options{NonceLedger: ledger, OnExpire: s.expiry.onExpire(env.Log), Name: "ipsec", PreferOldSA: env.Config.Bool(preferOldVar)})
	if err := eng.Apply(ctx, cfg); err != nil {
		_ = eng.Close(context.WithoutCancel(ctx))
		return err
	}
	var gw *dataplane.Gateway
	start := gwCfg
	if tun {
		if len(start.Routes) == 0 {
			start.Routes = policyRoutes(eng.Policies(), sadEndpoints(cfg), env.Log)
		}
		if gw, err = s.startGateway(ctx, eng, start, env.Log); err != nil {
			_ = eng.Close(context.WithoutCancel(ctx))
			return err
		}
	}
	s.mu.Lock()
	s.eng, s.src, s.gw, s.gwCfg, s.gwRoutes = eng, file, gw, gwCfg, start.Routes
	s.mu.Unlock()
	sas := eng.SAs()
	env.Log.Info(fmt.Sprintf("engine up from %s: %d SA(s), %d policies", file, len(sas), len(eng.Policies())))
	for _, sa := range sas {
		env.Log.Info(fmt.Sprintf("SA %s %s->%s spi 0x%x %s bound to %s", sa.Proto, sa.Src.Addr(), sa.Dst.Addr(), sa.SPI, sa.Alg, orNone(sa.Provider)))
	}
	return nil
}

// startGateway starts the gateway on eng and logs it; a goroutine reports
// the gateway's loops stopping on their own (an I/O failure).
func (s *ipsecService) startGateway(ctx context.Context, eng *ipsec.Engine, cfg dataplane.Config, log *slog.Logger) (*dataplane.Gateway, error) {
	gw, err := s.startGW(ctx, eng, cfg)
	if err != nil {
		return nil, fmt.Errorf("ipsec_tun %s: %w", cfg.TUN, err)
	}
	st := gw.Status()
	log.Info(fmt.Sprintf("gateway up: %s, outer %s, mtu %d", tunText(st), st.Outer, st.MTU))
	go func() {
		<-gw.Done()
		if st := gw.Status(); st.Err != "" && s.gateway() == gw {
			log.Error(fmt.Sprintf("gateway %s stopped: %s", st.Interface, st.Err))
		}
	}()
	return gw, nil
}

// stopped reports whether gw's loops have all returned.
func stopped(gw *dataplane.Gateway) bool {
	select {
	case <-gw.Done():
		return true
	default:
		return false
	}
}

// tunText renders a gateway for status lines: "tun keel0 udp
// 10.99.0.1->10.99.0.2" (ipsec_peer, or the one peer the SAs name), or
// "tun keel0 udp 10.99.0.1->3 peers".
func tunText(st dataplane.Status) string {
	peer := fmt.Sprintf("%d peers", len(st.Peers))
	switch {
	case st.Peer.IsValid():
		peer = st.Peer.String()
	case len(st.Peers) == 1:
		peer = st.Peers[0].Addr.Addr().String()
	}
	return fmt.Sprintf("tun %s %s %s->%s", st.Interface, st.Encap, st.Local, peer)
}

// NoProvider is how status output shows the provider of an SA or binding
// that has none.
const NoProvider = "(no provider)"

func orNone(s string) string {
	if s == "" {
		return NoProvider
	}
	return s
}

// Reload re-reads ipsec_file and applies it together with the gateway,
// all or nothing: a changed ipsec_tun, ipsec_local, ipsec_peer,
// ipsec_encap (or another gateway variable) restarts the gateway, an
// unset ipsec_tun stops it; otherwise it keeps running, counts the peers
// of the new SAs and, when its routes come from the policies (no
// ipsec_routes), the routes of the new outbound policies are added and,
// once they are installed, those of removed policies removed. A gateway
// whose loops stopped on an error is restarted, so a reload recovers it.
//
// The engine's new configuration is installed only once the gateway part
// succeeded (ipsec.Engine.ApplyThen). When the new gateway cannot start
// (its port is taken, say), the old one is started again with its
// configuration, the engine keeps its configuration, and the error is
// returned: the service runs as before. If the old gateway cannot be
// started again either, the service stops and the error wraps
// services.ErrStopped, so that the Manager shows it failed.
func (s *ipsecService) Reload(ctx context.Context, env services.BuiltinEnv) error {
	eng := s.engine()
	if eng == nil {
		return errors.New("ipsec is not running")
	}
	if _, err := s.nonceLedger(env); err != nil { // moves it if its file changed
		return err
	}
	gwCfg, tun, err := gatewayConfig(env)
	if err != nil {
		return err
	}
	cfg, file, err := readConfig(env)
	if err != nil {
		return err
	}
	defer cfg.Zero()
	if tun {
		if err := checkPeer(gwCfg, cfg, file); err != nil {
			return err
		}
	}
	s.mu.RLock()
	old, oldCfg := s.gw, s.gwCfg
	s.mu.RUnlock()
	keep := old != nil && tun && reflect.DeepEqual(oldCfg, gwCfg) && !stopped(old)
	var want []netip.Prefix // the kept gateway's routes under the new policies
	ends := sadEndpoints(cfg)
	err = eng.ApplyThen(ctx, cfg, func(pols []spd.Policy) error {
		if !keep {
			return s.replaceGateway(ctx, eng, old, oldCfg, gwCfg, tun, pols, ends, env.Log)
		}
		if len(gwCfg.Routes) == 0 {
			if want = policyRoutes(pols, ends, env.Log); len(want) > 0 {
				if err := s.setRoutes(old.Status().Interface, want); err != nil {
					return fmt.Errorf("ipsec_tun %s: routes: %w", gwCfg.TUN, err)
				}
			}
		}
		return nil
	})
	if errors.Is(err, errGatewayLost) {
		env.Log.Error(fmt.Sprintf("reload: %v; stopping ipsec", err))
		if serr := s.Stop(context.WithoutCancel(ctx)); serr != nil {
			env.Log.Warn(fmt.Sprintf("stop: %v", serr))
		}
		return fmt.Errorf("%w: %w", services.ErrStopped, err)
	}
	if err != nil {
		return err
	}
	eng.SetPreferOldSA(env.Config.Bool(preferOldVar))
	if gw := s.gateway(); gw != nil {
		gw.Refresh() // count the peers of the SAs just installed
	}
	if keep && len(gwCfg.Routes) == 0 {
		s.pruneRoutes(old.Status().Interface, want, env.Log)
	}
	env.Log.Info(fmt.Sprintf("reloaded: %d SA(s), %d policies", len(eng.SAs()), len(eng.Policies())))
	return nil
}

// errGatewayLost marks a reload that stopped the old gateway, could not
// start the new one and could not start the old one again either.
var errGatewayLost = errors.New("no gateway runs")

// replaceGateway stops the gateway old (nil: none) and starts one with
// cfg (none when tun is false) routing the policies pols (SA endpoints
// ends, see policyRoutes), which the engine
// is about to install (they are not installed yet: the routes are given
// explicitly). If the new gateway fails to start, old's configuration
// oldCfg is started again with the routes it had and the start
// error is returned; if that fails too, the error wraps errGatewayLost.
func (s *ipsecService) replaceGateway(ctx context.Context, eng *ipsec.Engine, old *dataplane.Gateway, oldCfg, cfg dataplane.Config,
	tun bool, pols []spd.Policy, ends []netip.Addr, log *slog.Logger) error {
	s.mu.RLock()
	oldRoutes := s.gwRoutes
	s.mu.RUnlock()
	if old != nil {
		s.mu.Lock()
		s.gw = nil
		s.mu.Unlock()
		st := old.Status()
		if err := old.Close(); err != nil {
			log.Warn(fmt.Sprintf("gateway %s close: %v", st.Interface, err))
		}
		log.Info(fmt.Sprintf("gateway %s stopped: out %d pkts, in %d pkts", st.Interface, st.Out.Packets, st.In.Packets))
	}
	if !tun {
		return nil
	}
	start := cfg
	if len(start.Routes) == 0 {
		start.Routes = policyRoutes(pols, ends, log)
	}
	gw, err := s.startGateway(ctx, eng, start, log)
	if err == nil {
		s.mu.Lock()
		s.gw, s.gwCfg, s.gwRoutes = gw, cfg, start.Routes
		s.mu.Unlock()
		return nil
	}
	if old == nil {
		return err
	}
	log.Error(fmt.Sprintf("reload: %v; starting the previous gateway again", err))
	again := oldCfg
	if len(again.Routes) == 0 {
		again.Routes = oldRoutes // those of the policies still installed
	}
	prev, perr := s.startGateway(context.WithoutCancel(ctx), eng, again, log)
	if perr != nil {
		return fmt.Errorf("%w; the previous gateway: %w (%w)", err, perr, errGatewayLost)
	}
	s.mu.Lock()
	s.gw, s.gwCfg, s.gwRoutes = prev, oldCfg, again.Routes
	s.mu.Unlock()
	return err
}

// Stop closes the gateway first (its loops use the engine), then the engine.
func (s *ipsecService) Stop(ctx context.Context) error {
	s.mu.Lock()
	eng, gw := s.eng, s.gw
	s.eng, s.gw = nil, nil
	s.mu.Unlock()
	var errs []error
	if gw != nil {
		errs = append(errs, gw.Close())
	}
	if eng != nil {
		errs = append(errs, eng.Close(ctx))
		// Record the numbers the closed SAs gave back: a restart of keeld
		// continues right after them.
		if l := s.currentLedger(); l != nil {
			if err := l.Sync(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ledgerVar, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (s *ipsecService) Status() string {
	eng := s.engine()
	if eng == nil {
		return ""
	}
	sas := eng.SAs()
	prov := map[string]int{}
	for _, sa := range sas {
		prov[orNone(sa.Provider)]++
	}
	var parts []string
	for _, k := range sortedKeys(prov) {
		parts = append(parts, fmt.Sprintf("%d on %s", prov[k], k))
	}
	c := eng.Counters()
	out := fmt.Sprintf("%d SA(s) [%s], %d policies, out %d pkts, in %d pkts", len(sas), strings.Join(parts, ", "), len(eng.Policies()), c.OutPackets, c.InPackets)
	out += lifetimeText(sas)
	if gw := s.gateway(); gw != nil {
		// The tunnel first: keelctl status truncates long lines.
		st := gw.Status()
		tun := tunText(st)
		if st.Err != "" {
			tun += " FAILED: " + st.Err
		}
		out = tun + "; " + out
	}
	if d := s.Degraded(); d != "" {
		out = "degraded: " + d + "; " + out
	}
	return out
}

// Degraded says why ipsec runs but cannot carry all of its traffic: SAs
// with no crypto provider (a forced kldunload), or a nonce ledger that
// cannot be written (AEAD SAs stop once their reserved range is used).
// "" when whole. It implements services.Degrader.
func (s *ipsecService) Degraded() string {
	eng := s.engine()
	if eng == nil {
		return ""
	}
	var why []string
	if d := unboundStatus(eng.SAs()); d != "" {
		why = append(why, d)
	}
	if d := s.ledgerDegraded(); d != "" {
		why = append(why, d)
	}
	return strings.Join(why, "; ")
}

// mirror returns the peer's view of cfg: the same SAs, with every policy's
// direction flipped (our inbound policy is the peer's outbound one).
func mirror(cfg *setkey.Config) *setkey.Config {
	out := &setkey.Config{Ops: make([]setkey.Op, len(cfg.Ops))}
	for i, op := range cfg.Ops {
		out.Ops[i] = op
		if op.Policy != nil {
			p := *op.Policy
			switch p.Dir {
			case spd.DirIn:
				p.Dir = spd.DirOut
			case spd.DirOut:
				p.Dir = spd.DirIn
			}
			out.Ops[i].Policy = &p
		}
	}
	return out
}

var (
	_ services.Builtin  = (*ipsecService)(nil)
	_ services.Reloader = (*ipsecService)(nil)
	_ services.Degrader = (*ipsecService)(nil)
)
