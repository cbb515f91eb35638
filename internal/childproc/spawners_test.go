package childproc

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEverySpawnGoesThroughChildproc type-checks the module's non-test
// code and fails on any process started behind childproc's back: the
// Reaper could take such a child's exit status (see the package
// documentation). It flags calls of exec.Cmd's Start, Run, Output and
// CombinedOutput, os.StartProcess and syscall.ForkExec/StartProcess
// outside this package.
func TestEverySpawnGoesThroughChildproc(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	self, _ := os.Getwd()
	dirs := map[string][]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// internal/hostile is imported by tests only: its processes
			// are the tests' hostile clients, never keeld's children.
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata") || p == self ||
				p == filepath.Join(root, "internal", "hostile") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = append(dirs[filepath.Dir(p)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	std := importer.Default()
	imp := importerFunc(func(path string) (*types.Package, error) {
		if first, _, _ := strings.Cut(path, "/"); !strings.Contains(first, ".") {
			return std.Import(path)
		}
		// Other modules' and Keel's packages are not needed to find
		// exec.Cmd calls: an empty stand-in (its uses fail to check, and
		// those errors are ignored).
		pkg := types.NewPackage(path, filepath.Base(path))
		pkg.MarkComplete()
		return pkg, nil
	})
	spawn := map[string]bool{"os/exec.Cmd.Start": true, "os/exec.Cmd.Run": true, "os/exec.Cmd.Output": true,
		"os/exec.Cmd.CombinedOutput": true, "os.StartProcess": true, "syscall.ForkExec": true, "syscall.StartProcess": true}
	checked := 0
	for dir, names := range dirs {
		// Only packages that mention exec (os/exec, ForkExec) or
		// StartProcess can spawn; the others need no type-check.
		mentions := false
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			if l := strings.ToLower(string(b)); strings.Contains(l, "exec") || strings.Contains(l, "startprocess") {
				mentions = true
			}
		}
		if !mentions {
			continue
		}
		fset := token.NewFileSet()
		var files []*ast.File
		for _, n := range names {
			f, err := parser.ParseFile(fset, n, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp, Error: func(error) {}, FakeImportC: true}
		_, _ = conf.Check(dir, fset, files, info)
		for id, obj := range info.Uses {
			fn, ok := obj.(*types.Func)
			if !ok || fn.Pkg() == nil {
				continue
			}
			name := fn.Pkg().Path() + "." + fn.Name()
			if recv := fn.Signature().Recv(); recv != nil {
				rt := recv.Type()
				if p, ok := rt.(*types.Pointer); ok {
					rt = p.Elem()
				}
				if n, ok := rt.(*types.Named); ok {
					name = fn.Pkg().Path() + "." + n.Obj().Name() + "." + fn.Name()
				}
			}
			checked++
			if spawn[name] {
				rel, _ := filepath.Rel(root, fset.Position(id.Pos()).Filename)
				t.Errorf("%s:%d: %s starts a process outside childproc; use childproc.Start or childproc.Output", rel, fset.Position(id.Pos()).Line, name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no function uses checked: the type-checker saw nothing")
	}
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
