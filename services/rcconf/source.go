package rcconf

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// DefaultsFile is rc(8)'s defaults file, relative to the root of an
// fs.FS. It is read first; it sets rc_conf_files.
const DefaultsFile = "etc/defaults/rc.conf"

// DefaultRCConfFiles is rc_conf_files when the defaults file leaves it
// unset: FreeBSD's value.
const DefaultRCConfFiles = "/etc/rc.conf /etc/rc.conf.local"

// maxSourceDepth bounds nested ". file" sourcing.
const maxSourceDepth = 8

// sourcer evaluates the files of the global rc.conf chain. Beyond plain
// assignments it understands the few shell constructs that FreeBSD's
// own defaults/rc.conf and rc.conf files use, without running anything:
//
//   - ". FILE" (or "source FILE") evaluates FILE, an appliance path, with
//     the same rules;
//   - "if TEST; then ...; [elif ...;] [else ...;] fi" where TEST is
//     "[ ... ]" or "test ..." with -z, -n, -r, -f, -e, = or != on words
//     without command substitution;
//   - the definition of the function source_rc_confs, which FreeBSD's
//     defaults/rc.conf ends with: Load implements its semantics itself
//     (every file of rc_conf_files sourced once, in order, then again for
//     a redefined rc_conf_files), so the body is not evaluated.
//
// Anything else is an error naming the file, line and column.
type sourcer struct {
	fsys fs.FS
	// name gives the name of a file (relative to fsys's root) in errors
	// and in Var.File: see LoadNamed.
	name    func(string) string
	out     *Config
	sources []string
	// assigned records, per file, the variables it assigns and the line
	// of the first assignment (for Chain.Assigned).
	assigned map[string]map[string]int
}

// file evaluates the appliance file p (relative to the fs root) if it
// exists. It reports whether it did.
func (s *sourcer) file(p string, depth int) (bool, error) {
	data, err := fs.ReadFile(s.fsys, p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", s.name(p), err)
	}
	if depth > maxSourceDepth {
		return false, fmt.Errorf("%s: %w: sourced files nested more than %d deep", s.name(p), ErrStatement, maxSourceDepth)
	}
	name := s.name(p)
	prog, err := parse(name, data)
	if err != nil {
		return false, err
	}
	// Evaluate on a copy, so that a file with an error changes nothing.
	saved := s.out.Clone()
	if err := s.stmts(name, prog.Stmts, depth); err != nil {
		s.out = saved
		return false, err
	}
	s.sources = append(s.sources, p)
	return true, nil
}

func parse(file string, src []byte) (*syntax.File, error) {
	prog, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX), syntax.KeepComments(false)).
		Parse(strings.NewReader(string(src)), file)
	if err != nil {
		var pe syntax.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d:%d: %w: %s", file, pe.Pos.Line(), pe.Pos.Col(), ErrSyntax, pe.Text)
		}
		return nil, fmt.Errorf("%s: %w: %v", file, ErrSyntax, err)
	}
	return prog, nil
}

func (s *sourcer) stmts(file string, sts []*syntax.Stmt, depth int) error {
	for _, st := range sts {
		if err := s.stmt(file, st, depth); err != nil {
			return err
		}
	}
	return nil
}

func (s *sourcer) stmt(file string, st *syntax.Stmt, depth int) error {
	if st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 {
		return posErr(file, st.Pos(), ErrStatement, "statement modifiers and redirections")
	}
	switch c := st.Cmd.(type) {
	case *syntax.FuncDecl:
		if c.Name != nil && c.Name.Value == "source_rc_confs" {
			return nil // Load implements it; see sourcer
		}
	case *syntax.IfClause:
		return s.ifClause(file, c, depth)
	case *syntax.CallExpr:
		if len(c.Args) == 0 {
			if err := checkStmt(file, st); err != nil {
				return err
			}
			return s.assign(file, c.Assigns)
		}
		if w := c.Args[0].Lit(); (w == "." || w == "source") && len(c.Args) == 2 && len(c.Assigns) == 0 {
			p, err := s.word(file, c.Args[1])
			if err != nil {
				return err
			}
			found, err := s.file(strings.TrimPrefix(path.Clean("/"+p), "/"), depth+1)
			if err != nil {
				return fmt.Errorf("%s:%d:%d: . %s: %w", file, c.Args[1].Pos().Line(), c.Args[1].Pos().Col(), p, err)
			}
			if !found {
				return posErr(file, c.Args[1].Pos(), ErrStatement, ". %s: no such file", p)
			}
			return nil
		}
	}
	return checkStmt(file, st) // the error for what is not understood
}

func (s *sourcer) ifClause(file string, c *syntax.IfClause, depth int) error {
	for ; c != nil; c = c.Else {
		if c.ThenPos.IsValid() { // if or elif: a condition
			ok, err := s.test(file, c)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		return s.stmts(file, c.Then, depth)
	}
	return nil
}

// test evaluates an if clause's condition: one "[ ... ]" or "test ..."
// command.
func (s *sourcer) test(file string, c *syntax.IfClause) (bool, error) {
	bad := func(what string) (bool, error) {
		return false, posErr(file, c.Pos(), ErrStatement, "if condition %s (only [ ... ] or test with -z, -n, -r, -f, -e, = and != is understood)", what)
	}
	if len(c.Cond) != 1 || c.Cond[0].Negated || len(c.Cond[0].Redirs) > 0 {
		return bad("is not a single test")
	}
	call, ok := c.Cond[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return bad("is not a single test")
	}
	var args []string
	for _, w := range call.Args {
		v, err := s.word(file, w)
		if err != nil {
			return false, err
		}
		args = append(args, v)
	}
	switch args[0] {
	case "[":
		if args[len(args)-1] != "]" {
			return bad("lacks its closing ]")
		}
		args = args[1 : len(args)-1]
	case "test":
		args = args[1:]
	default:
		return bad(fmt.Sprintf("runs %q", args[0]))
	}
	exists := func(p string) bool {
		fi, err := fs.Stat(s.fsys, strings.TrimPrefix(path.Clean("/"+p), "/"))
		return err == nil && (args[0] != "-f" || fi.Mode().IsRegular())
	}
	switch {
	case len(args) == 2 && args[0] == "-z":
		return args[1] == "", nil
	case len(args) == 2 && args[0] == "-n":
		return args[1] != "", nil
	case len(args) == 2 && (args[0] == "-r" || args[0] == "-f" || args[0] == "-e"):
		return exists(args[1]), nil
	case len(args) == 3 && args[1] == "=":
		return args[0] == args[2], nil
	case len(args) == 3 && args[1] == "!=":
		return args[0] != args[2], nil
	}
	return bad(fmt.Sprintf("%q", strings.Join(args, " ")))
}

// word expands one word in the configuration so far, refusing command
// and process substitution.
func (s *sourcer) word(file string, w *syntax.Word) (string, error) {
	var bad error
	syntax.Walk(w, func(n syntax.Node) bool {
		switch n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			bad = posErr(file, n.Pos(), ErrSubstitution, "in a test or . argument")
		}
		return bad == nil
	})
	if bad != nil {
		return "", bad
	}
	return expand.Literal(&expand.Config{Env: &environ{c: s.out}}, unescapeWord(w))
}

func (s *sourcer) assign(file string, as []*syntax.Assign) error {
	env := &environ{c: s.out}
	cfg := &expand.Config{Env: env}
	for _, a := range as {
		val := ""
		if a.Value != nil {
			v, err := expand.Literal(cfg, unescapeWord(a.Value))
			if err != nil {
				return fmt.Errorf("%s:%d:%d: %s: %w", file, a.Pos().Line(), a.Pos().Col(), a.Name.Value, err)
			}
			val = v
		}
		if a.Append {
			val = s.out.Get(a.Name.Value) + val
		}
		line := int(a.Pos().Line())
		s.out.vars[a.Name.Value] = Var{Name: a.Name.Value, Value: val, File: file, Line: line}
		if s.assigned != nil {
			m := s.assigned[file]
			if m == nil {
				m = map[string]int{}
				s.assigned[file] = m
			}
			if _, seen := m[a.Name.Value]; !seen {
				m[a.Name.Value] = line
			}
		}
	}
	return nil
}

// sourceRCConfs is FreeBSD's source_rc_confs: every file of
// rc_conf_files that was not sourced yet, in order, then the same again
// for rc_conf_files as those files may have redefined it. Missing files
// are skipped ([ -r $i ]).
func (s *sourcer) sourceRCConfs() error {
	done := map[string]bool{}
	for range 2 {
		list, ok := s.out.Lookup("rc_conf_files")
		files := DefaultRCConfFiles
		if ok {
			files = list.Value
		}
		for _, f := range strings.Fields(files) {
			if done[f] {
				continue
			}
			done[f] = true
			if _, err := s.file(strings.TrimPrefix(path.Clean("/"+f), "/"), 1); err != nil {
				return err
			}
		}
	}
	return nil
}
