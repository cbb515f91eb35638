package modules

// Check reports whether names could be loaded as far as the catalog can
// tell, without loading anything: every name, and every hard dependency
// of theirs, is registered in a version range that fits, and the hard
// dependencies have no cycle. The error is Load's for the same names
// (UnknownError, VersionError, CycleError, joined); it does not cover
// what only loading shows (a failing hook, a self-test).
func (l *Loader) Check(names ...string) error {
	_, err := plan(l.cat, names)
	return err
}
