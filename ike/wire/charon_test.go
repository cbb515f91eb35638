package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCharonCaptures decodes the strongSwan 5.9.8 messages captured by
// ike/exchange's interop test (testdata/fuzz/FuzzDecode/charon-*) and
// checks that each re-encodes to exactly the octets charon sent.
func TestCharonCaptures(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzDecode/charon-*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no charon captures (%v)", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a go fuzz v1 []byte file", f)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b := []byte(s)
		m, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if m.Exchange != IKE_SA_INIT && m.Exchange != IKE_AUTH {
			t.Fatalf("%s: exchange %s", f, m.Exchange)
		}
		if m.Exchange == IKE_SA_INIT && (Find(m.Payloads, PayloadSA) == nil || Find(m.Payloads, PayloadKE) == nil) {
			t.Fatalf("%s: IKE_SA_INIT response without SA or KE", f)
		}
		out, err := m.Encode()
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("%s: re-encoding differs from charon's octets (%v)", f, err)
		}
		if sk, ok := m.Payloads[len(m.Payloads)-1].(*Encrypted); ok && strings.HasSuffix(f, "-plaintext") {
			ps, err := DecodePayloads(sk.Next, sk.Body)
			if err != nil {
				t.Fatalf("%s: inner payloads: %v", f, err)
			}
			id := Find(ps, PayloadIDr)
			if !m.Response() {
				id = Find(ps, PayloadIDi)
			}
			if id == nil || Find(ps, PayloadAUTH) == nil || Find(ps, PayloadTSr) == nil {
				t.Fatalf("%s: IKE_AUTH message lacks its ID, AUTH or TSr", f)
			}
		}
	}
}
