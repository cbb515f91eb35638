package builtin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/services"
)

// The rc.conf variables of the nonce ledger: its file, the policy for an
// unsafe ledger (see ipsec.NoncePolicy), and its record (keeld's
// --nonce-record, seeded).
const (
	ledgerVar = "ipsec_nonce_ledger"
	policyVar = "ipsec_nonce_policy"
	recordVar = "keel_nonce_record"
)

// nonceLedgerPath returns the ledger file of env: ipsec_nonce_ledger (an
// absolute path) if set, else esp-nonces in keeld's state directory
// (StateDir of keel_state_dir and keel_root).
func nonceLedgerPath(env services.BuiltinEnv) (string, error) {
	if p := strings.TrimSpace(env.Config.Get(ledgerVar)); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("%s: %q is not an absolute path", ledgerVar, p)
		}
		return filepath.Clean(p), nil
	}
	d, err := StateDir(env.Config.Get("keel_state_dir"), env.Config.Get("keel_root"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", ledgerVar, err)
	}
	return filepath.Join(d, "esp-nonces"), nil
}

// nonceRecordPath returns the ledger record of env: keel_nonce_record (an
// absolute path) if set, else esp-nonces.record in the default state
// directory (StateDir without --state-dir). It depends on neither
// ipsec_nonce_ledger nor the state directory, so that the record still
// names the previous ledger when one of them changes (see
// ipsec.LedgerOptions.Record).
func nonceRecordPath(env services.BuiltinEnv) (string, error) {
	if p := strings.TrimSpace(env.Config.Get(recordVar)); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("%s: %q is not an absolute path", recordVar, p)
		}
		return filepath.Clean(p), nil
	}
	d, err := StateDir("", env.Config.Get("keel_root"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", recordVar, err)
	}
	return filepath.Join(d, "esp-nonces.record"), nil
}

// ledgerConfig returns the ledger file of env and its options.
func ledgerConfig(env services.BuiltinEnv) (string, ipsec.LedgerOptions, error) {
	var opts ipsec.LedgerOptions
	p, err := nonceLedgerPath(env)
	if err != nil {
		return "", opts, err
	}
	if opts.Record, err = nonceRecordPath(env); err != nil {
		return "", opts, err
	}
	if opts.Policy, err = ipsec.ParseNoncePolicy(env.Config.Get(policyVar)); err != nil {
		return "", opts, fmt.Errorf("%s: %w", policyVar, err)
	}
	opts.Log = env.Log
	return p, opts, nil
}

// ledgerSettings are the ledger's effective settings: a change is seen by
// keelctl reload (and applied by moving the ledger).
func ledgerSettings(env services.BuiltinEnv, out map[string]string) {
	p, opts, err := ledgerConfig(env)
	if err != nil {
		out[ledgerVar] = "invalid: " + err.Error()
		return
	}
	out[ledgerVar], out[recordVar], out[policyVar] = p, opts.Record, string(opts.Policy)
}

// nonceLedger returns the System's nonce ledger for env, opening it on
// first use; when env names another file (or record), the open ledger
// moves there carrying every entry over (ipsec.NonceLedger.Move), so that
// engines holding it, the service's and pktgen's, keep going. A ledger
// that cannot be read or trusted fails the start (or reload): running
// AEAD SAs without it could reuse nonces.
func (s *ipsecService) nonceLedger(env services.BuiltinEnv) (*ipsec.NonceLedger, error) {
	p, opts, err := ledgerConfig(env)
	if err != nil {
		return nil, err
	}
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	if s.ledger != nil {
		if err := s.ledger.Move(p, opts); err != nil {
			s.ledgerRefused.Add(1)
			return nil, fmt.Errorf("%s: %w", ledgerVar, ledgerHint(err))
		}
		return s.ledger, nil
	}
	l, err := ipsec.OpenNonceLedger(p, opts)
	if err != nil {
		s.ledgerRefused.Add(1)
		return nil, fmt.Errorf("%s: %w", ledgerVar, ledgerHint(err))
	}
	s.ledger = l
	return l, nil
}

// ledgerHint adds the rc.conf way out to a refused unsafe ledger.
func ledgerHint(err error) error {
	if !errors.Is(err, ipsec.ErrLedgerUnsafe) {
		return err
	}
	return fmt.Errorf("%w (after re-keying: %s=%s; see docs/nonce-ledger.md)", err, policyVar, ipsec.NoncePolicyFreshKeyOnly)
}

// currentLedger returns the ledger opened by the last Start, or nil.
func (s *ipsecService) currentLedger() *ipsec.NonceLedger {
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	return s.ledger
}

// ledgerDegraded says why the ledger makes ipsec degraded: its file
// cannot be written (AEAD SAs stop once their range is used up); "" when
// it is fine.
func (s *ipsecService) ledgerDegraded() string {
	l := s.currentLedger()
	if l == nil {
		return ""
	}
	if st := l.Stats(); st.Err != "" {
		return "nonce ledger write failing: " + st.Err
	}
	return ""
}
