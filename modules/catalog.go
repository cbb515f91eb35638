package modules

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// catalog is a set of module descriptors keyed by name. Entries are
// immutable once added; the catalog is safe for concurrent use.
type catalog struct {
	mu   sync.RWMutex
	mods map[string]Module
}

func newCatalog() *catalog { return &catalog{mods: make(map[string]Module)} }

// global is the compile-time catalog filled by Register.
var global = newCatalog()

// Register adds m to the global compile-time catalog. It is meant to be
// called from init(), in the style of containerd's plugin registry:
//
//	func init() { modules.Register(modules.Module{Name: "aesni", ...}) }
//
// Register copies m's slices, so the caller may not change the registered
// descriptor afterwards. Dependencies may name modules registered later (init
// order across packages is not fixed); they are resolved at load time.
//
// Register panics on programmer errors: an empty name or one containing
// white space (kld_list could not name it), a duplicate name, a dependency
// (hard, Pre or Post) on the module itself, an empty or repeated dependency
// name, a negative version, or a dependency whose Max is below its Min.
// Register is safe for concurrent use.
func Register(m Module) {
	if err := global.add(m); err != nil {
		panic("modules: Register: " + err.Error())
	}
}

// Registered returns a copy of the global catalog sorted by name.
func Registered() []Module { return global.list() }

// validate reports the programmer errors Register panics on.
func validate(m Module) error {
	if m.Name == "" {
		return fmt.Errorf("module with empty name")
	}
	if strings.IndexFunc(m.Name, unicode.IsSpace) >= 0 {
		return fmt.Errorf("module name %q contains white space", m.Name)
	}
	if m.Version < 0 {
		return fmt.Errorf("module %s: negative version %d", m.Name, m.Version)
	}
	seen := make(map[string]bool, len(m.Depends))
	for _, d := range m.Depends {
		switch {
		case d.Name == "":
			return fmt.Errorf("module %s: dependency with empty name", m.Name)
		case d.Name == m.Name:
			return fmt.Errorf("module %s: depends on itself", m.Name)
		case seen[d.Name]:
			return fmt.Errorf("module %s: dependency %s listed twice", m.Name, d.Name)
		case d.Min < 0 || d.Max < 0:
			return fmt.Errorf("module %s: dependency %s: negative version bound", m.Name, d.Name)
		case d.Max != 0 && d.Max < d.Min:
			return fmt.Errorf("module %s: dependency %s: max %d below min %d", m.Name, d.Name, d.Max, d.Min)
		}
		seen[d.Name] = true
	}
	for _, soft := range []struct {
		field string
		names []string
	}{{"pre", m.Pre}, {"post", m.Post}} {
		field := soft.field
		for _, n := range soft.names {
			switch {
			case n == "":
				return fmt.Errorf("module %s: empty %s name", m.Name, field)
			case n == m.Name:
				return fmt.Errorf("module %s: soft %s dependency on itself", m.Name, field)
			}
		}
	}
	return nil
}

func (c *catalog) add(m Module) error {
	if err := validate(m); err != nil {
		return err
	}
	m.Depends = slices.Clone(m.Depends)
	m.Pre = slices.Clone(m.Pre)
	m.Post = slices.Clone(m.Post)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.mods[m.Name]; dup {
		return fmt.Errorf("duplicate module name %q", m.Name)
	}
	c.mods[m.Name] = m
	return nil
}

func (c *catalog) get(name string) (Module, bool) {
	c.mu.RLock()
	m, ok := c.mods[name]
	c.mu.RUnlock()
	return m, ok
}

func (c *catalog) names() []string {
	c.mu.RLock()
	out := make([]string, 0, len(c.mods))
	for n := range c.mods {
		out = append(out, n)
	}
	c.mu.RUnlock()
	slices.Sort(out)
	return out
}

func (c *catalog) list() []Module {
	c.mu.RLock()
	out := make([]Module, 0, len(c.mods))
	for _, m := range c.mods {
		m.Depends = slices.Clone(m.Depends)
		m.Pre = slices.Clone(m.Pre)
		m.Post = slices.Clone(m.Post)
		out = append(out, m)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Module) int { return strings.Compare(a.Name, b.Name) })
	return out
}
