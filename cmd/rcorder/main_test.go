package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
)

// buildBinary compiles cmd/rcorder once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not in PATH")
	}
	bin := filepath.Join(t.TempDir(), "rcorder")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// writeProbes materialises the FreeBSD probe trees from
// ../../rcorder/testdata/freebsd-probes.txt (a copy of
// /work/shared/reference/rcorder-behaviour.txt) under dir.
func writeProbes(t *testing.T, dir string) map[string][]string {
	f, err := os.Open("../../rcorder/testdata/freebsd-probes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fileRe := regexp.MustCompile(`^-- (t\d+/\S+):$`)
	files := map[string][]string{}
	var cur *os.File
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-- ") || strings.HasPrefix(line, "== ") {
			if cur != nil {
				cur.Close()
				cur = nil
			}
			if m := fileRe.FindStringSubmatch(line); m != nil {
				p := filepath.Join(dir, m[1])
				os.MkdirAll(filepath.Dir(p), 0o755)
				if cur, err = os.Create(p); err != nil {
					t.Fatal(err)
				}
				tree := strings.Split(m[1], "/")[0]
				files[tree] = append(files[tree], m[1])
			}
			continue
		}
		if cur != nil && strings.HasSuffix(line, "$") {
			cur.WriteString(strings.ReplaceAll(strings.TrimSuffix(line, "$"), "^M", "\r") + "\n")
		}
	}
	for _, fs := range files {
		slices.Sort(fs)
	}
	return files
}

type runResult struct {
	stdout, stderr string
	code           int
}

func runBin(t *testing.T, bin, dir string, args ...string) runResult {
	t.Helper()
	ctx := testwait.Context(t)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = time.Second
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v: no exit within %v", bin, args, testwait.Timeout)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return runResult{out.String(), errb.String(), code}
}

func TestCLI(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	trees := writeProbes(t, dir)
	if len(trees) != 9 {
		t.Fatalf("%d probe trees", len(trees))
	}
	cases := []struct {
		name   string
		args   []string
		stdout string
		stderr []string // lines that must appear
		code   int
	}{
		{"plain t2", trees["t2"], "t2/w\nt2/z\nt2/y\nt2/x\n", nil, 0},
		{"-p t2", append([]string{"-p"}, trees["t2"]...), "t2/w t2/z\nt2/y\nt2/x\n", nil, 0},
		{"missing t3", trees["t3"], "t3/a\nt3/b\n", []string{"rcorder: requirement `nothere' in file `t3/a' has no providers."}, 1},
		{"cycle t4", trees["t4"], "t4/d\nt4/c\nt4/b\nt4/a\n", []string{
			"rcorder: Circular dependency on provision `a': t4/a -> t4/b -> t4/c -> t4/a.",
			"rcorder: cycle broken by removing line 2 of `t4/c': # REQUIRE: a",
		}, 1},
		{"unknown before t5", trees["t5"], "t5/a\nt5/b\n", []string{"rcorder: file `t5/a' is before unknown provision `zz'"}, 0},
		{"-s t6", append([]string{"-s", "nostart", "-snojail"}, trees["t6"]...), "t6/c\n", nil, 0},
		{"-k t6", append([]string{"-k", "shutdown", "-k", "nostart"}, trees["t6"]...), "t6/a\nt6/b\n", nil, 0},
		{"-p t7", append([]string{"-p"}, trees["t7"]...),
			"t7/b t7/cont t7/empty t7/gap t7/lead t7/lower t7/nospace\nt7/alias t7/crlf t7/late t7/self\n",
			[]string{"rcorder: Circular dependency on provision `self': t7/self -> t7/self -> t7/self."}, 1},
		{"-p t8", append([]string{"-p"}, trees["t8"]...), "t8/m1 t8/m2\nt8/user\n", nil, 0},
		{"missing file and directory", []string{"t9/b", "nonexistent", "t9", "t9/cont"}, "t9/b\nt9/cont\n",
			[]string{"rcorder: could not open nonexistent: No such file or directory"}, 0},
		{"no files", nil, "", nil, 0},
		{"bad option", []string{"-z", "t1/a"}, "", []string{"rcorder: illegal option -- z", "usage: rcorder [-gjp] [-k keep] [-s skip] [-x name] file ..."}, 1},
		{"missing option argument", []string{"-k"}, "", []string{"rcorder: option requires an argument -- k"}, 1},
		{"explain", append([]string{"-x", "x"}, trees["t2"]...),
			"t2/x: level 3 of 3, position 4 of 4\n  t2/x (level 3) requires `y' (line 2), provided by t2/y (level 2)\n  t2/y (level 2) requires `z' (line 2), provided by t2/z (level 1)\n  t2/z (level 1) waits for nothing\n", nil, 0},
		{"explain unknown", append([]string{"-x", "nope"}, trees["t2"]...), "", []string{`rcorder: explain "nope": no such script or provision`}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runBin(t, bin, dir, c.args...)
			if r.stdout != c.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, c.stdout)
			}
			if r.code != c.code {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, c.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			for _, want := range c.stderr {
				if !slices.Contains(lines, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
			for _, l := range lines {
				if l != "" && !strings.HasPrefix(l, "rcorder: ") && !strings.HasPrefix(l, "usage: ") {
					t.Errorf("stderr line without prefix: %q", l)
				}
			}
		})
	}

	t.Run("-g", func(t *testing.T) {
		r := runBin(t, bin, dir, append([]string{"-g"}, trees["t4"]...)...)
		if r.code != 1 || !strings.HasPrefix(r.stdout, "digraph rcorder {") || !strings.Contains(r.stdout, `"t4/c" -> "t4/a" [color=red];`) {
			t.Errorf("exit %d, DOT:\n%s", r.code, r.stdout)
		}
	})
	t.Run("-j", func(t *testing.T) {
		r := runBin(t, bin, dir, append([]string{"-j"}, trees["t3"]...)...)
		var out struct {
			Files    []struct{ Path string }
			Problems []struct{ Kind, Message string }
			Exit     int
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v:\n%s", err, r.stdout)
		}
		if r.code != 1 || out.Exit != 1 || len(out.Files) != 2 || len(out.Problems) != 1 || out.Problems[0].Kind != "missing" {
			t.Errorf("exit %d, JSON %+v", r.code, out)
		}
	})
	t.Run("fixture tree", func(t *testing.T) {
		matches, _ := filepath.Glob("../../rcorder/testdata/rc.d/*")
		r := runBin(t, bin, ".", append([]string{"-s", "nostart", "-s", "firstboot"}, matches...)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		got := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(got) < 100 || !slices.Contains(got, "../../rcorder/testdata/rc.d/keel_esp") {
			t.Errorf("printed %d files", len(got))
		}
	})
}

// TestCLIFreeBSDWalk runs the binary on a tree whose levels depend on
// the details of FreeBSD's walk (values from the transliteration of
// rcorder.c in rcorder/freebsd_ref_test.go): x reaches self's loop first,
// with self's provision already in progress, so FreeBSD's tracing fails
// and self is not pushed to the end; a's BEFORE on its own provision is a
// loop FreeBSD names by its fake provision.
func TestCLIFreeBSDWalk(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	files := map[string]string{
		"a":    "# PROVIDE: a\n# BEFORE: a\n",
		"b":    "# PROVIDE: b\n",
		"self": "# PROVIDE: self\n# REQUIRE: self\n",
		"x":    "# REQUIRE: self b\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := runBin(t, bin, dir, "-p", "a", "b", "self", "x")
	if want := "b self\nx\na\n"; r.stdout != want || r.code != 1 {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	for _, want := range []string{
		"rcorder: Circular dependency on provision `fake_prov_00000000': a -> a -> a.",
		"rcorder: Circular dependency on provision `self': self -> self -> self.",
	} {
		if !strings.Contains(r.stderr, want+"\n") {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestParseArgs(t *testing.T) {
	o, err := parseArgs([]string{"-gp", "-knostart", "-k", "shutdown", "-s", "firstboot", "-x", "sshd", "--", "-weird", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.graph || !o.levels || o.json || o.explain != "sshd" ||
		!slices.Equal(o.filter.Keep, []string{"nostart", "shutdown"}) || !slices.Equal(o.filter.Skip, []string{"firstboot"}) ||
		!slices.Equal(o.files, []string{"-weird", "b"}) {
		t.Errorf("%+v", o)
	}
	o, _ = parseArgs([]string{"a", "-p"})
	if o.levels || !slices.Equal(o.files, []string{"a", "-p"}) {
		t.Errorf("options after the first operand must be operands: %+v", o)
	}
}
