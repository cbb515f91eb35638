package builtin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/setkey"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/services"
)

// ErrNoFramework is returned by ipsec when cryptodev is not running.
var ErrNoFramework = errors.New("crypto framework not running (is cryptodev enabled?)")

// ipsecService runs the IPsec engine from ipsec_file.
type ipsecService struct {
	sys *System

	mu  sync.RWMutex
	eng *ipsec.Engine
	src string // file the configuration came from
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
	cfg, err := setkey.Parse(file, bytes.NewReader(data))
	if err != nil {
		return nil, file, err
	}
	return cfg, file, nil
}

func (s *ipsecService) Settings(env services.BuiltinEnv) map[string]string {
	out := map[string]string{"ipsec_file": env.Config.Get("ipsec_file")}
	rel := strings.TrimPrefix(path.Clean("/"+env.Config.Get("ipsec_file")), "/")
	if data, err := fs.ReadFile(env.Root, rel); err == nil {
		h := sha256.Sum256(data)
		clear(data)
		out["ipsec_file_sha256"] = hex.EncodeToString(h[:8])
	}
	return out
}

func (s *ipsecService) Start(ctx context.Context, env services.BuiltinEnv) error {
	fw := s.sys.Framework()
	if fw == nil {
		return ErrNoFramework
	}
	cfg, file, err := readConfig(env)
	if err != nil {
		return err
	}
	defer cfg.Zero()
	eng := ipsec.NewEngine(fw, ipsec.Options{})
	if err := eng.Apply(ctx, cfg); err != nil {
		_ = eng.Close(context.WithoutCancel(ctx))
		return err
	}
	s.mu.Lock()
	s.eng, s.src = eng, file
	s.mu.Unlock()
	sas := eng.SAs()
	env.Log.Info(fmt.Sprintf("engine up from %s: %d SA(s), %d policies", file, len(sas), len(eng.Policies())))
	for _, sa := range sas {
		env.Log.Info(fmt.Sprintf("SA %s %s->%s spi 0x%x %s bound to %s", sa.Proto, sa.Src.Addr(), sa.Dst.Addr(), sa.SPI, sa.Alg, orNone(sa.Provider)))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(no provider)"
	}
	return s
}

// Reload re-reads ipsec_file and applies it atomically (all or nothing).
func (s *ipsecService) Reload(ctx context.Context, env services.BuiltinEnv) error {
	eng := s.engine()
	if eng == nil {
		return errors.New("ipsec is not running")
	}
	cfg, _, err := readConfig(env)
	if err != nil {
		return err
	}
	defer cfg.Zero()
	if err := eng.Apply(ctx, cfg); err != nil {
		return err
	}
	env.Log.Info(fmt.Sprintf("reloaded: %d SA(s), %d policies", len(eng.SAs()), len(eng.Policies())))
	return nil
}

func (s *ipsecService) Stop(ctx context.Context) error {
	s.mu.Lock()
	eng := s.eng
	s.eng = nil
	s.mu.Unlock()
	if eng == nil {
		return nil
	}
	return eng.Close(ctx)
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
	return fmt.Sprintf("%d SA(s) [%s], %d policies, out %d pkts, in %d pkts", len(sas), strings.Join(parts, ", "), len(eng.Policies()), c.OutPackets, c.InPackets)
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
