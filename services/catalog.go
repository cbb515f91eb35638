package services

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/keelinit/keel/services/rcconf"
)

// Catalog is one evaluation of a root: the rc.conf chain, the rc.d
// services and their dependency graph. It is immutable once built.
type Catalog struct {
	Chain *rcconf.Chain
	// Defs are the services in rc.d order.
	Defs []*Definition
	// Deps[i] lists the indices into Defs that Defs[i] waits for.
	Deps [][]int
	// Order lists the indices of Defs in rcorder boot order.
	Order []int
	// Problems are the ordering problems (unreadable headers, missing
	// providers, cycles...), as rcorder reports them, located.
	Problems []Finding
	// Warnings are configuration warnings that change nothing by
	// themselves: rc.conf variables that nothing uses.
	Warnings []string
	byName   map[string]int
}

// Lookup returns the index of the named service.
func (c *Catalog) Lookup(name string) (int, bool) {
	i, ok := c.byName[name]
	return i, ok
}

// RequiredBy returns the indices of the services that wait for i.
func (c *Catalog) RequiredBy(i int) []int {
	var out []int
	for j, ds := range c.Deps {
		if slices.Contains(ds, i) {
			out = append(out, j)
		}
	}
	return out
}

// LoadCatalog reads rc.conf and every regular file under etc/rc.d of root.
// seed holds built-in variables visible to rc.conf (keel_runtime_dir...).
// An rc.conf error is returned as an error; a bad rc.d file becomes a
// Definition with Err set, so that the rest of the appliance still boots.
// A file is a legacy shell script when it has an execute bit and holds
// more than assignments (an embed.FS carries no execute bits, so the
// embedded appliance is declarative only). Symbolic links are followed;
// dot files and non-regular files are ignored.
func LoadCatalog(root fs.FS, seed map[string]string) (*Catalog, error) {
	chain, err := rcconf.LoadNamed(root, seed, HostName(seed["keel_root"]))
	if err != nil {
		return nil, err
	}
	ents, err := fs.ReadDir(root, RCDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", RCDir, err)
	}
	var paths []string
	modes := map[string]fs.FileMode{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := path.Join(RCDir, e.Name())
		info, err := fs.Stat(root, p) // follows symbolic links
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		paths = append(paths, p)
		modes[p] = info.Mode()
	}
	scripts, hdrs, herrs := scanHeaders(root, paths)
	c := &Catalog{Chain: chain, byName: map[string]int{}}
	for _, e := range herrs {
		c.Problems = append(c.Problems, Finding{Severity: SeverityError, Text: "rcorder: " + e.Error()})
	}
	refs := map[string]bool{}
	for _, h := range hdrs {
		data, err := fs.ReadFile(root, h.Path)
		var d *Definition
		if err == nil {
			referencedVars(h.Path, data, refs)
			d, err = ParseDefinition(chain, h, data, modes[h.Path]&0o111 != 0)
		}
		if err != nil {
			if d == nil {
				d = &Definition{Header: h, Name: path.Base(h.Path), Enabled: true}
			}
			if d.Type == "" {
				d.Type = TypeOneshot
			}
			if d.Settings == nil {
				d.Settings = map[string]string{}
			}
			d.Err = err
		}
		if j, dup := c.byName[d.Name]; dup {
			d = &Definition{Header: h, Name: path.Base(h.Path) + "@" + path.Base(h.Path), Type: TypeOneshot, Enabled: true, Settings: map[string]string{},
				Err: fmt.Errorf("%s: %w: name %q already used by %s", chain.Name(h.Path), ErrBadService, d.Name, chain.Name(c.Defs[j].Path))}
		}
		c.byName[d.Name] = len(c.Defs)
		c.Defs = append(c.Defs, d)
	}
	c.Warnings = unknownVars(chain, c.Defs, refs)
	deps, order, printed, problems := orderGraph(scripts, chain.Name)
	c.Deps, c.Order = deps, order
	c.Problems = append(c.Problems, problems...)
	for i, ok := range printed {
		if !ok && c.Defs[i].Enabled {
			d := *c.Defs[i]
			d.Enabled, d.SkipReason = false, "keyword "+NoStartKeyword
			c.Defs[i] = &d
		}
	}
	for _, i := range BreakCycles(deps) {
		d := *c.Defs[i]
		if d.Err == nil {
			d.Err = fmt.Errorf("%s: dependency cycle", chain.Name(d.Path))
		}
		c.Defs[i] = &d
		c.Deps[i] = nil
	}
	return c, nil
}

// HostName returns the function that names a file of an appliance root
// in errors: its host path under rootDir, so that a message names the
// file the operator has to edit; nil (the relative path) when rootDir is
// "" (the embedded appliance).
func HostName(rootDir string) func(string) string {
	if rootDir == "" {
		return nil
	}
	return func(p string) string { return filepath.Join(rootDir, filepath.FromSlash(p)) }
}

// DOT renders the service graph: an edge A -> B means A waits for B.
// Disabled services are grey, failed-to-parse ones red.
func (c *Catalog) DOT() string {
	var sb strings.Builder
	sb.WriteString("digraph keel {\n\trankdir=LR;\n")
	for _, d := range c.Defs {
		attr := ""
		switch {
		case d.Err != nil:
			attr = ` color=red`
		case !d.Enabled:
			attr = ` style=dashed color=grey`
		}
		fmt.Fprintf(&sb, "\t%q [label=%q%s];\n", d.Name, d.Name+"\\n"+string(d.Type), attr)
	}
	for i, ds := range c.Deps {
		for _, j := range ds {
			fmt.Fprintf(&sb, "\t%q -> %q;\n", c.Defs[i].Name, c.Defs[j].Name)
		}
	}
	sb.WriteString("}\n")
	return sb.String()
}
