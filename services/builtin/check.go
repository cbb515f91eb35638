package builtin

import (
	"errors"
	"io/fs"
	"strconv"
	"strings"

	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/rcconf"
)

// The builtins' services.Checker implementations: what keeld -n, keelctl
// check and a reload validate before anything starts or changes. Each
// error names the rc.conf line that set the variable, or the file and
// line of ipsec_file; none shows key material.

// Check parses ipsec_file with the setkey parser and validates the
// gateway variables (ipsec_tun and the others of dataplane.ConfigFromRC)
// and the nonce ledger's (ipsec_nonce_ledger, ipsec_nonce_policy,
// keel_nonce_record), reporting every error found. It opens no
// ledger, socket or interface.
func (s *ipsecService) Check(env services.BuiltinEnv) error {
	var errs []error
	if _, _, err := gatewayConfig(env); err != nil {
		errs = append(errs, locateVar(env.Config, err, dataplaneVars))
	}
	if _, _, err := ledgerConfig(env); err != nil {
		errs = append(errs, locateVar(env.Config, err, []string{ledgerVar, policyVar, recordVar}))
	}
	cfg, _, err := readConfig(env)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		errs = append(errs, env.Config.Errorf("ipsec_file", "%s: %w", pe.Path, pe.Err))
	case err != nil && env.Config.Get("ipsec_file") == "":
		errs = append(errs, env.Config.Errorf("ipsec_file", "empty"))
	case err != nil:
		errs = append(errs, err) // the parser's "file:line:col: ..."
	default:
		cfg.Zero()
	}
	return errors.Join(errs...)
}

// locateVar puts the rc.conf place of the first of vars that err's text
// names ("ipsec_local=...: ...") in front of err.
func locateVar(cfg *rcconf.Config, err error, vars []string) error {
	msg := err.Error()
	for _, v := range vars {
		if strings.Contains(msg, v) {
			if w := cfg.Where(v); w != "" {
				return errors.New(w + ": " + msg)
			}
			break
		}
	}
	return err
}

// pktgenParams returns pktgen_rate and pktgen_size of cfg, validated.
func pktgenParams(cfg *rcconf.Config) (rate, size int, err error) {
	var errs []error
	rate, rerr := strconv.Atoi(strings.TrimSpace(cfg.Get("pktgen_rate")))
	if rerr != nil || rate <= 0 || rate > 1_000_000 {
		errs = append(errs, cfg.Errorf("pktgen_rate", "want 1..1000000 packets/s, got %q", cfg.Get("pktgen_rate")))
	}
	size, serr := strconv.Atoi(strings.TrimSpace(cfg.Get("pktgen_size")))
	if serr != nil || size < 64 || size > 1500 {
		errs = append(errs, cfg.Errorf("pktgen_size", "want 64..1500 bytes, got %q", cfg.Get("pktgen_size")))
	}
	return rate, size, errors.Join(errs...)
}

// Check validates pktgen_rate and pktgen_size. (The SAs pktgen pushes
// traffic through are ipsec's, checked by ipsec.)
func (g *pktgenService) Check(env services.BuiltinEnv) error {
	_, _, err := pktgenParams(env.Config)
	return err
}

// checkModules checks every module of the list variable name against
// loader's catalog: an unknown name (with the closest known one) or a
// dependency problem is an error per module.
func checkModules(loader *modules.Loader, cfg *rcconf.Config, name string) []error {
	var errs []error
	for _, m := range strings.Fields(cfg.Get(name)) {
		m = kmodName(m)
		err := loader.Check(m)
		if err == nil {
			continue
		}
		var ue *modules.UnknownError
		if errors.As(err, &ue) && ue.Name == m {
			hint := ""
			if s, ok := rcconf.Suggest(m, ue.Known); ok {
				hint = " (did you mean " + s + "?)"
			}
			errs = append(errs, cfg.Errorf(name, "%s: no such module%s; known: %s", m, hint, strings.Join(ue.Known, " ")))
			continue
		}
		errs = append(errs, cfg.Errorf(name, "%s: %w", m, err))
	}
	return errs
}

// kmodName is the module name of a kld_list entry: a path or a file
// name with .ko is accepted as FreeBSD's kld does.
func kmodName(s string) string {
	return strings.TrimSuffix(s[strings.LastIndexByte(s, '/')+1:], ".ko")
}

// Check validates the module names of kld_list. kld skips a module it
// cannot load and boots on the others, as FreeBSD's rc.d/kld does, so an
// unknown module is a warning, not an error (an accelerator's module is
// absent on a machine without it: aesni without AES-NI).
func (k *kldService) Check(env services.BuiltinEnv) error {
	var errs []error
	for _, err := range checkModules(k.sys.loader, env.Config, "kld_list") {
		errs = append(errs, services.Warning(err))
	}
	return errors.Join(errs...)
}

// Check validates the module names of cryptodev_modules: cryptodev fails
// to start without every one of them, so an unknown one is an error.
func (c *cryptodevService) Check(env services.BuiltinEnv) error {
	return errors.Join(checkModules(c.sys.loader, env.Config, "cryptodev_modules")...)
}
