// Package builtin implements keeld's Go services (type=builtin in rc.d):
//
//   - cryptodev starts the crypto provider framework and loads the
//     baseline providers of cryptodev_modules;
//   - kld loads kld_list through the modules package, one module at a
//     time in list order, so that each provider's arrival is visible;
//   - ipsec starts the IPsec engine from ipsec_file (setkey format) and,
//     when ipsec_tun is set, the gateway of package ipsec/dataplane (a TUN
//     device and an ESP-in-UDP or raw ESP socket) on top of it;
//   - pktgen pushes ESP traffic through the engine's SAs.
//
// It also mounts the kldstat/kldload/kldunload, crypto and ipsec
// endpoints on the control API and exports their Prometheus metrics.
// A System is safe for concurrent use; the Manager serialises each
// builtin's Start and Stop.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
)

// Options configure a System.
type Options struct {
	// CalibrationBudget is passed to the crypto framework (per provider).
	CalibrationBudget time.Duration
	// Logger receives framework and loader events; nil means slog.Default().
	Logger *slog.Logger
}

// System holds the state shared by the builtins: the module loader, the
// crypto framework (while cryptodev runs) and the IPsec engine (while
// ipsec runs).
type System struct {
	opts   Options
	log    *slog.Logger
	loader *modules.Loader

	mu    sync.RWMutex
	fw    *crypto.Framework
	ips   *ipsecService
	ipsTx *ipsecTx // ips as the Manager runs it
	pg    *pktgenService
}

// New returns a System with its own module loader over the modules
// registered at init time.
func New(opts Options) *System {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &System{opts: opts, log: opts.Logger, loader: modules.NewLoader(modules.WithLogger(opts.Logger))}
	s.ips = newIPsecService(s)
	s.ipsTx = &ipsecTx{ipsecService: s.ips}
	s.pg = &pktgenService{sys: s}
	return s
}

// Loader returns the module loader.
func (s *System) Loader() *modules.Loader { return s.loader }

// Framework returns the crypto framework, or nil when cryptodev is not
// running.
func (s *System) Framework() *crypto.Framework {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fw
}

// Engine returns the IPsec engine, or nil when the ipsec service is not
// running.
func (s *System) Engine() *ipsec.Engine { return s.ips.engine() }

// Gateway returns the IPsec gateway (ipsec_tun), or nil when the ipsec
// service is not running or runs without an interface. The gateway stays
// owned by the ipsec service, which closes it on stop, reload or restart.
func (s *System) Gateway() *dataplane.Gateway { return s.ips.gateway() }

// Builtins returns the builtin services by rc.d name.
func (s *System) Builtins() map[string]services.Builtin {
	return map[string]services.Builtin{
		"cryptodev": &cryptodevService{sys: s},
		"kld":       &kldService{sys: s},
		"ipsec":     s.ipsTx,
		"pktgen":    s.pg,
	}
}

// modCtx returns ctx carrying the crypto framework, so that provider
// modules register with it.
func (s *System) modCtx(ctx context.Context) context.Context {
	if fw := s.Framework(); fw != nil {
		return crypto.NewContext(ctx, fw)
	}
	return ctx
}

// LoadModules loads names (required_modules of an rc.d service).
func (s *System) LoadModules(ctx context.Context, names []string) error {
	return s.loader.Load(s.modCtx(ctx), names...)
}

// Close stops what the builtins left running (normally nothing after the
// Manager's shutdown).
func (s *System) Close(ctx context.Context) error {
	var errs []error
	errs = append(errs, s.pg.Stop(ctx))
	if s.ips.running() {
		errs = append(errs, s.ipsTx.Stop(ctx))
	}
	s.mu.Lock()
	fw := s.fw
	s.fw = nil
	s.mu.Unlock()
	if fw != nil {
		errs = append(errs, fw.Close(ctx))
	}
	return errors.Join(errs...)
}

// ---- cryptodev ----

type cryptodevService struct {
	sys    *System
	loaded []string
}

func (c *cryptodevService) Settings(env services.BuiltinEnv) map[string]string {
	return map[string]string{"cryptodev_modules": env.Config.Get("cryptodev_modules")}
}

func (c *cryptodevService) Start(ctx context.Context, env services.BuiltinEnv) error {
	s := c.sys
	t0 := time.Now()
	fw := crypto.New(crypto.Options{CalibrationBudget: s.opts.CalibrationBudget, Logger: env.Log})
	s.mu.Lock()
	s.fw = fw
	s.mu.Unlock()
	c.loaded = nil
	for _, name := range strings.Fields(env.Config.Get("cryptodev_modules")) {
		if err := loadOne(s.modCtx(ctx), s, env.Log, name); err != nil {
			// Leave nothing half-started behind: Stop is only called
			// after a successful Start.
			_ = c.Stop(context.WithoutCancel(ctx))
			return fmt.Errorf("cryptodev_modules: %w", err)
		}
		c.loaded = append(c.loaded, name)
	}
	env.Log.Info(fmt.Sprintf("crypto framework up in %v with %s", time.Since(t0).Round(time.Microsecond*10), providerSummary(fw)))
	return nil
}

func (c *cryptodevService) Stop(ctx context.Context) error {
	s := c.sys
	var errs []error
	// Unload every provider module still loaded, then the framework.
	for _, st := range reverse(s.loader.Stat()) {
		if st.Kind == modules.KindCryptoProvider && st.State == modules.StateLoaded {
			err := s.loader.Unload(s.modCtx(ctx), st.Name)
			if errors.Is(err, modules.ErrBusy) {
				err = s.loader.Unload(s.modCtx(ctx), st.Name, modules.Force())
			}
			if err != nil && !errors.Is(err, modules.ErrNotLoaded) {
				errs = append(errs, err)
			}
		}
	}
	if s.loader.IsLoaded(crypto.ModuleName) {
		_ = s.loader.Unload(s.modCtx(ctx), crypto.ModuleName, modules.Force())
	}
	s.mu.Lock()
	fw := s.fw
	s.fw = nil
	s.mu.Unlock()
	if fw != nil {
		errs = append(errs, fw.Close(ctx))
	}
	return errors.Join(errs...)
}

func (c *cryptodevService) Status() string {
	fw := c.sys.Framework()
	if fw == nil {
		return ""
	}
	return providerSummary(fw)
}

func providerSummary(fw *crypto.Framework) string {
	var parts []string
	for _, p := range fw.Providers() {
		parts = append(parts, fmt.Sprintf("%s(%s)", p.Name, p.State))
	}
	if len(parts) == 0 {
		return "no providers"
	}
	return fmt.Sprintf("%d provider(s): %s", len(parts), strings.Join(parts, " "))
}

func reverse[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// loadOne loads one module and logs it like kldload.
func loadOne(ctx context.Context, s *System, log *slog.Logger, name string) error {
	t0 := time.Now()
	id, err := s.loader.LoadOne(ctx, name)
	if errors.Is(err, modules.ErrExist) {
		log.Info(fmt.Sprintf("module %s already loaded (id %d)", name, id))
		return nil
	}
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("loaded module %s (id %d) in %v", name, id, time.Since(t0).Round(time.Microsecond*10))
	if fw := s.Framework(); fw != nil {
		for _, p := range fw.Providers() {
			if p.Name == name {
				msg += fmt.Sprintf(": %s, self-test %s, %s", p.State, selfTestText(p.SelfTest), bestThroughput(p))
			}
		}
	}
	log.Info(msg)
	return nil
}

func selfTestText(r crypto.SelfTestResult) string {
	switch {
	case r.Skipped:
		return "skipped"
	case r.Passed:
		return fmt.Sprintf("passed (%d vectors)", r.Vectors)
	}
	return "FAILED: " + r.FailedVector
}

// bestThroughput renders the provider's calibrated speed at 1420 bytes
// for its fastest algorithm.
func bestThroughput(p crypto.ProviderStatus) string {
	var best crypto.Throughput
	gcm := crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	for _, t := range p.Throughput {
		if t.Size != crypto.CalibrationSizes[len(crypto.CalibrationSizes)-1] {
			continue
		}
		if t.Alg == gcm {
			best = t
			break
		}
		if t.BytesPerSec > best.BytesPerSec && t.Alg.Cipher != crypto.CipherNull {
			best = t
		}
	}
	if best.BytesPerSec == 0 {
		return "not calibrated"
	}
	return fmt.Sprintf("%.0f MB/s %s@%dB", best.BytesPerSec/1e6, best.Alg, best.Size)
}

// ---- kld ----

type kldService struct {
	sys    *System
	loaded []string

	mu     sync.Mutex
	failed []string // "name: reason" of modules that did not load
}

func (k *kldService) Settings(env services.BuiltinEnv) map[string]string {
	return map[string]string{"kld_list": env.Config.Get("kld_list")}
}

// Start loads kld_list one module at a time, in list order. Like
// FreeBSD's rc.d/kld, a module that fails to load (unknown, quarantined by
// its self-tests...) is reported and skipped, and the others still load:
// a missing accelerator must not keep the appliance from booting on the
// providers it has. Start fails only if nothing in a non-empty list loaded
// or ctx ended.
func (k *kldService) Start(ctx context.Context, env services.BuiltinEnv) error {
	k.loaded = nil
	var failed []string
	var errs []error
	list := strings.Fields(env.Config.Get("kld_list"))
	for _, name := range list {
		name = kmodName(name)
		already := k.sys.loader.IsLoaded(name)
		if err := loadOne(k.sys.modCtx(ctx), k.sys, env.Log, name); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("kld_list: %w", err)
			}
			env.Log.Warn(fmt.Sprintf("kld_list: %s not loaded: %v", name, err))
			failed = append(failed, name+": "+err.Error())
			errs = append(errs, err)
			continue
		}
		if !already {
			k.loaded = append(k.loaded, name)
		}
	}
	k.mu.Lock()
	k.failed = failed
	k.mu.Unlock()
	if len(list) > 0 && len(errs) == len(list) {
		return fmt.Errorf("kld_list: nothing loaded: %w", errors.Join(errs...))
	}
	return nil
}

// Stop unloads the modules this service loaded that are still loaded,
// as a whole (dependents first). While they are in use (SAs bound to
// providers among them that no other provider can take over) the unload
// is refused and changes nothing: the modules stay loaded, which is
// logged, and cryptodev unloads them when it stops (FreeBSD's rc.d/kld
// unloads nothing at all). Other errors fail the stop.
func (k *kldService) Stop(ctx context.Context) error {
	var names []string
	for _, name := range k.loaded {
		if k.sys.loader.IsLoaded(name) {
			names = append(names, name)
		}
	}
	err := k.sys.loader.UnloadAll(k.sys.modCtx(ctx), names)
	switch {
	case errors.Is(err, modules.ErrBusy):
		k.sys.log.Warn(fmt.Sprintf("kld: %s stay loaded: %v", strings.Join(names, " "), err))
	case err != nil && !errors.Is(err, modules.ErrNotLoaded):
		return err
	}
	k.loaded = nil
	return nil
}

func (k *kldService) Status() string {
	var names, broken []string
	for _, st := range k.sys.ModuleStat() {
		switch st.State {
		case modules.StateLoaded:
			names = append(names, st.Name)
		case modules.StateFailed, modules.StateDegraded:
			broken = append(broken, fmt.Sprintf("%s %s: %s", st.Name, st.State, st.Reason))
		}
	}
	out := fmt.Sprintf("%d module(s) loaded: %s", len(names), strings.Join(names, " "))
	if len(broken) > 0 {
		out += "; " + strings.Join(broken, "; ")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.failed) > 0 {
		out += "; FAILED: " + strings.Join(k.failed, "; ")
	}
	return out
}

// Collectors returns the Prometheus collectors of the crypto framework
// and the IPsec engine.
func (s *System) Collectors() []prometheus.Collector { return []prometheus.Collector{collector{s}} }

// Mount adds the module, crypto and ipsec endpoints to srv.
func (s *System) Mount(srv *api.Server) { s.mount(srv) }
