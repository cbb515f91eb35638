package services

import (
	"log/slog"
	"slices"
	"strings"
)

// Hard reports whether service i's wait for service d is a hard
// requirement: i lists, in its requisite key, a provision of d. Every
// other edge of the catalog (a REQUIRE, a BEFORE) only orders.
func (c *Catalog) Hard(i, d int) bool {
	req := c.Defs[i].Requisite
	if len(req) == 0 || !slices.Contains(c.Deps[i], d) {
		return false
	}
	for _, p := range c.Defs[d].Provides {
		if slices.Contains(req, p) {
			return true
		}
	}
	return false
}

// names returns the service names of the indices is.
func (c *Catalog) names(is []int) []string {
	out := make([]string, len(is))
	for k, i := range is {
		out[k] = c.Defs[i].Name
	}
	return out
}

// startedAfterFailed records that u started although the requirements
// names (ordering only) had failed: the status reason says so, as
// FreeBSD rc's would in its console output, and the log warns.
func (u *unit) startedAfterFailed(names []string) {
	list := strings.Join(names, ", ")
	u.mu.Lock()
	if u.state == StateRunning || u.state == StateExited {
		u.reason = "started after failed " + list
	}
	u.mu.Unlock()
	u.logf(slog.LevelWarn, "started after failed %s (REQUIRE orders; list it in requisite to make it a hard requirement)", list)
}
