package modules

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteStat writes rows as a kldstat-like table: a header line, then one
// line per row with id and refs right-aligned, then name, version, kind,
// state, load time (UTC, RFC 3339) and dependencies, left-aligned ("-" when
// empty). It returns the first write error.
func WriteStat(w io.Writer, rows []Stat) error {
	table := [][]string{{"Id", "Refs", "Name", "Version", "Kind", "State", "Loaded", "Depends"}}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range rows {
		loaded := ""
		if !r.LoadedAt.IsZero() {
			loaded = r.LoadedAt.UTC().Format(time.RFC3339)
		}
		table = append(table, []string{strconv.Itoa(r.ID), strconv.Itoa(r.Refs), r.Name,
			strconv.Itoa(r.Version), dash(string(r.Kind)), dash(string(r.State)), dash(loaded),
			dash(strings.Join(r.DependsOn, ","))})
	}
	width := make([]int, len(table[0]))
	for _, row := range table {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, row := range table {
		for i, c := range row {
			switch {
			case i < 2:
				fmt.Fprintf(&b, "%*s ", width[i], c)
			case i == len(row)-1:
				b.WriteString(c)
			default:
				fmt.Fprintf(&b, "%-*s ", width[i], c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
