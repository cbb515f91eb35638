// Command rcorder prints a dependency ordering of rc.d scripts, compatible
// with FreeBSD rcorder(8) (2020 and later, with -p and -g):
//
//	rcorder [-gjp] [-k keep] [-s skip] [-x name] file ...
//
// -k and -s may be repeated; -p prints one level per line; -g prints a DOT
// graph; -j prints JSON; -x explains why one script sits where it does.
// Errors go to standard error prefixed "rcorder: "; the exit status is 1
// when a requirement has no provider or a cycle exists (every file is
// still printed exactly once) and on bad usage. Files that cannot be
// opened are reported but, as in FreeBSD, do not change the status by
// themselves. With no file operands nothing is printed.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/keelinit/keel/rcorder"
)

const usage = "usage: rcorder [-gjp] [-k keep] [-s skip] [-x name] file ..."

type options struct {
	graph, json, levels bool
	filter              rcorder.Filter
	explain             string
	files               []string
	warnings            []string
}

// parseArgs parses arguments the way getopt(3) does with "dgjpk:s:x:":
// flags may be combined (-gp), option arguments may be attached (-knostart)
// and option parsing stops at "--" or the first operand.
func parseArgs(args []string) (options, error) {
	var o options
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 'd':
				// FreeBSD: "debugging not compiled in, -d ignored".
				o.warnings = append(o.warnings, "debugging not compiled in, -d ignored")
			case 'g':
				o.graph = true
			case 'j':
				o.json = true
			case 'p':
				o.levels = true
			case 'k', 's', 'x':
				var val string
				if j+1 < len(a) {
					val = a[j+1:]
				} else if i+1 < len(args) {
					i++
					val = args[i]
				} else {
					return o, fmt.Errorf("option requires an argument -- %c", c)
				}
				switch c {
				case 'k':
					o.filter.Keep = append(o.filter.Keep, val)
				case 's':
					o.filter.Skip = append(o.filter.Skip, val)
				case 'x':
					o.explain = val
				}
				j = len(a)
			default:
				return o, fmt.Errorf("illegal option -- %c", c)
			}
		}
	}
	o.files = args[i:]
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "rcorder: %v\n", err)
		fmt.Fprintln(stderr, usage)
		return 1
	}
	for _, w := range o.warnings {
		fmt.Fprintf(stderr, "rcorder: %s\n", w)
	}
	scripts, errs := rcorder.ParseFiles(o.files...)
	for _, e := range errs {
		fmt.Fprintf(stderr, "rcorder: %v\n", e)
	}
	res := rcorder.Order(scripts, o.filter)
	res.WriteProblems(stderr, "rcorder: ")
	switch {
	case o.explain != "":
		text, err := res.Explain(o.explain)
		if err != nil {
			fmt.Fprintf(stderr, "rcorder: %v\n", err)
			return 1
		}
		io.WriteString(stdout, text)
	case o.json:
		err = res.WriteJSON(stdout)
	case o.graph:
		err = res.WriteDOT(stdout)
	case o.levels:
		err = res.WriteLevels(stdout)
	default:
		err = res.WriteList(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rcorder: %v\n", err)
		return 1
	}
	return res.ExitCode()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
