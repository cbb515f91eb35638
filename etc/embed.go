// Package etc embeds Keel's default appliance: rc.conf, defaults/rc.conf,
// rc.d services and ipsec.conf. keeld boots it when run outside the
// repository with no --root.
package etc

import (
	"embed"
	"errors"
	"io"
	"io/fs"
	"strings"
	"time"
)

//go:embed rc.conf defaults rc.d ipsec.conf
var files embed.FS

// Root returns a read-only fs.FS in which the embedded files appear under
// "etc/" (etc/rc.conf, etc/rc.d/kld...), the layout keeld expects of a
// root directory. It is safe for concurrent use.
func Root() fs.FS { return rootFS{} }

type rootFS struct{}

func (rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	switch {
	case name == ".":
		return &topDir{}, nil
	case name == "etc":
		return files.Open(".")
	case strings.HasPrefix(name, "etc/"):
		return files.Open(name[len("etc/"):])
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (r rootFS) ReadDir(name string) ([]fs.DirEntry, error) {
	switch {
	case name == ".":
		return []fs.DirEntry{fs.FileInfoToDirEntry(topInfo{})}, nil
	case name == "etc":
		return files.ReadDir(".")
	case strings.HasPrefix(name, "etc/"):
		return files.ReadDir(name[len("etc/"):])
	}
	return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
}

// topDir is the synthetic root directory holding only "etc".
type topDir struct{ read bool }

func (d *topDir) Stat() (fs.FileInfo, error) { return rootInfo{}, nil }
func (d *topDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: errors.New("is a directory")}
}
func (d *topDir) Close() error { return nil }
func (d *topDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.read {
		if n > 0 {
			return nil, io.EOF
		}
		return nil, nil
	}
	d.read = true
	return []fs.DirEntry{fs.FileInfoToDirEntry(topInfo{})}, nil
}

type dirInfo struct{ name string }

func (i dirInfo) Name() string       { return i.name }
func (i dirInfo) Size() int64        { return 0 }
func (i dirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (i dirInfo) ModTime() time.Time { return time.Time{} }
func (i dirInfo) IsDir() bool        { return true }
func (i dirInfo) Sys() any           { return nil }

type rootInfo = dotInfo
type dotInfo struct{ dirInfo }
type topInfo struct{ dirInfo }

func (dotInfo) Name() string { return "." }
func (topInfo) Name() string { return "etc" }
