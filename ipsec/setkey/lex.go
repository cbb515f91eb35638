package setkey

import "fmt"

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokWord
	tokString // "..." ; off/end exclude the quotes
	tokSemi
)

// token refers into the source buffer by offset so that key material is
// never copied into (unzeroable) strings.
type token struct {
	kind     tokKind
	off, end int
	line     int
	col      int
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// lex splits src into tokens. Comments run from '#' to end of line.
func lex(file string, src []byte) ([]token, error) {
	var toks []token
	line, col := 1, 1
	i := 0
	if len(src) >= 3 && src[0] == 0xef && src[1] == 0xbb && src[2] == 0xbf {
		i = 3 // UTF-8 byte order mark
	}
	adv := func() {
		if src[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
		i++
	}
	for i < len(src) {
		c := src[i]
		switch {
		case isSpace(c):
			adv()
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				adv()
			}
		case c == ';':
			toks = append(toks, token{kind: tokSemi, off: i, end: i + 1, line: line, col: col})
			adv()
		case c == '"':
			t := token{kind: tokString, off: i + 1, line: line, col: col}
			adv()
			for i < len(src) && src[i] != '"' {
				adv()
			}
			if i >= len(src) {
				return nil, &ParseError{File: file, Line: t.line, Col: t.col, Field: "string", Msg: "unterminated quoted string"}
			}
			t.end = i
			adv()
			toks = append(toks, t)
		case c < 0x20 || c == 0x7f:
			return nil, &ParseError{File: file, Line: line, Col: col, Msg: fmt.Sprintf("unexpected control character 0x%02x", c)}
		default:
			t := token{kind: tokWord, off: i, line: line, col: col}
			for i < len(src) && !isSpace(src[i]) && src[i] != ';' && src[i] != '#' && src[i] != '"' && src[i] >= 0x20 && src[i] != 0x7f {
				adv()
			}
			t.end = i
			toks = append(toks, t)
		}
	}
	toks = append(toks, token{kind: tokEOF, off: len(src), end: len(src), line: line, col: col})
	return toks, nil
}
