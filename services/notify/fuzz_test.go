package notify

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse: any datagram (senders are untrusted local processes) parses
// without panicking; accepted fields have non-empty keys without '=' or
// newlines and values without newlines, and re-encoding them parses back to
// the same fields; errors are short, printable and quote at most a bounded
// part of the input. Seed corpus: testdata/fuzz/FuzzParse plus the table
// below.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"READY=1", "READY=1\nSTATUS=up and running\n", "STATUS=a=b", "", "garbage", "=1",
		"MAINPID=123\nEXTEND_TIMEOUT_USEC=5000000", "STATUS=\x1b[31mred\x1b[0m", "STATUS=\xff\xfe\n\n\nREADY=1",
		"A=1\nA=2", "\n\n", strings.Repeat("K=v\n", 1000), "STATUS=" + strings.Repeat("é", 2000),
		"FDSTORE=1\nFDNAME=x", "READY=1\r\nSTATUS=crlf",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fields, err := Parse(b)
		if err != nil {
			if fields != nil {
				t.Fatal("fields returned with an error")
			}
			msg := err.Error()
			if len(msg) > 200 || !utf8.ValidString(msg) || strings.ContainsAny(msg, "\n\r\x1b") {
				t.Fatalf("error message unsafe to log (%d bytes): %q", len(msg), msg)
			}
			return
		}
		var enc strings.Builder
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			v := fields[k]
			if k == "" || strings.ContainsAny(k, "=\n") || strings.Contains(v, "\n") {
				t.Fatalf("bad field %q=%q", k, v)
			}
			enc.WriteString(k + "=" + v + "\n")
		}
		again, err := Parse([]byte(enc.String()))
		if err != nil || !maps.Equal(again, fields) {
			t.Fatalf("re-encoded fields parse to %v, %v; want %v", again, err, fields)
		}
	})
}
