package services

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Severity says whether a Finding makes a configuration invalid.
type Severity string

// Severities.
const (
	// SeverityError: the configuration is invalid (keeld -n exits 1, a
	// reload changes nothing).
	SeverityError Severity = "error"
	// SeverityWarning: suspicious but valid; it changes nothing by itself.
	SeverityWarning Severity = "warning"
)

// Finding is one problem in a configuration. Text names the file, and the
// line when it is known, first: "/etc/rc.conf:12: pktgen_rate: ...". It
// is worded the same wherever it shows: keeld -n, keelctl check, the boot
// log, a refused reload.
type Finding struct {
	Severity Severity `json:"severity"`
	Text     string   `json:"text"`
}

// located returns msg prefixed with "file:line: " ("file: " when line is
// 0), unless msg already starts with a location: a path (a first word,
// before ": ", with a slash and no blank), such as the file and line of
// an ipsec.conf error.
func located(file string, line int, msg string) string {
	first, _, found := strings.Cut(msg, ": ")
	switch {
	case file == "" || found && strings.Contains(first, "/") && !strings.ContainsAny(first, " \t"):
		return msg
	case line > 0:
		return fmt.Sprintf("%s:%d: %s", file, line, msg)
	}
	return file + ": " + msg
}

// Checker is implemented by builtins that can validate their own
// configuration (the files and rc.conf variables they read) without
// starting: keeld -n, keelctl check and Reload call it, Start does not.
// Check must not create, change or lock anything, and must never put key
// material in an error. Each error (errors.Join them to report several)
// should name its file and line first (rcconf.Config.Errorf does); an
// error wrapped with Warning is reported as a warning.
type Checker interface {
	Check(env BuiltinEnv) error
}

// warning marks a Checker's error as a warning.
type warning struct{ error }

func (w warning) Unwrap() error { return w.error }

// Warning marks err as a warning: something Start tolerates (kld skips a
// module it does not know) but the operator should see.
func Warning(err error) error { return warning{err} }

// findings splits err (possibly an errors.Join tree) into Findings,
// located in file when an error does not name its own place.
func findings(err error, file string) []Finding {
	if err == nil {
		return nil
	}
	var w warning
	if errors.As(err, &w) {
		return []Finding{{Severity: SeverityWarning, Text: located(file, 0, w.error.Error())}}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []Finding
		for _, e := range j.Unwrap() {
			out = append(out, findings(e, file)...)
		}
		return out
	}
	return []Finding{{Severity: SeverityError, Text: located(file, 0, err.Error())}}
}

// notices are the findings of c that Boot logs before it starts anything:
// the ordering problems and the unknown variables. (Service errors are
// logged as each service fails.)
func (c *Catalog) notices() []Finding {
	out := append([]Finding(nil), c.Problems...)
	for _, w := range c.Warnings {
		out = append(out, Finding{Severity: SeverityWarning, Text: w})
	}
	return out
}

// logNotices logs c's notices at warning level, worded as keeld -n prints
// them.
func (c *Catalog) logNotices(log *slog.Logger) {
	for _, f := range c.notices() {
		log.Warn(f.Text)
	}
}

// defFindings are the findings of the rc.d file of d: its error, if any
// (a warning when d is disabled, which then changes nothing).
func defFindings(c *Catalog, d *Definition) []Finding {
	if d.Err == nil {
		return nil
	}
	f := Finding{Severity: SeverityError, Text: located(c.Chain.Name(d.Path), 0, d.Err.Error())}
	if !d.Enabled {
		f.Severity = SeverityWarning
		f.Text = located(c.Chain.Name(d.Path), 0, "disabled, and its rc.d file is invalid: "+d.Err.Error())
	}
	return []Finding{f}
}

// Report is the result of Check.
type Report struct {
	// Root names the configuration checked.
	Root string `json:"root"`
	// Findings are the errors and warnings, errors first, each group in
	// the order found (rc.conf, ordering, rc.d files in boot order, then
	// the builtins' own files).
	Findings []Finding `json:"findings"`
}

// Count returns the number of findings of severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Err returns nil when the report has no error, else an error listing
// every error, one per line.
func (r *Report) Err() error {
	var errs []error
	for _, f := range r.Findings {
		if f.Severity == SeverityError {
			errs = append(errs, errors.New(f.Text))
		}
	}
	return errors.Join(errs...)
}

// Summary is the last line of keeld -n: "ROOT: configuration OK" or
// "ROOT: 2 errors, 1 warning".
func (r *Report) Summary() string {
	e, w := r.Count(SeverityError), r.Count(SeverityWarning)
	if e+w == 0 {
		return r.Root + ": configuration OK"
	}
	state := "configuration OK with"
	if e > 0 {
		state = "configuration INVALID:"
	}
	return fmt.Sprintf("%s: %s %s, %s", r.Root, state, plural(e, "error"), plural(w, "warning"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// sortFindings puts the errors first, keeping the order within each
// severity.
func sortFindings(fs []Finding) []Finding {
	out := make([]Finding, 0, len(fs))
	for _, s := range []Severity{SeverityError, SeverityWarning} {
		for _, f := range fs {
			if f.Severity == s {
				out = append(out, f)
			}
		}
	}
	return out
}

// Check validates the configuration that Boot would run, without starting,
// creating, locking or changing anything: the rc.conf chain, every rc.d
// file, the ordering (rcorder's problems), unknown rc.conf variables, and
// the own configuration of every enabled builtin that implements Checker.
// opts needs Root, Seed and Builtins as for New; RuntimeDir need not exist.
// root names the configuration in the summary.
func Check(opts Options, root string) *Report {
	r := &Report{Root: root}
	cat, err := loadCatalog(opts)
	if err != nil {
		r.Findings = []Finding{{Severity: SeverityError, Text: err.Error()}}
		return r
	}
	r.Findings = sortFindings(append(cat.notices(), serviceFindings(opts, cat, nil)...))
	return r
}

// serviceFindings returns, for each service of cat in boot order, its
// rc.d file's error and its builtin's Check. When only is not nil,
// services for which only returns false are skipped (Reload checks what
// changed).
func serviceFindings(opts Options, cat *Catalog, only func(d *Definition) bool) []Finding {
	var out []Finding
	for _, i := range cat.Order {
		d := cat.Defs[i]
		if only != nil && !only(d) {
			continue
		}
		out = append(out, defFindings(cat, d)...)
		if d.Err != nil || !d.Enabled || d.Type != TypeBuiltin {
			continue
		}
		if c, ok := opts.Builtins[d.Name].(Checker); ok {
			out = append(out, findings(c.Check(builtinEnv(opts, d)), cat.Chain.Name(d.Path))...)
		}
	}
	return out
}

// Write prints r as keeld -n and keelctl check do: one finding per line
// ("file:line: ..."), errors first, then the summary line.
func (r *Report) Write(w io.Writer) error {
	for _, f := range r.Findings {
		if _, err := fmt.Fprintln(w, f.Text); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(w, r.Summary())
	return err
}
