package services

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/keelinit/keel/services/rcconf"
)

// RCDir is the rc.d directory relative to the root.
const RCDir = "etc/rc.d"

// Defaults for rc.d variables that are not set.
const (
	DefaultStartTimeout   = 30 * time.Second
	DefaultStopTimeout    = 10 * time.Second
	DefaultRestartBackoff = 100 * time.Millisecond
	MaxRestartBackoff     = 30 * time.Second
)

// Header is the rcorder header of an rc.d file.
type Header struct {
	Path     string
	Provides []string
	Requires []string
	Before   []string
	Keywords []string
}

// Definition is a parsed rc.d service with its rc.conf settings resolved.
// It is immutable once returned.
type Definition struct {
	Header
	Name            string
	Rcvar           string // empty: always enabled
	Enabled         bool
	Type            Type
	Command         string
	Args            []string // ${name}_flags then command_args
	Pidfile         string
	RequiredModules []string
	RequiredFiles   []string
	StartPrecmd     []string
	StopPostcmd     []string
	StopSignal      syscall.Signal
	StartTimeout    time.Duration
	StopTimeout     time.Duration
	Restart         RestartPolicy
	RestartBackoff  time.Duration
	Notify          bool
	// Requisite lists the REQUIRE'd provisions that are hard
	// requirements (rc.d key requisite, systemd's Requisite= with
	// BindsTo='s stop): the service does not start when a provider of
	// one failed, and stops when that provider stops. Every other
	// REQUIRE only orders, as in FreeBSD rc.
	Requisite []string
	// Config is the service's rc.conf view (global plus rc.conf.d/<name>).
	Config *rcconf.Config
	// Settings are the effective settings; a change restarts the service on reload.
	Settings map[string]string
	// SkipReason says why an otherwise enabled service is not started
	// (e.g. the nostart keyword).
	SkipReason string
	// Err is set when the file could not be used; the service fails at
	// boot with this reason (dependents start after it all the same,
	// unless they list it as requisite).
	Err error
}

// Fingerprint hashes the effective settings.
func (d *Definition) Fingerprint() string {
	b, _ := json.Marshal(d.Settings) // map keys are sorted by encoding/json
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// Argv returns command followed by its arguments.
func (d *Definition) Argv() []string {
	if d.Type == TypeScript {
		return []string{"/bin/sh", d.Path}
	}
	if d.Command == "" {
		return nil
	}
	return append([]string{d.Command}, d.Args...)
}

var knownVars = map[string]bool{
	"name": true, "rcvar": true, "desc": true, "type": true, "command": true, "command_args": true,
	"pidfile": true, "required_modules": true, "required_files": true, "start_precmd": true,
	"stop_postcmd": true, "stop_signal": true, "start_timeout": true, "stop_timeout": true,
	"restart": true, "restart_backoff": true, "notify": true, "requisite": true,
}

// checkKeys rejects an assignment in a declarative rc.d file to a key
// that is neither a known variable nor one of the service's own
// ${name}_* variables: a misspelt key (start_timout) would otherwise be
// silently ignored. The error names the line and column and suggests
// the closest known key.
func checkKeys(file, name string, prog *syntax.File) error {
	known := slices.Sorted(maps.Keys(knownVars))
	for _, st := range prog.Stmts {
		for _, as := range st.Cmd.(*syntax.CallExpr).Assigns {
			k := as.Name.Value
			if knownVars[k] || strings.HasPrefix(k, name+"_") {
				continue
			}
			hint := ""
			if s, ok := rcconf.Suggest(k, known); ok {
				hint = fmt.Sprintf(" (did you mean %s?)", s)
			}
			return fmt.Errorf("%s:%d:%d: %s: %w: unknown key%s", file, as.Pos().Line(), as.Pos().Col(), k, ErrBadService, hint)
		}
	}
	return nil
}

// ParseDefinition parses one rc.d file. data is its content and exec says
// whether it has an execute bit. chain supplies rc.conf; hdr is the
// file's rcorder header. Errors name the file, and the line and column
// when they come from the shell parser. When the file evaluates but a
// field is invalid, the partial Definition (Name, Rcvar and Enabled set)
// is returned with the error, so that a disabled service with a bad field
// stays disabled rather than failed.
func ParseDefinition(chain *rcconf.Chain, hdr Header, data []byte, exec bool) (*Definition, error) {
	file := chain.Name(hdr.Path)
	prog, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(string(data)), file)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrBadService)
	}
	if aerr := rcconf.CheckAssignments(file, prog); aerr != nil {
		if !exec {
			return nil, fmt.Errorf("%w: %w (declarative rc.d files hold only assignments; make it executable to run it as a shell script)", aerr, ErrBadService)
		}
		return parseScript(chain, hdr, prog)
	}
	base := path.Base(file)
	pre, err := chain.Global().Eval(file, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrBadService)
	}
	name := pre.Get("name")
	if name == "" {
		name = base
	}
	scfg, err := chain.ForService(name)
	if err != nil {
		return nil, err
	}
	local, err := scfg.Eval(file, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrBadService)
	}
	d := &Definition{Header: hdr, Name: name, Config: local}
	// bad names where field was set: the rc.d file, or rc.conf when the
	// value comes from there; just the rc.d file when it is unset.
	bad := func(field, format string, args ...any) error {
		where := file
		if w := local.Where(field); w != "" {
			where = w
		}
		return fmt.Errorf("%s: %s: %w: %s", where, field, ErrBadService, fmt.Sprintf(format, args...))
	}
	if !validName(name) {
		return d, bad("name", "invalid service name %q", name)
	}
	d.Rcvar = local.Get("rcvar")
	d.Enabled = true
	if d.Rcvar != "" {
		on, err := local.YesNo(d.Rcvar)
		if err != nil {
			return d, fmt.Errorf("%w: %w", err, ErrBadService) // enabled, so that it shows failed
		}
		d.Enabled = on
	}
	if err := checkKeys(file, name, prog); err != nil {
		return d, err // after Enabled: an enabled service with a bad key fails
	}
	switch t := Type(local.Get("type")); t {
	case "":
		d.Type = TypeDaemon
		if local.Get("command") == "" {
			return d, bad("command", "no command and no type=builtin")
		}
	case TypeOneshot, TypeDaemon, TypeBuiltin:
		d.Type = t
	default:
		return d, bad("type", "want oneshot, daemon or builtin, got %q", t)
	}
	d.Command = local.Get("command")
	if d.Type == TypeDaemon && d.Command == "" {
		return d, bad("command", "type=%s needs a command", d.Type)
	}
	for _, f := range []struct {
		field string
		dst   *[]string
	}{{name + "_flags", &d.Args}, {"command_args", &d.Args}, {"required_modules", &d.RequiredModules},
		{"required_files", &d.RequiredFiles}, {"start_precmd", &d.StartPrecmd}, {"stop_postcmd", &d.StopPostcmd}} {
		w, err := SplitWords(local.Get(f.field))
		if err != nil {
			return d, bad(f.field, "%v", err)
		}
		*f.dst = append(*f.dst, w...)
	}
	d.Pidfile = local.Get("pidfile")
	d.StopSignal = syscall.SIGTERM
	if s := local.Get("stop_signal"); s != "" {
		sig, err := ParseSignal(s)
		if err != nil {
			return d, bad("stop_signal", "%v", err)
		}
		d.StopSignal = sig
	}
	for _, f := range []struct {
		field string
		dst   *time.Duration
		def   time.Duration
	}{{"start_timeout", &d.StartTimeout, DefaultStartTimeout}, {"stop_timeout", &d.StopTimeout, DefaultStopTimeout},
		{"restart_backoff", &d.RestartBackoff, DefaultRestartBackoff}} {
		*f.dst = f.def
		if s := local.Get(f.field); s != "" {
			v, err := ParseDuration(s)
			if err != nil {
				return d, bad(f.field, "%v", err)
			}
			*f.dst = v
		}
	}
	switch r := RestartPolicy(local.Get("restart")); r {
	case "":
		d.Restart = RestartNo
	case RestartNo, RestartOnFailure, RestartAlways:
		d.Restart = r
	default:
		return d, bad("restart", "want no, on-failure or always, got %q", r)
	}
	if s := local.Get("notify"); s != "" {
		d.Notify = rcconf.CheckYesNo(s)
		if d.Notify && d.Type != TypeDaemon {
			return d, bad("notify", "notify=yes needs type=daemon")
		}
	}
	req, err := SplitWords(local.Get("requisite"))
	if err != nil {
		return d, bad("requisite", "%v", err)
	}
	for _, r := range req {
		if !slices.Contains(hdr.Requires, r) {
			return d, bad("requisite", "%q is not in the REQUIRE header: a requisite must also be required, so that rcorder orders it first", r)
		}
	}
	d.Requisite = req
	d.Settings = settings(d, local)
	return d, nil
}

// settings collects the declarative variables, the rcvar and every
// ${name}_* rc.conf variable.
func settings(d *Definition, c *rcconf.Config) map[string]string {
	s := map[string]string{}
	for k := range knownVars {
		if v, ok := c.Lookup(k); ok {
			s[k] = v.Value
		}
	}
	maps.Copy(s, c.Prefixed(d.Name+"_"))
	if d.Rcvar != "" {
		s[d.Rcvar] = c.Get(d.Rcvar)
	}
	return s
}

// parseScript handles an executable shell script: name and rcvar are taken
// from top-level literal assignments when present.
func parseScript(chain *rcconf.Chain, hdr Header, prog *syntax.File) (*Definition, error) {
	d := &Definition{Header: hdr, Name: path.Base(hdr.Path), Type: TypeScript, StopSignal: syscall.SIGTERM,
		StartTimeout: DefaultStartTimeout, StopTimeout: DefaultStopTimeout, Restart: RestartNo}
	for _, st := range prog.Stmts {
		call, ok := st.Cmd.(*syntax.CallExpr)
		if !ok || len(call.Args) > 0 {
			continue
		}
		for _, as := range call.Assigns {
			if as.Value == nil {
				continue
			}
			lit, err := expand.Literal(nil, as.Value)
			if err != nil || lit == "" || strings.Contains(lit, "$") {
				continue
			}
			switch as.Name.Value {
			case "name":
				d.Name = lit
			case "rcvar":
				d.Rcvar = lit
			}
		}
	}
	cfg, err := chain.ForService(d.Name)
	if err != nil {
		return nil, err
	}
	d.Config = cfg
	d.Enabled = true
	if d.Rcvar != "" {
		on, err := cfg.YesNo(d.Rcvar)
		if err != nil {
			return d, fmt.Errorf("%w: %w", err, ErrBadService)
		}
		d.Enabled = on
	}
	d.Settings = maps.Clone(cfg.Prefixed(d.Name + "_"))
	if d.Rcvar != "" {
		d.Settings[d.Rcvar] = cfg.Get(d.Rcvar)
	}
	return d, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// SplitWords splits an already-evaluated rc.conf value into argv words
// with shell quoting rules ('a b' "c d" e\ f), never expanding anything.
func SplitWords(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader("_ "+s), "")
	if err != nil {
		return nil, fmt.Errorf("cannot split %q into words: %v", s, err)
	}
	if len(f.Stmts) != 1 {
		return nil, fmt.Errorf("cannot split %q into words: not a single word list", s)
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || f.Stmts[0].Redirs != nil {
		return nil, fmt.Errorf("cannot split %q into words: shell operators are not allowed", s)
	}
	var out []string
	for _, w := range call.Args[1:] {
		ok := true
		syntax.Walk(w, func(n syntax.Node) bool {
			switch n.(type) {
			case nil, *syntax.Word, *syntax.Lit, *syntax.SglQuoted, *syntax.DblQuoted:
			default:
				ok = false
			}
			return ok
		})
		if !ok {
			return nil, fmt.Errorf("cannot split %q into words: expansions are not allowed in argv", s)
		}
		v, err := rcconf.LiteralWord(w)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseSignal parses "TERM", "SIGTERM" or "15".
func ParseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %d out of range", n)
		}
		return syscall.Signal(n), nil
	}
	up := strings.ToUpper(s)
	if !strings.HasPrefix(up, "SIG") {
		up = "SIG" + up
	}
	if sig := unix.SignalNum(up); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

// ParseDuration accepts a Go duration ("1.5s", "200ms") or plain seconds
// ("30"), as rc.subr timeouts are written.
func ParseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n < 0 || n > 1e6 {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid duration %q (want seconds or e.g. 500ms)", s)
	}
	return d, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

var _ = fs.ValidPath
