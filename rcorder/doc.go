// Package rcorder orders rc.d scripts by their PROVIDE, REQUIRE, BEFORE
// and KEYWORD headers, compatibly with FreeBSD rcorder(8) in its 2020+
// form (the one with -p and -g), as /etc/rc runs it:
//
//	rcorder -s nostart -s firstboot /etc/rc.d/*
//
// Parse, ParseFiles and ParseReader read headers; Order computes levels,
// the boot order, the dependency graph and the problems (missing
// providers, cycles, warnings) into an immutable Result, whose methods
// render FreeBSD's output (WriteList, WriteLevels, WriteProblems), a DOT
// graph (WriteDOT), JSON (WriteJSON) and explanations (Explain), and give
// a boot scheduler the DAG to follow (WaitFor).
//
// Compatibility: levels and exit status are FreeBSD's, including where
// its walk puts scripts that are on a cycle (see freebsd.go). Within a
// level, scripts keep their command-line order (FreeBSD's qsort leaves it
// unspecified). Keel differs from FreeBSD only where its issue says so:
// a trailing CR on a header line is stripped with a warning; every cycle
// is reported, each with the single header line whose removal breaks it;
// and a script that waits for a script on a cycle is never printed before
// it (where FreeBSD would put it on a lower level, it moves to the lowest
// level above; where FreeBSD puts both on one level, the level is kept
// and it is listed second). Graph algorithms (strongly connected components, elementary cycles,
// shortest paths, DOT encoding) come from gonum.
package rcorder
