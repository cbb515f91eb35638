package services

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/keelinit/keel/services/rcconf"
)

// referencedVars adds to refs every variable an rc.d file assigns or
// expands (${foo_socket}, : ${foo_enable:=NO}), whether the file is
// declarative or a legacy script. A file that does not parse adds
// nothing; its error is reported elsewhere.
func referencedVars(file string, data []byte, refs map[string]bool) {
	prog, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(string(data)), file)
	if err != nil {
		return
	}
	syntax.Walk(prog, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ParamExp:
			if n.Param != nil {
				refs[n.Param.Value] = true
			}
		case *syntax.Assign:
			if n.Name != nil {
				refs[n.Name.Value] = true
			}
		}
		return true
	})
}

// unknownVars returns a warning for every variable that rc.conf (any
// file of rc_conf_files) or rc.conf.d/<service> sets but that no service
// and not keeld uses: not set by the defaults (etc/defaults/, where every
// knob of keeld and its builtins is declared, as in FreeBSD), not seeded
// by keeld, not an rcvar or a service's ${name}_enable or ${name}_flags,
// and not assigned or expanded by any rc.d file. Each warning names the
// file and line and, when one is close, the variable meant
// ("pktgen_enabel" → "pktgen_enable").
func unknownVars(ch *rcconf.Chain, defs []*Definition, refs map[string]bool) []string {
	known := maps.Clone(refs)
	for _, v := range ch.Global().Vars() {
		if v.File == "" { // seeded by keeld
			known[v.Name] = true
		}
	}
	defaults := ch.Name(path.Dir(rcconf.DefaultsFile)) + "/"
	for f, names := range ch.Assigned {
		if strings.HasPrefix(f, defaults) {
			for n := range names {
				known[n] = true
			}
		}
	}
	known["rc_conf_files"] = true
	for _, d := range defs {
		known[d.Name+"_enable"], known[d.Name+"_flags"] = true, true
		if d.Rcvar != "" {
			known[d.Rcvar] = true
		}
	}
	candidates := slices.Sorted(maps.Keys(known))
	type site struct {
		file string
		line int
		name string
	}
	var sites []site
	for f, names := range ch.Assigned {
		if strings.HasPrefix(f, defaults) {
			continue
		}
		for n, line := range names {
			sites = append(sites, site{f, line, n})
		}
	}
	seen := map[string]bool{}
	for _, d := range defs {
		if seen[d.Name] {
			continue
		}
		seen[d.Name] = true
		cfg, err := ch.ForService(d.Name)
		if err != nil {
			continue // reported as the service's error
		}
		for _, v := range cfg.Vars() {
			if v.File == ch.Name(rcconf.ServiceDir+"/"+d.Name) {
				sites = append(sites, site{v.File, v.Line, v.Name})
			}
		}
	}
	slices.SortFunc(sites, func(a, b site) int {
		if c := strings.Compare(a.file, b.file); c != 0 {
			return c
		}
		return a.line - b.line
	})
	var out []string
	for _, s := range sites {
		if known[s.name] {
			continue
		}
		hint := ""
		if m, ok := rcconf.Suggest(s.name, candidates); ok {
			hint = fmt.Sprintf(" (did you mean %s?)", m)
		}
		out = append(out, fmt.Sprintf("%s:%d: %s: unknown variable, used by no service and not by keeld%s", s.file, s.line, s.name, hint))
	}
	return out
}
