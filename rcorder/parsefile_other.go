//go:build !linux

package rcorder

import "os"

// parseFile opens, checks and parses one file. It stats first so that a
// FIFO is skipped rather than blocking open. ok reports whether the file
// is a regular file.
func parseFile(path string) (s Script, ok bool, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return Script{}, false, &OpenError{Op: "open", Path: path, Err: err}
	}
	if !st.Mode().IsRegular() {
		return Script{}, false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Script{}, false, &OpenError{Op: "open", Path: path, Err: err}
	}
	defer f.Close()
	s, err = ParseReader(path, f)
	return s, true, err
}
