package rcorder

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/encoding"
	"gonum.org/v1/gonum/graph/encoding/dot"
	"gonum.org/v1/gonum/graph/multi"
)

// WriteList writes the printed scripts, one path per line (plain rcorder).
func (r *Result) WriteList(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, i := range r.Printed {
		bw.WriteString(r.Scripts[i].Path)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// WriteLevels writes the printed scripts one level per line, separated by
// single spaces (rcorder -p). Levels with no printed script are omitted.
func (r *Result) WriteLevels(w io.Writer) error {
	bw := bufio.NewWriter(w)
	prev := -1
	for _, i := range r.Printed {
		switch l := r.Levels[i]; {
		case prev == -1:
		case l != prev:
			bw.WriteByte('\n')
		default:
			bw.WriteByte(' ')
		}
		prev = r.Levels[i]
		bw.WriteString(r.Scripts[i].Path)
	}
	if prev != -1 {
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// WriteProblems writes every problem, one per line, each preceded by
// prefix (the CLI uses "rcorder: "); a cycle is followed by a line naming
// the header line that breaks it.
func (r *Result) WriteProblems(w io.Writer, prefix string) error {
	bw := bufio.NewWriter(w)
	for i := range r.Problems {
		p := &r.Problems[i]
		bw.WriteString(prefix)
		bw.WriteString(p.Text)
		bw.WriteByte('\n')
		if p.Kind == Cycle {
			bw.WriteString(prefix)
			bw.WriteString(p.BreakText())
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// LevelGroups groups the printed scripts' paths by level, in order.
func (r *Result) LevelGroups() [][]string {
	var out [][]string
	prev := -1
	for _, i := range r.Printed {
		if r.Levels[i] != prev {
			out = append(out, nil)
			prev = r.Levels[i]
		}
		out[len(out)-1] = append(out[len(out)-1], r.Scripts[i].Path)
	}
	return out
}

type jsonFile struct {
	Path     string   `json:"path"`
	Level    int      `json:"level"`
	Provides []string `json:"provides"`
	Requires []string `json:"requires"`
	Before   []string `json:"before"`
	Keywords []string `json:"keywords"`
	InCycle  bool     `json:"in_cycle,omitempty"`
}

type jsonEdge struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	Line        int    `json:"line,omitempty"`
	ProvideLine int    `json:"provide_line,omitempty"`
	InCycle     bool   `json:"in_cycle,omitempty"`
}

type jsonLine struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"`
	Text string `json:"text"`
}

type jsonProblem struct {
	Kind     string    `json:"kind"`
	Severity string    `json:"severity"`
	File     string    `json:"file,omitempty"`
	Line     int       `json:"line,omitempty"`
	Name     string    `json:"name,omitempty"`
	Cycle    []string  `json:"cycle,omitempty"`
	Break    *jsonLine `json:"break,omitempty"`
	Message  string    `json:"message"`
}

type jsonResult struct {
	Files    []jsonFile    `json:"files"`
	Levels   [][]string    `json:"levels"`
	Edges    []jsonEdge    `json:"edges"`
	Problems []jsonProblem `json:"problems"`
	Exit     int           `json:"exit"`
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// WriteJSON writes the result as one JSON object (rcorder -j): "files"
// (printed scripts in order, with level and header), "levels" (printed
// paths grouped by level), "edges" (every dependency, from waits for
// to), "problems" and "exit" (the exit status).
func (r *Result) WriteJSON(w io.Writer) error {
	out := jsonResult{
		Files:    make([]jsonFile, 0, len(r.Printed)),
		Levels:   r.LevelGroups(),
		Edges:    make([]jsonEdge, 0, len(r.Edges)),
		Problems: make([]jsonProblem, 0, len(r.Problems)),
		Exit:     r.ExitCode(),
	}
	if out.Levels == nil {
		out.Levels = [][]string{}
	}
	for _, i := range r.Printed {
		s := &r.Scripts[i]
		out.Files = append(out.Files, jsonFile{
			Path: s.Path, Level: r.Levels[i], Provides: nonNil(s.Provides), Requires: nonNil(s.Requires),
			Before: nonNil(s.Before), Keywords: nonNil(s.Keywords), InCycle: r.InCycle(i),
		})
	}
	for _, e := range r.Edges {
		out.Edges = append(out.Edges, jsonEdge{
			From: r.Scripts[e.From].Path, To: r.Scripts[e.To].Path, Kind: e.Kind.String(), Name: e.Name,
			Line: e.Line, ProvideLine: e.ProvideLine, InCycle: r.cycleLink(e.From, e.To),
		})
	}
	for i := range r.Problems {
		p := &r.Problems[i]
		jp := jsonProblem{Kind: p.Kind.String(), Severity: "warning", File: p.Path, Line: p.Line, Name: p.Name, Message: p.Text}
		if p.IsError() {
			jp.Severity = "error"
		}
		for _, f := range p.Cycle {
			jp.Cycle = append(jp.Cycle, r.Scripts[f].Path)
		}
		if p.Break != nil {
			jp.Break = &jsonLine{File: p.Break.Path, Line: p.Break.Line, Text: p.Break.Text}
		}
		out.Problems = append(out.Problems, jp)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// cycleLink reports whether the link from u to v lies on a cycle.
func (r *Result) cycleLink(u, v int) bool {
	if u == v {
		return r.selfLoop[u]
	}
	return r.comp[u] == r.comp[v] && r.cyclic[r.comp[u]]
}

// DOT output types: gonum multigraph nodes and lines carrying attributes.

type dotNode struct {
	id    int64
	name  string
	attrs []encoding.Attribute
}

func (n *dotNode) ID() int64                        { return n.id }
func (n *dotNode) DOTID() string                    { return n.name }
func (n *dotNode) Attributes() []encoding.Attribute { return n.attrs }

type dotLine struct {
	from, to *dotNode
	uid      int64
	attrs    []encoding.Attribute
}

func (l *dotLine) From() graph.Node                 { return l.from }
func (l *dotLine) To() graph.Node                   { return l.to }
func (l *dotLine) ID() int64                        { return l.uid }
func (l *dotLine) Attributes() []encoding.Attribute { return l.attrs }
func (l *dotLine) ReversedLine() graph.Line {
	return &dotLine{from: l.to, to: l.from, uid: l.uid, attrs: l.attrs}
}

type attrs []encoding.Attribute

func (a attrs) Attributes() []encoding.Attribute { return a }

type dotGraph struct{ *multi.DirectedGraph }

func (dotGraph) DOTAttributers() (g, n, e encoding.Attributer) {
	return attrs{{Key: "rankdir", Value: "BT"}}, attrs{{Key: "shape", Value: "box"}}, nil
}

// WriteDOT writes the dependency graph in Graphviz DOT (rcorder -g), made
// with gonum's encoding/dot. An arrow goes from a script to a script it
// waits for: REQUIRE links solid, BEFORE links dashed; scripts and links
// on a cycle, and missing provisions with the links to them, are red.
// All scripts appear (filters do not change the graph); those not
// printed are dotted.
func (r *Result) WriteDOT(w io.Writer) error {
	g := dotGraph{multi.NewDirectedGraph()}
	seen := map[string]int{}
	nodes := make([]*dotNode, len(r.Scripts))
	printed := make([]bool, len(r.Scripts))
	for _, i := range r.Printed {
		printed[i] = true
	}
	for i := range r.Scripts {
		name := r.Scripts[i].Path
		if k := seen[name]; k > 0 {
			name = fmt.Sprintf("%s#%d", name, k+1)
		}
		seen[r.Scripts[i].Path]++
		n := &dotNode{id: int64(i), name: name}
		if r.InCycle(i) {
			n.attrs = append(n.attrs, encoding.Attribute{Key: "color", Value: "red"})
		}
		if !printed[i] {
			n.attrs = append(n.attrs, encoding.Attribute{Key: "style", Value: "dotted"})
		}
		nodes[i] = n
		g.AddNode(n)
	}
	var uid int64
	type lk struct {
		f, t int
		k    EdgeKind
	}
	done := map[lk]bool{}
	for _, e := range r.Edges {
		k := lk{e.From, e.To, e.Kind}
		if done[k] {
			continue
		}
		done[k] = true
		l := &dotLine{from: nodes[e.From], to: nodes[e.To], uid: uid}
		uid++
		if e.Kind == BeforeEdge {
			l.attrs = append(l.attrs, encoding.Attribute{Key: "style", Value: "dashed"})
		}
		if r.cycleLink(e.From, e.To) {
			l.attrs = append(l.attrs, encoding.Attribute{Key: "color", Value: "red"})
		}
		g.SetLine(l)
	}
	missing := map[string]*dotNode{}
	next := int64(len(r.Scripts))
	for i := range r.Problems {
		p := &r.Problems[i]
		if p.Kind != MissingProvider {
			continue
		}
		m := missing[p.Name]
		if m == nil {
			m = &dotNode{id: next, name: "missing: " + p.Name, attrs: []encoding.Attribute{
				{Key: "label", Value: p.Name}, {Key: "color", Value: "red"}, {Key: "fontcolor", Value: "red"}, {Key: "style", Value: "dashed"},
			}}
			next++
			missing[p.Name] = m
			g.AddNode(m)
		}
		g.SetLine(&dotLine{from: nodes[p.File], to: m, uid: uid, attrs: []encoding.Attribute{{Key: "color", Value: "red"}}})
		uid++
	}
	b, err := dot.MarshalMulti(g, "rcorder", "", "\t")
	if err != nil {
		return fmt.Errorf("rcorder: dot: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// Lookup returns the scripts NAME designates: those whose path is NAME;
// failing that, those whose base name is NAME; failing that, the
// providers of NAME.
func (r *Result) Lookup(name string) []int {
	var out []int
	for i := range r.Scripts {
		if r.Scripts[i].Path == name {
			out = append(out, i)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range r.Scripts {
		p := r.Scripts[i].Path
		if path.Base(p) == name || filepath.Base(p) == name {
			out = append(out, i)
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range r.Scripts {
		if slices.Contains(r.Scripts[i].Provides, name) {
			out = append(out, i)
		}
	}
	return out
}

// edgesFrom returns the edges whose From is i (r.Edges is sorted by From).
func (r *Result) edgesFrom(i int) []Edge {
	lo := sort.Search(len(r.Edges), func(k int) bool { return r.Edges[k].From >= i })
	hi := lo
	for hi < len(r.Edges) && r.Edges[hi].From == i {
		hi++
	}
	return r.Edges[lo:hi]
}

// Explain says why the script(s) NAME designates (see Lookup) sit where
// they do: the chain of requirements, each on the highest level among the
// current script's, that fixes the level, down to a script with none, or
// the cycle that pushed a script to the end. It returns an error wrapping
// ErrUnknownName when NAME designates nothing.
func (r *Result) Explain(name string) (string, error) {
	targets := r.Lookup(name)
	if len(targets) == 0 {
		return "", fmt.Errorf("explain %q: %w", name, ErrUnknownName)
	}
	var b strings.Builder
	for _, t := range targets {
		r.explainOne(&b, t)
	}
	return b.String(), nil
}

func (r *Result) explainOne(b *strings.Builder, t int) {
	fmt.Fprintf(b, "%s: level %d of %d, position %d of %d\n", r.Scripts[t].Path, r.Levels[t], r.maxLevel, r.pos[t]+1, len(r.Order))
	if !r.Filter.Match(&r.Scripts[t]) {
		fmt.Fprintf(b, "  (not printed: its keywords %v are filtered out by -k/-s)\n", r.Scripts[t].Keywords)
	}
	seen := map[int]bool{}
	for cur := t; !seen[cur]; {
		seen[cur] = true
		s := &r.Scripts[cur]
		for i := range r.Problems {
			p := &r.Problems[i]
			if p.Kind == MissingProvider && p.File == cur {
				fmt.Fprintf(b, "  %s requires `%s', which nothing provides (ignored for ordering)\n", s.Path, p.Name)
			}
		}
		best := -1
		for _, d := range r.deps[cur] {
			if best < 0 || r.Levels[d] > r.Levels[int(best)] {
				best = int(d)
			}
		}
		if r.InCycle(cur) && (best < 0 || r.Levels[cur] != r.Levels[best]+1) {
			fmt.Fprintf(b, "  %s (level %d) is on a dependency cycle", s.Path, r.Levels[cur])
			for i := range r.Problems {
				p := &r.Problems[i]
				if p.Kind == Cycle && slices.Contains(p.Cycle, cur) {
					fmt.Fprintf(b, ": %s", strings.TrimPrefix(p.Text, "Circular dependency on "))
					break
				}
			}
			b.WriteString("\n  scripts on a cycle are pushed after everything ordered before them, as FreeBSD does\n")
			return
		}
		if (best >= 0 && r.Levels[cur] != r.Levels[best]+1) || (best < 0 && r.Levels[cur] != 1) {
			// Only downstream of a cycle: FreeBSD's walk, not the
			// longest path, sets the level (see Order).
			fmt.Fprintf(b, "  %s (level %d) sits where FreeBSD's walk of a dependency cycle put it, not at 1 + its highest requirement\n", s.Path, r.Levels[cur])
		}
		if best < 0 {
			fmt.Fprintf(b, "  %s (level %d) waits for nothing\n", s.Path, r.Levels[cur])
			return
		}
		for _, e := range r.edgesFrom(cur) {
			if e.To != best {
				continue
			}
			d := &r.Scripts[best]
			if e.Kind == RequireEdge {
				fmt.Fprintf(b, "  %s (level %d) requires `%s'%s, provided by %s (level %d)\n",
					s.Path, r.Levels[cur], e.Name, lineSuffix(e.Line), d.Path, r.Levels[best])
			} else {
				fmt.Fprintf(b, "  %s (level %d) provides `%s', and %s (level %d) is BEFORE it%s\n",
					s.Path, r.Levels[cur], e.Name, d.Path, r.Levels[best], lineSuffix(e.Line))
			}
			break
		}
		cur = best
	}
}

func lineSuffix(line int) string {
	if line == 0 {
		return ""
	}
	return fmt.Sprintf(" (line %d)", line)
}
