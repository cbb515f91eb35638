package setkey

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// recordingReader hands out src in small chunks and remembers every buffer
// Parse gave it to fill, so a test can check they were all wiped.
type recordingReader struct {
	src   []byte
	chunk int
	bufs  [][]byte
}

func (r *recordingReader) Read(p []byte) (int, error) {
	if len(r.src) == 0 {
		return 0, io.EOF
	}
	r.bufs = append(r.bufs, p)
	n := copy(p[:min(len(p), r.chunk)], r.src)
	r.src = r.src[n:]
	return n, nil
}

// manySAs is a valid configuration several times larger than the initial
// read buffer, so that reading it outgrows buffers.
func manySAs(n int, key string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "add 192.0.2.1 192.0.2.2 esp %d -m tunnel -E aes-gcm-16 0x%s;\n", 0x1000+i, key)
	}
	return b.String()
}

// TestParseWipesReadBuffers: every buffer Parse reads the (key-holding)
// input into is zero once Parse returns, on success and on error, including
// the ones it outgrew while reading (io.ReadAll would drop those
// unwiped).
func TestParseWipesReadBuffers(t *testing.T) {
	const key = "c0ffee5ec2e7c0ffee5ec2e7c0ffee5ec2e7c0ff"
	tests := []struct {
		name, text string
		ok         bool
	}{
		{"valid", manySAs(200, key), true},
		{"error at end", manySAs(200, key) + "add 192.0.2.1 192.0.2.2 esp 1 -E aes-gcm-16 0x" + key + ";\n", false},
		{"error early", "bogus;\n" + manySAs(200, key), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recordingReader{src: []byte(tt.text), chunk: 1000}
			cfg, err := Parse("big.conf", r)
			if (err == nil) != tt.ok {
				t.Fatalf("Parse: %v", err)
			}
			cfg.Zero()
			if len(r.bufs) < 3 {
				t.Fatalf("only %d reads: the input does not exercise buffer growth", len(r.bufs))
			}
			distinct := map[*byte]bool{}
			for i, b := range r.bufs {
				distinct[&b[:1][0]] = true
				full := b[:cap(b)]
				if j := bytes.IndexFunc(full, func(r rune) bool { return r != 0 }); j >= 0 {
					t.Fatalf("read buffer %d (cap %d) not wiped at %d: %q", i, cap(b), j, full[j:min(j+20, len(full))])
				}
			}
			if tt.ok && len(distinct) < 2 {
				t.Logf("note: reads went to %d distinct buffers", len(distinct))
			}
		})
	}
}

// TestSAEncodingsRedact: an SA (by value, by pointer, inside an Op or a
// Config) printed with any fmt verb, marshalled to JSON, or logged with
// slog's text and JSON handlers never shows its keys.
func TestSAEncodingsRedact(t *testing.T) {
	const enc = "0x5ec2e75ec2e75ec2e75ec2e75ec2e75e"
	const auth = "0xa17ba17ba17ba17ba17ba17ba17ba17ba17ba17b"
	cfg, err := Parse("k.conf", strings.NewReader("add 192.0.2.1 192.0.2.2 esp 0x1234 -E aes-cbc "+enc+" -A hmac-sha1 "+auth+";\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Zero()
	sa := cfg.Ops[0].SA
	secrets := []string{enc[2:14], auth[2:14], strings.ToUpper(enc[2:14])}
	raw, _ := hex.DecodeString(enc[2:])
	secrets = append(secrets, string(raw[:8]))
	for _, b64 := range [][]byte{raw} {
		j, _ := json.Marshal(b64) // base64 as encoding/json writes []byte
		secrets = append(secrets, strings.Trim(string(j), `"`)[:10])
	}
	var outs []string
	add := func(what, s string) { outs = append(outs, what+": "+s) }
	for _, v := range []any{*sa, sa, cfg.Ops[0], &cfg.Ops[0], cfg.Ops, *cfg, cfg} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
			add(fmt.Sprintf("%s %T", verb, v), fmt.Sprintf(verb, v))
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json %T: %v", v, err)
		}
		add(fmt.Sprintf("json %T", v), string(j))
		for _, h := range []func(io.Writer) slog.Handler{
			func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
			func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) },
		} {
			var buf bytes.Buffer
			slog.New(h(&buf)).Info("sa", "sa", v)
			add(fmt.Sprintf("slog %T", v), buf.String())
		}
	}
	add("Format", Format(cfg))
	for _, o := range outs {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("key material %q in %s", s, o)
			}
		}
	}
	// The redacted forms still say what the SA is.
	j, _ := json.Marshal(sa)
	if !strings.Contains(string(j), "0x1234") || !strings.Contains(string(j), "redacted 16 bytes") {
		t.Errorf("JSON of an SA: %s", j)
	}
	// The leak check itself works: the keys are there before Zero.
	if !strings.Contains(format(cfg, true), enc[2:14]) {
		t.Fatal("test secrets do not match the configured key")
	}
}
