package rcorder

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
)

func TestParseReaderRules(t *testing.T) {
	type want struct {
		prov, req, before, kw []string
		reqLines              []int
		crLines               []int
	}
	long := strings.Repeat("x", 10000)
	cases := []struct {
		name string
		in   string
		want want
	}{
		{"all keywords", "# PROVIDE: a\n# REQUIRE: b\n# BEFORE: c\n# KEYWORD: k\n",
			want{prov: []string{"a"}, req: []string{"b"}, before: []string{"c"}, kw: []string{"k"}, reqLines: []int{2}}},
		{"plural spellings", "# PROVIDES: a\n# REQUIRES: b c\n# KEYWORDS: k1 k2\n",
			want{prov: []string{"a"}, req: []string{"b", "c"}, kw: []string{"k1", "k2"}, reqLines: []int{2, 2}}},
		{"case-sensitive", "# provide: a\n# Require: b\n", want{}},
		{"leading blank is not a header", " # PROVIDE: a\n", want{}},
		{"no space after hash", "#PROVIDE: a\n", want{}},
		{"no space after colon", "# REQUIRE:b\n", want{req: []string{"b"}, reqLines: []int{1}}},
		{"shell code before the block is skipped", "#!/bin/sh\necho hi\n\n# PROVIDE: a\n# REQUIRE: b\n",
			want{prov: []string{"a"}, req: []string{"b"}, reqLines: []int{5}}},
		{"first other line ends the block", "# PROVIDE: a\n#\n# REQUIRE: b\n", want{prov: []string{"a"}}},
		{"blank line ends the block", "# PROVIDE: a\n\n# REQUIRE: b\n", want{prov: []string{"a"}}},
		{"backslash-newline joins", "# PROVIDE: a \\\n  b\n# REQUIRE: c\n",
			want{prov: []string{"a", "b"}, req: []string{"c"}, reqLines: []int{3}}},
		{"joined text is glued", "# PROVIDE: a\\\nb\n", want{prov: []string{"ab"}}},
		{"continued line keeps its first line number", "# REQUIRE: a \\\nb \\\nc\n",
			want{req: []string{"a", "b", "c"}, reqLines: []int{1, 1, 1}}},
		{"escaped backslash does not join", "# PROVIDE: a\\\\\n# REQUIRE: b\n",
			want{prov: []string{`a\\`}, req: []string{"b"}, reqLines: []int{2}}},
		{"continuation at EOF", "# PROVIDE: a \\", want{prov: []string{"a"}}},
		{"tabs and spaces split", "# REQUIRE:\ta\t b  c\t\n", want{req: []string{"a", "b", "c"}, reqLines: []int{1, 1, 1}}},
		{"hash is an ordinary token", "# PROVIDE: b2 # trailing comment\n", want{prov: []string{"b2", "#", "trailing", "comment"}}},
		{"CR stripped and recorded", "# PROVIDE: a\r\n# REQUIRE: b\r\n",
			want{prov: []string{"a"}, req: []string{"b"}, reqLines: []int{2}, crLines: []int{1, 2}}},
		{"CR before continuation", "# PROVIDE: a \\\r\n b\r\n", want{prov: []string{"a", "b"}, crLines: []int{1}}},
		{"CR outside the header is not reported", "echo\r\n# PROVIDE: a\n", want{prov: []string{"a"}}},
		{"no header", "#!/bin/sh\nexit 0\n", want{}},
		{"empty file", "", want{}},
		{"no final newline", "# PROVIDE: a", want{prov: []string{"a"}}},
		{"long line", "# PROVIDE: " + long + "\n# REQUIRE: b\n", want{prov: []string{long}, req: []string{"b"}, reqLines: []int{2}}},
		{"NUL ends the line as in C", "# PROVIDE: a\x00b\n", want{prov: []string{"a"}}},
		{"vertical tab is not a separator", "# PROVIDE: a\vb\n", want{prov: []string{"a\vb"}}},
		{"several PROVIDE lines", "# PROVIDE: a\n# PROVIDE: b\n", want{prov: []string{"a", "b"}}},
		{"header after the block is ignored", "# PROVIDE: a\necho\n# PROVIDE: b\n", want{prov: []string{"a"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseReader("f", strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			check := func(field string, got, want []string) {
				if !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", field, got, want)
				}
			}
			check("Provides", s.Provides, c.want.prov)
			check("Requires", s.Requires, c.want.req)
			check("Before", s.Before, c.want.before)
			check("Keywords", s.Keywords, c.want.kw)
			if !slices.Equal(s.RequireLines, c.want.reqLines) {
				t.Errorf("RequireLines = %v, want %v", s.RequireLines, c.want.reqLines)
			}
			if !slices.Equal(s.CRLines, c.want.crLines) {
				t.Errorf("CRLines = %v, want %v", s.CRLines, c.want.crLines)
			}
			if len(s.ProvideLines) != len(s.Provides) || len(s.BeforeLines) != len(s.Before) || len(s.KeywordLines) != len(s.Keywords) {
				t.Errorf("line slices out of step with tokens: %+v", s)
			}
		})
	}
}

func TestParseHeaderText(t *testing.T) {
	s, err := ParseReader("f", strings.NewReader("#!/bin/sh\n# PROVIDE: a\n# REQUIRE: b \\\n c\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.HeaderText(3); got != "# REQUIRE: b  c" {
		t.Errorf("HeaderText(3) = %q", got)
	}
	if got := s.HeaderText(1); got != "" {
		t.Errorf("HeaderText(1) = %q, want empty (not a header line)", got)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.n++
		return copy(p, "# PROVIDE: a\n"), nil
	}
	return 0, syscall.EIO
}

func TestParseReaderError(t *testing.T) {
	s, err := ParseReader("f", &failingReader{})
	var oe *OpenError
	if !errors.As(err, &oe) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want *OpenError wrapping EIO", err)
	}
	if got, want := err.Error(), "could not read f: Input/output error"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
	if !slices.Equal(s.Provides, []string{"a"}) {
		t.Errorf("partial parse lost: %q", s.Provides)
	}
}

func TestParseFS(t *testing.T) {
	fsys := fstest.MapFS{
		"rc.d/a":   {Data: []byte("# PROVIDE: a\n")},
		"rc.d/dir": {Mode: fs.ModeDir},
		"rc.d/b":   {Data: []byte("# PROVIDE: b\n# REQUIRE: a\n")},
	}
	scripts, errs := Parse(fsys, "rc.d/b", "rc.d/dir", "rc.d/missing", "rc.d/a")
	if len(scripts) != 2 || scripts[0].Path != "rc.d/b" || scripts[1].Path != "rc.d/a" {
		t.Fatalf("scripts = %+v", scripts)
	}
	if len(errs) != 1 || errs[0].Error() != "could not open rc.d/missing: No such file or directory" || !errors.Is(errs[0], fs.ErrNotExist) {
		t.Fatalf("errs = %v", errs)
	}
}

func TestParseFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a", "# PROVIDE: a\n")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	scripts, errs := ParseFiles(a, dir, fifo, missing, link)
	if len(scripts) != 2 || scripts[0].Path != a || scripts[1].Path != link || scripts[1].Provides[0] != "a" {
		t.Fatalf("scripts = %+v (directories and FIFOs must be ignored, symlinks followed)", scripts)
	}
	if len(errs) != 1 || errs[0].Error() != "could not open "+missing+": No such file or directory" {
		t.Fatalf("errs = %v", errs)
	}
	if os.Geteuid() != 0 {
		noperm := write("noperm", "# PROVIDE: x\n")
		os.Chmod(noperm, 0)
		_, errs = ParseFiles(noperm)
		if len(errs) != 1 || !strings.HasSuffix(errs[0].Error(), ": Permission denied") {
			t.Errorf("errs = %v", errs)
		}
	}
}

func TestParseReaderAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool is randomised under -race")
	}
	const file = "#!/bin/sh\n#\n# sshd\n#\n\n# PROVIDE: sshd\n# REQUIRE: LOGIN FILESYSTEMS\n# KEYWORD: shutdown\n\n. /etc/rc.subr\n"
	rd := strings.NewReader(file)
	ParseReader("sshd", rd) // warm the pool
	allocs := testing.AllocsPerRun(200, func() {
		rd.Reset(file)
		ParseReader("sshd", rd)
	})
	// One string for the header text, one []HeaderLine, one []string and
	// one []int for all tokens, whatever their number.
	if allocs > 4 {
		t.Errorf("ParseReader: %.1f allocations per file, want at most 4", allocs)
	}
}

func TestParsedSlicesAreIndependent(t *testing.T) {
	s, _ := ParseReader("f", strings.NewReader("# PROVIDE: a\n# REQUIRE: b\n# BEFORE: c\n"))
	s.Provides = append(s.Provides, "x") // must not overwrite Requires
	s.Requires = append(s.Requires, "y")
	if s.Requires[0] != "b" || s.Before[0] != "c" {
		t.Fatalf("appending to one field clobbered another: %+v", s)
	}
}
