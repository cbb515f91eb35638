package services

import (
	"io/fs"

	"github.com/keelinit/keel/rcorder"
)

// NoStartKeyword marks rc.d files that keeld never starts (rc(8) passes
// -s nostart to rcorder the same way).
const NoStartKeyword = "nostart"

// scanHeaders reads the rcorder headers of paths with package rcorder.
func scanHeaders(fsys fs.FS, paths []string) ([]rcorder.Script, []Header, []error) {
	scripts, errs := rcorder.Parse(fsys, paths...)
	out := make([]Header, len(scripts))
	for i, s := range scripts {
		out[i] = Header{Path: s.Path, Provides: s.Provides, Requires: s.Requires, Before: s.Before, Keywords: s.Keywords}
	}
	return scripts, out, errs
}

// orderGraph runs rcorder over the scripts: it returns, per script, the
// scripts it must wait for (an acyclic graph consistent with rcorder's
// order, cycles broken where FreeBSD breaks them), the boot order, which
// scripts pass the nostart filter, and the problems as rcorder prints
// them, located in the file named by name (an error when rcorder would
// exit 1 for it: a missing provider, a cycle).
func orderGraph(scripts []rcorder.Script, name func(string) string) (deps [][]int, order []int, printed []bool, problems []Finding) {
	res := rcorder.Order(scripts, rcorder.Filter{Skip: []string{NoStartKeyword}})
	printed = make([]bool, len(scripts))
	for _, i := range res.Printed {
		printed[i] = true
	}
	for _, p := range res.Problems {
		f := Finding{Severity: SeverityWarning, Text: located(name(p.Path), p.Line, "rcorder: "+p.Text)}
		if p.IsError() {
			f.Severity = SeverityError
		}
		problems = append(problems, f)
	}
	return res.WaitFor(), res.Order, printed, problems
}
