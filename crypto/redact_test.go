package crypto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestSessionParamsRedacted checks that no fmt verb, encoding/json or slog
// handler prints the key bytes of SessionParams.
func TestSessionParamsRedacted(t *testing.T) {
	key := []byte("KEYKEYKEYKEYKEY!SALT")
	auth := []byte("AUTHAUTHAUTHAUTHAUTH")
	p := SessionParams{Alg: Algorithm{Cipher: CipherAESGCM, KeyBits: 128}, CipherKey: key, AuthKey: auth}
	type holder struct {
		P SessionParams
		Q *SessionParams
	}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
		outs = append(outs, fmt.Sprintf(verb, p), fmt.Sprintf(verb, holder{p, &p}))
	}
	j, err := json.Marshal(holder{p, &p})
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j))
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "params", p, "ptr", &p)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "params", p)
	outs = append(outs, buf.String())
	for _, o := range outs {
		for _, secret := range []string{"KEYKEY", "AUTHAUTH", "SALT", fmt.Sprintf("%x", key[:6]), fmt.Sprintf("%X", key[:6]), "S0VZS0VZ"} {
			if strings.Contains(o, secret) {
				t.Errorf("key material %q leaked in %q", secret, o)
			}
		}
		if !strings.Contains(o, "redacted") {
			t.Errorf("output %q does not say redacted", o)
		}
	}
}
