package setkey

import "fmt"

type tokKind uint8

const (
	tokEOF    tokKind = iota
	tokWord           // a run of non-space bytes other than ; # "
	tokString         // "..." ; off/end exclude the quotes
	tokSemi           // ;
	tokErr            // a lexical error; see lexer.err
)

// token refers into the source buffer by offset so that key material is
// never copied into (unzeroable) strings.
type token struct {
	kind      tokKind
	off, end  int
	line, col int
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isWordByte(c byte) bool {
	return !isSpace(c) && c != ';' && c != '#' && c != '"' && c >= 0x20 && c != 0x7f
}

// lexer produces tokens on demand, so memory does not grow with the file.
// Comments run from '#' to the end of the line.
type lexer struct {
	file      string
	src       []byte
	i         int
	line, col int
	err       *ParseError // first lexical error; then only tokErr
}

func newLexer(file string, src []byte) *lexer {
	l := &lexer{file: file, src: src, line: 1, col: 1}
	if len(src) >= 3 && src[0] == 0xef && src[1] == 0xbb && src[2] == 0xbf {
		l.i = 3 // UTF-8 byte order mark
	}
	return l
}

func (l *lexer) adv() {
	if l.src[l.i] == '\n' {
		l.line++
		l.col = 1
	} else {
		l.col++
	}
	l.i++
}

func (l *lexer) fail(line, col int, field, msg string) token {
	l.err = &ParseError{File: l.file, Line: line, Col: col, Field: field, Msg: msg}
	return token{kind: tokErr, off: l.i, end: l.i, line: line, col: col}
}

// next returns the next token, tokEOF at the end, or tokErr (forever) after
// a lexical error.
func (l *lexer) next() token {
	if l.err != nil {
		return token{kind: tokErr, off: l.i, end: l.i, line: l.err.Line, col: l.err.Col}
	}
	for l.i < len(l.src) {
		c := l.src[l.i]
		switch {
		case isSpace(c):
			l.adv()
		case c == '#':
			for l.i < len(l.src) && l.src[l.i] != '\n' {
				l.adv()
			}
		case c == ';':
			t := token{kind: tokSemi, off: l.i, end: l.i + 1, line: l.line, col: l.col}
			l.adv()
			return t
		case c == '"':
			t := token{kind: tokString, off: l.i + 1, line: l.line, col: l.col}
			l.adv()
			for l.i < len(l.src) && l.src[l.i] != '"' {
				l.adv()
			}
			if l.i >= len(l.src) {
				return l.fail(t.line, t.col, "string", "unterminated quoted string")
			}
			t.end = l.i
			l.adv()
			return t
		case c < 0x20 || c == 0x7f:
			return l.fail(l.line, l.col, "", fmt.Sprintf("unexpected control character 0x%02x", c))
		default:
			t := token{kind: tokWord, off: l.i, line: l.line, col: l.col}
			for l.i < len(l.src) && isWordByte(l.src[l.i]) {
				l.adv()
			}
			t.end = l.i
			return t
		}
	}
	return token{kind: tokEOF, off: len(l.src), end: len(l.src), line: l.line, col: l.col}
}
