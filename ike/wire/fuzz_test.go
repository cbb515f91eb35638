package wire

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The seed corpora are under testdata/fuzz/<target>/, named for what they
// hold: messages built by sampleInit and sampleAuthInner (seed-*), the
// payload bodies they contain, and real strongSwan 5.9.8 charon messages
// captured by the ike/exchange interop test (charon-*).

// FuzzDecode: Decode never panics, and what it accepts re-encodes to a
// message that decodes to the same value.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Decode error %T is not an *Error: %v", err, err)
			}
			return
		}
		checkMessageRoundTrip(t, m)
		if len(m.Payloads) == 0 {
			return
		}
		if sk, ok := m.Payloads[len(m.Payloads)-1].(*Encrypted); ok {
			// The plaintext an SK payload would carry goes through the same chain parser.
			if ps, err := DecodePayloads(sk.Next, sk.Body); err == nil {
				checkChainRoundTrip(t, ps)
			}
		}
	})
}

func checkMessageRoundTrip(t *testing.T, m *Message) {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatalf("Encode of a decoded message: %v", err)
	}
	m2, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode(m)): %v", err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("Decode(Encode(m)) != m:\n%#v\n%#v", m, m2)
	}
}

func checkChainRoundTrip(t *testing.T, ps []Payload) {
	t.Helper()
	first, b, err := EncodePayloads(ps)
	if err != nil {
		t.Fatalf("EncodePayloads of a decoded chain: %v", err)
	}
	ps2, err := DecodePayloads(first, b)
	if err != nil {
		t.Fatalf("DecodePayloads(EncodePayloads(ps)): %v", err)
	}
	if !reflect.DeepEqual(ps, ps2) {
		t.Fatalf("chain round trip differs:\n%#v\n%#v", ps, ps2)
	}
}

// fuzzBody is the property every payload parser's target checks: no
// panic, and a parsed body re-encodes to one that parses the same.
func fuzzBody(f *testing.F, typ PayloadType) {
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseBody(typ, body)
		if err != nil {
			return
		}
		if p.Type() != typ {
			t.Fatalf("parsed a %s body into a %s payload", typ, p.Type())
		}
		b, err := p.appendBody(nil)
		if err != nil {
			t.Fatalf("re-encoding a parsed %s: %v", typ, err)
		}
		p2, err := ParseBody(typ, b)
		if err != nil {
			t.Fatalf("re-parsing a re-encoded %s: %v", typ, err)
		}
		if !reflect.DeepEqual(p, p2) {
			t.Fatalf("%s round trip differs:\n%#v\n%#v", typ, p, p2)
		}
	})
}

func FuzzSA(f *testing.F)      { fuzzBody(f, PayloadSA) }
func FuzzKE(f *testing.F)      { fuzzBody(f, PayloadKE) }
func FuzzIDi(f *testing.F)     { fuzzBody(f, PayloadIDi) }
func FuzzCERT(f *testing.F)    { fuzzBody(f, PayloadCERT) }
func FuzzCERTREQ(f *testing.F) { fuzzBody(f, PayloadCERTREQ) }
func FuzzAUTH(f *testing.F)    { fuzzBody(f, PayloadAUTH) }
func FuzzNonce(f *testing.F)   { fuzzBody(f, PayloadNonce) }
func FuzzNotify(f *testing.F)  { fuzzBody(f, PayloadN) }
func FuzzDelete(f *testing.F)  { fuzzBody(f, PayloadD) }
func FuzzTSi(f *testing.F)     { fuzzBody(f, PayloadTSi) }

// fuzzTargetOf names the body fuzz target of each payload type.
var fuzzTargetOf = map[PayloadType]string{
	PayloadSA: "FuzzSA", PayloadKE: "FuzzKE", PayloadIDi: "FuzzIDi", PayloadIDr: "FuzzIDi",
	PayloadCERT: "FuzzCERT", PayloadCERTREQ: "FuzzCERTREQ", PayloadAUTH: "FuzzAUTH",
	PayloadNonce: "FuzzNonce", PayloadN: "FuzzNotify", PayloadD: "FuzzDelete",
	PayloadTSi: "FuzzTSi", PayloadTSr: "FuzzTSi",
}

// WriteSeeds writes msg (a whole message) as a FuzzDecode seed named
// name, and each payload body of it (and of chain, the plaintext of its
// SK payload, if any) as a seed of that payload's target. The interop test
// calls it, through KEEL_IKE_WRITE_SEEDS, with captured charon messages.
func writeSeeds(t *testing.T, dir, name string, msg []byte, chain []Payload) {
	t.Helper()
	put := func(target, n string, b []byte) {
		d := filepath.Join(dir, target)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(d, n), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("FuzzDecode", name, msg)
	m, err := Decode(msg)
	if err != nil {
		t.Fatalf("seed %s does not decode: %v", name, err)
	}
	for i, p := range append(m.Payloads, chain...) {
		target, ok := fuzzTargetOf[p.Type()]
		if !ok {
			continue
		}
		b, _ := p.appendBody(nil)
		put(target, fmt.Sprintf("%s-%d-%s", name, i, p.Type()), b)
	}
}

// TestWriteSeeds regenerates the seed-* corpora when KEEL_IKE_WRITE_SEEDS=1.
func TestWriteSeeds(t *testing.T) {
	if os.Getenv("KEEL_IKE_WRITE_SEEDS") != "1" {
		t.Skip("set KEEL_IKE_WRITE_SEEDS=1 to regenerate testdata/fuzz seed-*")
	}
	init, err := sampleInit().Encode()
	if err != nil {
		t.Fatal(err)
	}
	writeSeeds(t, "testdata/fuzz", "seed-ike-sa-init", init, nil)
	inner := sampleAuthInner()
	first, pt, _ := EncodePayloads(inner)
	auth := &Message{Header: Header{Version: Version20, Exchange: IKE_AUTH, MessageID: 1},
		Payloads: []Payload{&Encrypted{Next: first, Body: pt}}}
	b, err := auth.Encode()
	if err != nil {
		t.Fatal(err)
	}
	writeSeeds(t, "testdata/fuzz", "seed-ike-auth-plain-sk", b, inner)
}
