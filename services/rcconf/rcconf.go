// Package rcconf evaluates FreeBSD-style rc.conf files as POSIX shell
// variable assignments, without executing anything.
//
// The layering follows rc(8): defaults/rc.conf, then rc.conf, then
// rc.conf.local, then (per service) rc.conf.d/<service>. Every file is parsed
// with mvdan.cc/sh/v3/syntax in POSIX mode and its assignments are expanded
// with mvdan.cc/sh/v3/expand, so quoting, ${var} and ${var:-default} work
// across files. Any statement that is not a plain assignment, and any
// command or process substitution, is an error naming file:line:col.
package rcconf

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// ErrStatement is wrapped by errors for statements that are not plain
// variable assignments (commands, functions, redirections, pipelines...).
var ErrStatement = errors.New("only variable assignments are allowed")

// ErrSubstitution is wrapped by errors for command or process substitution,
// which rc.conf evaluation never performs.
var ErrSubstitution = errors.New("command substitution is not allowed")

// ErrSyntax is wrapped by shell syntax errors.
var ErrSyntax = errors.New("shell syntax error")

// Var is one evaluated variable with the place it was last assigned.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	File  string `json:"file,omitempty"`
	Line  int    `json:"line,omitempty"`
}

// Config is an immutable-by-convention set of evaluated variables. The
// methods that read are safe for concurrent use; Eval returns a new Config
// and never modifies its receiver.
type Config struct {
	vars map[string]Var
}

// seedFile is the Var.File of seeded variables.
const seedFile = "(builtin)"

// New returns an empty Config, optionally seeded with name/value pairs
// (e.g. built-in variables such as keel_runtime_dir).
func New(seed map[string]string) *Config {
	c := &Config{vars: make(map[string]Var, len(seed))}
	for k, v := range seed {
		c.vars[k] = Var{Name: k, Value: v, File: seedFile}
	}
	return c
}

// Clone returns an independent copy of c.
func (c *Config) Clone() *Config {
	if c == nil {
		return New(nil)
	}
	return &Config{vars: maps.Clone(c.vars)}
}

// Get returns the value of name, or "" when unset.
func (c *Config) Get(name string) string {
	if c == nil {
		return ""
	}
	return c.vars[name].Value
}

// Lookup returns the variable and whether it is set.
func (c *Config) Lookup(name string) (Var, bool) {
	if c == nil {
		return Var{}, false
	}
	v, ok := c.vars[name]
	return v, ok
}

// Bool reports whether name is set to a checkyesno truth value.
func (c *Config) Bool(name string) bool { return CheckYesNo(c.Get(name)) }

// Vars returns every variable sorted by name.
func (c *Config) Vars() []Var {
	if c == nil {
		return nil
	}
	out := slices.Collect(maps.Values(c.vars))
	slices.SortFunc(out, func(a, b Var) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Prefixed returns the name=value pairs whose name starts with prefix.
func (c *Config) Prefixed(prefix string) map[string]string {
	out := map[string]string{}
	if c == nil {
		return out
	}
	for k, v := range c.vars {
		if strings.HasPrefix(k, prefix) {
			out[k] = v.Value
		}
	}
	return out
}

// ErrNotYesNo is wrapped by YesNo's error for a value that is neither a
// truth value nor a false one.
var ErrNotYesNo = errors.New("is not set properly - see rc.conf(5)")

// YesNo is rc.subr's checkyesno with its warning. name's value is true
// for YES, TRUE, ON and 1 and false for NO, FALSE, OFF and 0, in any
// case; unset or empty is false. Anything else is an error whose text is
// FreeBSD's: "WARNING: $name is not set properly - see rc.conf(5).",
// prefixed with the file and line that set it; FreeBSD then treats the
// service as disabled, silently but for that line.
func (c *Config) YesNo(name string) (bool, error) {
	v, ok := c.Lookup(name)
	switch strings.ToLower(strings.TrimSpace(v.Value)) {
	case "yes", "true", "on", "1":
		return true, nil
	case "no", "false", "off", "0", "":
		return false, nil
	}
	where := ""
	if ok && v.File != "" {
		where = c.Where(name) + ": "
	}
	return false, fmt.Errorf("%sWARNING: $%s %w (%q)", where, name, ErrNotYesNo, v.Value)
}

// Where returns "file:line" of the assignment that set name, "file" when
// the line is unknown, and "" when name is unset or was seeded (it comes
// from no file).
func (c *Config) Where(name string) string {
	v, ok := c.Lookup(name)
	switch {
	case !ok || v.File == "" || v.File == seedFile:
		return ""
	case v.Line == 0:
		return v.File
	}
	return fmt.Sprintf("%s:%d", v.File, v.Line)
}

// Errorf returns an error about the variable name: "file:line: name: msg"
// with the place that set it (see Where), or "name: msg" without one.
// format and args are fmt.Errorf's (%w wraps).
func (c *Config) Errorf(name, format string, args ...any) error {
	where := name + ": "
	if w := c.Where(name); w != "" {
		where = w + ": " + where
	}
	return fmt.Errorf("%s%w", where, fmt.Errorf(format, args...))
}

// CheckYesNo implements rc.subr's checkyesno: YES, TRUE, ON and 1 are true,
// case-insensitively, after trimming blanks; anything else is false.
func CheckYesNo(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "yes", "true", "on", "1":
		return true
	}
	return false
}

// Eval parses src (named file in errors) and evaluates its assignments on
// top of a copy of c, returning the new Config. c is not modified. A file
// with an error changes nothing.
func (c *Config) Eval(file string, src []byte) (*Config, error) {
	prog, err := parse(file, src)
	if err != nil {
		return nil, err
	}
	if err := CheckAssignments(file, prog); err != nil {
		return nil, err
	}
	s := &sourcer{out: c.Clone()}
	for _, st := range prog.Stmts {
		if err := s.assign(file, st.Cmd.(*syntax.CallExpr).Assigns); err != nil {
			return nil, err
		}
	}
	return s.out, nil
}

// CheckAssignments verifies that prog holds only plain assignments without
// command or process substitution. Errors are "file:line:col: ...".
func CheckAssignments(file string, prog *syntax.File) error {
	for _, st := range prog.Stmts {
		if err := checkStmt(file, st); err != nil {
			return err
		}
	}
	return nil
}

func posErr(file string, p syntax.Pos, err error, format string, args ...any) error {
	return fmt.Errorf("%s:%d:%d: %w: %s", file, p.Line(), p.Col(), err, fmt.Sprintf(format, args...))
}

func checkStmt(file string, st *syntax.Stmt) error {
	if st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 {
		return posErr(file, st.Pos(), ErrStatement, "statement modifiers and redirections")
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Cmd == nil {
		what := "statement"
		if st.Cmd != nil {
			what = fmt.Sprintf("%T", st.Cmd)
			what = strings.TrimPrefix(what, "*syntax.")
		}
		return posErr(file, st.Pos(), ErrStatement, "found %s", what)
	}
	if len(call.Args) > 0 {
		return posErr(file, call.Args[0].Pos(), ErrStatement, "command %q", wordText(call.Args[0]))
	}
	for _, as := range call.Assigns {
		if as.Array != nil || as.Index != nil || as.Naked {
			return posErr(file, as.Pos(), ErrStatement, "array assignment to %s", as.Name.Value)
		}
		if as.Value == nil {
			continue
		}
		var bad error
		syntax.Walk(as.Value, func(n syntax.Node) bool {
			if bad != nil {
				return false
			}
			switch n := n.(type) {
			case *syntax.CmdSubst:
				bad = posErr(file, n.Pos(), ErrSubstitution, "in assignment to %s", as.Name.Value)
			case *syntax.ProcSubst:
				bad = posErr(file, n.Pos(), ErrSubstitution, "process substitution in assignment to %s", as.Name.Value)
			}
			return bad == nil
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

func wordText(w *syntax.Word) string {
	if lit := w.Lit(); lit != "" {
		return lit
	}
	var sb strings.Builder
	_ = syntax.NewPrinter().Print(&sb, w)
	return sb.String()
}

// environ adapts a Config to expand.WriteEnviron. Only variables of the
// Config are visible: the process environment never leaks in.
type environ struct{ c *Config }

func (e *environ) Get(name string) expand.Variable {
	v, ok := e.c.vars[name]
	if !ok {
		return expand.Variable{}
	}
	return expand.Variable{Set: true, Kind: expand.String, Str: v.Value}
}

func (e *environ) Each(fn func(name string, vr expand.Variable) bool) {
	for k, v := range e.c.vars {
		if !fn(k, expand.Variable{Set: true, Kind: expand.String, Str: v.Value}) {
			return
		}
	}
}

func (e *environ) Set(name string, vr expand.Variable) error {
	if !vr.IsSet() {
		delete(e.c.vars, name)
		return nil
	}
	e.c.vars[name] = Var{Name: name, Value: vr.String(), File: "(expansion)"}
	return nil
}

// ServiceDir is the directory of per-service overrides, relative to root.
const ServiceDir = "etc/rc.conf.d"

// Chain is the evaluated global layering plus access to per-service
// overrides. It is immutable once loaded and safe for concurrent use.
type Chain struct {
	fsys   fs.FS
	name   func(string) string
	global *Config
	// Sources lists the files that were read, in order, relative to the
	// root.
	Sources []string
	// Assigned maps each file read, by its Name, to the variables it
	// assigns, with the line of the first assignment.
	Assigned map[string]map[string]int
}

// Load is LoadNamed with files named by their path relative to fsys's
// root.
func Load(fsys fs.FS, seed map[string]string) (*Chain, error) {
	return LoadNamed(fsys, seed, nil)
}

// LoadNamed evaluates seed, then rc(8)'s layering: DefaultsFile, then
// source_rc_confs over rc_conf_files (DefaultRCConfFiles unless the
// defaults set it), each file relative to fsys's root. Missing files are
// skipped (an empty appliance is valid); any other read error, syntax
// error or statement that is not understood is an error, and a file with
// an error changes nothing. See sourcer for what is understood.
//
// name maps a path relative to the root to the name that errors and
// Var.File use (the host path when the root is a directory, so that an
// error names the file the operator has to edit); nil keeps the
// relative path.
func LoadNamed(fsys fs.FS, seed map[string]string, name func(string) string) (*Chain, error) {
	if name == nil {
		name = func(p string) string { return p }
	}
	s := &sourcer{fsys: fsys, name: name, out: New(seed), assigned: map[string]map[string]int{}}
	if _, err := s.file(DefaultsFile, 0); err != nil {
		return nil, err
	}
	if err := s.sourceRCConfs(); err != nil {
		return nil, err
	}
	return &Chain{fsys: fsys, name: name, global: s.out, Sources: s.sources, Assigned: s.assigned}, nil
}

// Name returns the name of the file p (relative to the root) in errors
// and Var.File.
func (ch *Chain) Name(p string) string { return ch.name(p) }

// Global returns the configuration common to all services.
func (ch *Chain) Global() *Config { return ch.global }

// ForService returns the global configuration with rc.conf.d/<name>
// evaluated on top, if that file exists (load_rc_config semantics).
func (ch *Chain) ForService(name string) (*Config, error) {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return ch.global, nil
	}
	p := ServiceDir + "/" + name
	data, err := fs.ReadFile(ch.fsys, p)
	if errors.Is(err, fs.ErrNotExist) {
		return ch.global, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ch.name(p), err)
	}
	return ch.global.Eval(ch.name(p), data)
}

// unescapeWord returns a copy of w whose unquoted literal parts have had
// their backslash escapes removed (x\ y is "x y"), which expand.Literal
// leaves in place.
func unescapeWord(w *syntax.Word) *syntax.Word {
	cp := *w
	cp.Parts = make([]syntax.WordPart, len(w.Parts))
	for i, p := range w.Parts {
		lit, ok := p.(*syntax.Lit)
		if !ok || !strings.Contains(lit.Value, "\\") {
			cp.Parts[i] = p
			continue
		}
		var sb strings.Builder
		s := lit.Value
		for j := 0; j < len(s); j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				if s[j] == '\n' { // line continuation
					continue
				}
			}
			sb.WriteByte(s[j])
		}
		l := *lit
		l.Value = sb.String()
		cp.Parts[i] = &l
	}
	return &cp
}

// LiteralWord returns the value of a single shell word with quotes and
// backslash escapes removed and nothing expanded (no environment).
func LiteralWord(w *syntax.Word) (string, error) {
	return expand.Literal(nil, unescapeWord(w))
}
