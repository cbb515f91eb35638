package rcorder

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"syscall"
)

// Script is the parsed rc.d header of one file.
//
// Provides, Requires, Before and Keywords hold the tokens of the
// "# PROVIDE:", "# REQUIRE:", "# BEFORE:" and "# KEYWORD:" lines (and
// their plural spellings) in file order. The *Lines slices, when not nil,
// give for each token the 1-based line on which it was declared (the
// first physical line of a backslash-continued line); a Script built by
// hand may leave them nil, and diagnostics then omit line numbers.
//
// A Script is a plain value: Order never modifies it, and callers may
// share it between goroutines as long as nobody writes to it.
type Script struct {
	// Path is the file name exactly as given (FreeBSD prints it verbatim).
	Path string

	Provides []string
	Requires []string
	Before   []string
	Keywords []string

	ProvideLines []int
	RequireLines []int
	BeforeLines  []int
	KeywordLines []int

	// Header holds the header block's logical lines, after continuation
	// joining and trailing-CR stripping, in file order.
	Header []HeaderLine

	// CRLines lists the header lines that ended in a carriage return.
	// FreeBSD keeps the CR inside the last token (which then never
	// matches); Keel strips it and Order reports a warning instead.
	CRLines []int
}

// HeaderLine is one logical line of a script's header block.
type HeaderLine struct {
	Line int    // 1-based number of its first physical line
	Text string // the whole line, e.g. "# REQUIRE: NETWORKING"
}

// HeaderText returns the text of header line n of s, or "" when s has no
// such header line recorded.
func (s *Script) HeaderText(n int) string {
	for _, h := range s.Header {
		if h.Line == n {
			return h.Text
		}
	}
	return ""
}

// OpenError reports a file that could not be opened, stat'ed or read.
// Its Error text is FreeBSD's: "could not open F: No such file or directory".
type OpenError struct {
	Op   string // "open", "stat" or "read"
	Path string
	Err  error
}

// Error returns the FreeBSD rcorder text, without the "rcorder: " prefix.
func (e *OpenError) Error() string {
	return fmt.Sprintf("could not %s %s: %s", e.Op, e.Path, strerror(e.Err))
}

// Unwrap returns the underlying cause, so errors.Is(err, fs.ErrNotExist) works.
func (e *OpenError) Unwrap() error { return e.Err }

// strerror renders err the way C's strerror(3) does ("No such file or
// directory"), which is what FreeBSD's warn(3) prints.
func strerror(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return capitalize(errno.Error())
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "Permission denied"
	}
	return err.Error()
}

func capitalize(s string) string {
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		return string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// Parse reads the headers of the named files from fsys, in order.
// Files that cannot be opened yield an *OpenError and are left out, as are
// files that are not regular (directories, devices, sockets), silently,
// as in FreeBSD. Parse is safe for concurrent use if fsys is.
func Parse(fsys fs.FS, paths ...string) ([]Script, []error) {
	scripts := make([]Script, 0, len(paths))
	var errs []error
	for _, p := range paths {
		f, err := fsys.Open(p)
		if err != nil {
			errs = append(errs, &OpenError{Op: "open", Path: p, Err: err})
			continue
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			errs = append(errs, &OpenError{Op: "stat", Path: p, Err: err})
			continue
		}
		if !st.Mode().IsRegular() {
			f.Close()
			continue
		}
		s, err := ParseReader(p, f)
		f.Close()
		if err != nil {
			errs = append(errs, err)
		}
		scripts = append(scripts, s)
	}
	return scripts, errs
}

// ParseFiles is Parse on the operating system's file system, with paths
// used exactly as given (relative to the working directory or absolute).
// Symbolic links are followed; non-regular files (directories, FIFOs,
// devices) are ignored without blocking on them. Safe for concurrent use.
func ParseFiles(paths ...string) ([]Script, []error) {
	scripts := make([]Script, 0, len(paths))
	var errs []error
	for _, p := range paths {
		s, ok, err := parseFile(p)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			scripts = append(scripts, s)
		}
	}
	return scripts, errs
}

// Header keywords, in the order FreeBSD's crunch_file tries them.
var headerKinds = [...]struct {
	prefix string
	kind   int
}{
	{"# REQUIRE:", kindRequire},
	{"# REQUIRES:", kindRequire},
	{"# PROVIDE:", kindProvide},
	{"# PROVIDES:", kindProvide},
	{"# BEFORE:", kindBefore},
	{"# KEYWORD:", kindKeyword},
	{"# KEYWORDS:", kindKeyword},
}

const (
	kindNone = iota
	kindRequire
	kindProvide
	kindBefore
	kindKeyword
)

// ParseReader parses the header of one script read from r; path is only
// recorded in the Script and used in errors. Reading stops at the end of
// the header block. The returned error, an *OpenError with Op "read", is
// non-nil only when r fails; the Script then holds what was parsed so far.
//
// The rules are FreeBSD rcorder(8)'s: a header line starts exactly with
// "# PROVIDE:", "# PROVIDES:", "# REQUIRE:", "# REQUIRES:", "# BEFORE:",
// "# KEYWORD:" or "# KEYWORDS:" (case-sensitive, no leading blank); lines
// before the first header line are skipped and the first other line after
// it ends the block; a line ending in an unescaped backslash continues on
// the next one; tokens are separated by spaces and tabs (a '#' is an
// ordinary token). Unlike FreeBSD, a trailing CR is stripped and recorded
// in Script.CRLines.
func ParseReader(path string, r io.Reader) (Script, error) {
	st := parserPool.Get().(*parseState)
	st.br.Reset(r)
	defer func() {
		st.br.Reset(nil)
		st.reset()
		parserPool.Put(st)
	}()

	var (
		lineNo   int
		inBlock  bool
		readErr  error
		sawEOF   bool
		hadCR    bool
		startNum int
		crLines  []int
	)
	for !sawEOF {
		// Assemble one logical line (fparseln with '\\' as continuation).
		logical := st.line[:0]
		hadCR = false
		startNum = lineNo + 1
		gotAny := false
		for {
			start := len(logical)
			var err error
			logical, err = readPhysical(st.br, logical)
			if err != nil {
				sawEOF = true
				if err != io.EOF {
					readErr = err
				}
				if len(logical) == start {
					// Nothing more: a pending continuation just ends.
					break
				}
			}
			gotAny = true
			lineNo++
			if n := len(logical); n > start && logical[n-1] == '\n' {
				logical = logical[:n-1]
			}
			if n := len(logical); n > start && logical[n-1] == '\r' {
				logical = logical[:n-1]
				hadCR = true
			}
			if !continues(logical) {
				break
			}
			logical = logical[:len(logical)-1]
			if sawEOF {
				break
			}
		}
		st.line = logical
		if !gotAny {
			break
		}
		if i := bytes.IndexByte(logical, 0); i >= 0 {
			logical = logical[:i] // C string semantics
		}
		kind, rest := headerKind(logical)
		if kind == kindNone {
			if inBlock {
				break
			}
			continue
		}
		inBlock = true
		if hadCR {
			crLines = append(crLines, startNum)
		}
		// Header text goes to one buffer; tokens are recorded as offsets.
		base := len(st.text)
		st.text = append(st.text, logical...)
		st.hdr = append(st.hdr, span{start: int32(base), end: int32(len(st.text)), line: int32(startNum)})
		off := base + len(logical) - len(rest)
		for i := 0; i < len(rest); {
			for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t') {
				i++
			}
			j := i
			for j < len(rest) && rest[j] != ' ' && rest[j] != '\t' {
				j++
			}
			if j > i {
				st.toks = append(st.toks, span{kind: int8(kind), start: int32(off + i), end: int32(off + j), line: int32(startNum)})
				st.count[kind]++
			}
			i = j
		}
	}
	s := st.script(path)
	s.CRLines = crLines
	if readErr != nil {
		return s, &OpenError{Op: "read", Path: path, Err: readErr}
	}
	return s, nil
}

// span locates a header line or a token in parseState.text.
type span struct {
	kind       int8
	start, end int32
	line       int32
}

// parseState is the reusable scratch space of ParseReader: a Script built
// from it costs four allocations (header text, tokens, line numbers,
// header lines) however many tokens it has.
type parseState struct {
	br    *bufio.Reader
	line  []byte
	text  []byte
	hdr   []span
	toks  []span
	count [kindKeyword + 1]int
}

var parserPool = sync.Pool{New: func() any {
	return &parseState{br: bufio.NewReaderSize(nil, 4096), line: make([]byte, 0, 256)}
}}

func (st *parseState) reset() {
	st.text, st.hdr, st.toks = st.text[:0], st.hdr[:0], st.toks[:0]
	st.count = [kindKeyword + 1]int{}
}

func (st *parseState) script(path string) Script {
	s := Script{Path: path}
	if len(st.hdr) == 0 {
		return s
	}
	text := string(st.text)
	s.Header = make([]HeaderLine, len(st.hdr))
	for i, h := range st.hdr {
		s.Header[i] = HeaderLine{Line: int(h.line), Text: text[h.start:h.end]}
	}
	if len(st.toks) == 0 {
		return s
	}
	strs := make([]string, len(st.toks))
	lines := make([]int, len(st.toks))
	// Lay the kinds out one after the other, each in token order.
	var at [kindKeyword + 1]int
	n := 0
	for k := kindRequire; k <= kindKeyword; k++ {
		at[k] = n
		n += st.count[k]
	}
	first := at
	for _, t := range st.toks {
		strs[at[t.kind]] = text[t.start:t.end]
		lines[at[t.kind]] = int(t.line)
		at[t.kind]++
	}
	sub := func(k int) ([]string, []int) {
		if st.count[k] == 0 {
			return nil, nil
		}
		a, b := first[k], first[k]+st.count[k]
		return strs[a:b:b], lines[a:b:b]
	}
	s.Requires, s.RequireLines = sub(kindRequire)
	s.Provides, s.ProvideLines = sub(kindProvide)
	s.Before, s.BeforeLines = sub(kindBefore)
	s.Keywords, s.KeywordLines = sub(kindKeyword)
	return s
}

// readPhysical appends one physical line (with its '\n', if any) to dst.
// It returns io.EOF, possibly with a final unterminated line appended.
func readPhysical(br *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		chunk, err := br.ReadSlice('\n')
		dst = append(dst, chunk...)
		if err != bufio.ErrBufferFull {
			return dst, err
		}
	}
}

// continues reports whether line ends in a backslash that is not itself
// escaped by an odd run of backslashes before it (fparseln's rule when
// escape and continuation characters are both '\\').
func continues(line []byte) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func headerKind(line []byte) (int, []byte) {
	if len(line) < 2 || line[0] != '#' || line[1] != ' ' {
		return kindNone, nil
	}
	for _, h := range headerKinds {
		if len(line) >= len(h.prefix) && string(line[:len(h.prefix)]) == h.prefix {
			return h.kind, line[len(h.prefix):]
		}
	}
	return kindNone, nil
}
