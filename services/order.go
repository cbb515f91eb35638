package services

import (
	"io/fs"

	"github.com/keelinit/keel/rcorder"
)

// scanHeaders reads the rcorder headers of paths with package rcorder.
func scanHeaders(fsys fs.FS, paths []string) ([]Header, []error) {
	scripts, errs := rcorder.Parse(fsys, paths...)
	out := make([]Header, len(scripts))
	for i, s := range scripts {
		out[i] = Header{Path: s.Path, Provides: s.Provides, Requires: s.Requires, Before: s.Before, Keywords: s.Keywords}
	}
	return out, errs
}
