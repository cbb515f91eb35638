package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// sampleInit is an IKE_SA_INIT request as an initiator sends it.
func sampleInit() *Message {
	return &Message{
		Header: Header{SPIi: SPI{1, 2, 3, 4, 5, 6, 7, 8}, Version: Version20, Exchange: IKE_SA_INIT, Flags: FlagInitiator},
		Payloads: []Payload{
			&SA{Proposals: []Proposal{
				{Num: 1, Protocol: ProtoIKE, Transforms: []Transform{
					WithKeyLength(TransformENCR, ENCR_AES_GCM_16, 256),
					{Type: TransformPRF, ID: PRF_HMAC_SHA2_256},
					{Type: TransformDH, ID: DH_X25519},
				}},
				{Num: 2, Protocol: ProtoIKE, Transforms: []Transform{
					WithKeyLength(TransformENCR, ENCR_AES_CBC, 128),
					{Type: TransformPRF, ID: PRF_HMAC_SHA2_512},
					{Type: TransformINTEG, ID: AUTH_HMAC_SHA2_256_128},
					{Type: TransformDH, ID: DH_MODP2048, Attributes: []Attribute{{Type: 99, Value: []byte("tlv")}}},
				}},
			}},
			&KE{Group: DH_X25519, Data: bytes.Repeat([]byte{0xaa}, 32)},
			&Nonce{Data: bytes.Repeat([]byte{0x55}, 32)},
			&Notify{Code: NAT_DETECTION_SOURCE_IP, Data: bytes.Repeat([]byte{1}, 20)},
			&Notify{Code: NAT_DETECTION_DESTINATION_IP, Data: bytes.Repeat([]byte{2}, 20)},
			&VendorID{Data: []byte("keel")},
			&Unknown{T: 200, Data: []byte{9, 9}},
		},
	}
}

// sampleAuthInner is the plaintext of an IKE_AUTH request.
func sampleAuthInner() []Payload {
	return []Payload{
		&ID{IDType: ID_FQDN, Data: []byte("keel.example")},
		&Cert{Encoding: CertX509Signature, Data: []byte{0x30, 0x03, 1, 2, 3}},
		&Cert{Request: true, Encoding: CertX509Signature},
		&ID{Responder: true, IDType: ID_IPV4_ADDR, Data: []byte{10, 0, 0, 1}},
		&Auth{Method: AuthSharedKey, Data: bytes.Repeat([]byte{7}, 32)},
		&Notify{Code: INITIAL_CONTACT},
		&SA{Proposals: []Proposal{{Num: 1, Protocol: ProtoESP, SPI: []byte{0xc0, 0, 0, 1}, Transforms: []Transform{
			WithKeyLength(TransformENCR, ENCR_AES_GCM_16, 128), {Type: TransformESN, ID: ESN_NO}}}}},
		&TS{Selectors: []Selector{{EndPort: 0xffff, StartAddr: netip.MustParseAddr("10.1.0.0"), EndAddr: netip.MustParseAddr("10.1.0.255")}}},
		&TS{Responder: true, Selectors: []Selector{
			{Protocol: 6, StartPort: 80, EndPort: 80, StartAddr: netip.MustParseAddr("10.2.0.0"), EndAddr: netip.MustParseAddr("10.2.255.255")},
			{EndPort: 0xffff, StartAddr: netip.MustParseAddr("::ffff:10.0.0.1"), EndAddr: netip.MustParseAddr("fd00::ffff")},
		}},
		&Delete{Protocol: ProtoESP, SPISize: 4, SPIs: [][]byte{{1, 2, 3, 4}, {5, 6, 7, 8}}},
		&Delete{Protocol: ProtoIKE},
	}
}

func TestRoundTrip(t *testing.T) {
	first, inner, err := EncodePayloads(sampleAuthInner())
	if err != nil {
		t.Fatal(err)
	}
	auth := &Message{
		Header:   Header{SPIi: SPI{1}, SPIr: SPI{2}, Version: Version20, Exchange: IKE_AUTH, Flags: FlagInitiator, MessageID: 1},
		Payloads: []Payload{&Encrypted{Next: first, Body: append([]byte("iv-iv-iv-iv-iv-i"), inner...)}},
	}
	for name, m := range map[string]*Message{"IKE_SA_INIT": sampleInit(), "IKE_AUTH": auth} {
		t.Run(name, func(t *testing.T) {
			b, err := m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("decode(encode(m)) differs:\n got %#v\nwant %#v", got, m)
			}
			b2, _ := got.Encode()
			if !bytes.Equal(b, b2) {
				t.Fatal("re-encoding differs")
			}
		})
	}
	ps, err := DecodePayloads(first, inner)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ps, sampleAuthInner()) {
		t.Fatal("inner chain differs after a round trip")
	}
}

// TestKnownBytes checks the encoder against octets laid out by hand from
// RFC 7296 §3.1-3.3 (not produced by this code).
func TestKnownBytes(t *testing.T) {
	m := &Message{
		Header: Header{SPIi: SPI{0, 0, 0, 0, 0, 0, 0, 1}, Version: Version20, Exchange: IKE_SA_INIT, Flags: FlagInitiator},
		Payloads: []Payload{&SA{Proposals: []Proposal{{Num: 1, Protocol: ProtoIKE, Transforms: []Transform{
			WithKeyLength(TransformENCR, ENCR_AES_CBC, 128), {Type: TransformDH, ID: DH_ECP256}}}}}},
	}
	want := "0000000000000001" + "0000000000000000" + "21" + "20" + "22" + "08" + "00000000" + "0000003c" +
		// SA: next none, flags, length 32
		"00" + "00" + "0020" +
		// proposal: last, reserved, length 28, num 1, IKE, SPI size 0, 2 transforms
		"00" + "00" + "001c" + "01" + "01" + "00" + "02" +
		// ENCR AES-CBC with key length 128 (TV: 0x800e 0x0080)
		"03" + "00" + "000c" + "01" + "00" + "000c" + "800e0080" +
		// DH 19, last
		"00" + "00" + "0008" + "04" + "00" + "0013"
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(b) != want {
		t.Fatalf("encoding\n got %x\nwant %s", b, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := sampleInit().Encode()
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	setLen := func(b []byte) []byte { b[24], b[25], b[26], b[27] = 0, 0, byte(len(b)>>8), byte(len(b)); return b }
	// Offsets in good: SA payload at 28; its length at 30.
	tests := []struct {
		name   string
		in     []byte
		notify NotifyType
		reason string
	}{
		{"short", good[:27], INVALID_SYNTAX, "shorter than the 28-byte header"},
		{"version", mod(func(b []byte) []byte { b[17] = 0x30; return b }), INVALID_MAJOR_VERSION, "major version 3"},
		{"length field", mod(func(b []byte) []byte { b[27]++; return b }), INVALID_SYNTAX, "length field"},
		{"truncated", setLen(append([]byte(nil), good[:len(good)-1]...)), INVALID_SYNTAX, "payload length"},
		{"payload length 3", mod(func(b []byte) []byte { b[30], b[31] = 0, 3; return b }), INVALID_SYNTAX, "payload length 3"},
		{"trailing", setLen(append(append([]byte(nil), good...), 0)), INVALID_SYNTAX, "after the last payload"},
		{"critical unknown", mod(func(b []byte) []byte {
			// The last payload (type 200, 6 bytes) gets its critical bit set.
			b[len(b)-6+1] |= 0x80
			return b
		}), UNSUPPORTED_CRITICAL_PAYLOAD, "critical bit"},
		{"nonce short", buildRaw(PayloadNonce, make([]byte, 15)), INVALID_SYNTAX, "nonce of 15 bytes"},
		{"ke empty", buildRaw(PayloadKE, []byte{0, 19, 0, 0}), INVALID_SYNTAX, "no key exchange data"},
		{"ipv4 id", buildRaw(PayloadIDi, []byte{1, 0, 0, 0, 10, 0, 0}), INVALID_SYNTAX, "ID_IPV4_ADDR of 3 bytes"},
		{"ts type", buildRaw(PayloadTSi, []byte{1, 0, 0, 0, 9, 0, 0, 16, 0, 0, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8}), INVALID_SYNTAX, "unsupported TS type 9"},
		{"ts count", buildRaw(PayloadTSi, []byte{2, 0, 0, 0, 7, 0, 0, 16, 0, 0, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8}), INVALID_SYNTAX, "selector 2 of 2"},
		{"delete ike spis", buildRaw(PayloadD, []byte{1, 0, 0, 1}), INVALID_SYNTAX, "IKE delete"},
		{"delete count", buildRaw(PayloadD, []byte{3, 4, 0, 2, 1, 2, 3, 4}), INVALID_SYNTAX, "2 SPIs of 4 bytes"},
		{"esp spi size", buildRaw(PayloadSA, []byte{0, 0, 0, 12, 1, 3, 2, 1, 0, 0, 0, 8, 1, 0, 0, 20}[:12]), INVALID_SYNTAX, "ESP proposal with a 2-byte SPI"},
		{"transform count", buildRaw(PayloadSA, []byte{0, 0, 0, 16, 1, 1, 0, 2, 3, 0, 0, 8, 1, 0, 0, 20}), INVALID_SYNTAX, "transform 2 of 2"},
		{"transform more flag", buildRaw(PayloadSA, []byte{0, 0, 0, 16, 1, 1, 0, 1, 3, 0, 0, 8, 1, 0, 0, 20}), INVALID_SYNTAX, "last substruc 3"},
		{"keylen tlv", buildRaw(PayloadSA, []byte{0, 0, 0, 20, 1, 1, 0, 1, 0, 0, 0, 12, 1, 0, 0, 12, 0, 14, 0, 0}), INVALID_SYNTAX, "TLV form"},
		{"sk not last", buildChain([]byte{46, 0, 0, 5, 1, 0, 0, 0, 5}), INVALID_SYNTAX, "must be last"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode: %v, want an *Error", err)
			}
			if e.Notify != tc.notify || !strings.Contains(e.Error(), tc.reason) {
				t.Fatalf("Decode: %v (notify %v), want %v containing %q", err, e.Notify, tc.notify, tc.reason)
			}
		})
	}
}

// buildRaw returns a message whose only payload is of type t with body.
func buildRaw(t PayloadType, body []byte) []byte {
	b := make([]byte, HeaderLen, HeaderLen+4+len(body))
	h := Header{Version: Version20, Exchange: IKE_SA_INIT}
	b = append(b, 0, 0, byte((4+len(body))>>8), byte(4+len(body)))
	b = append(b, body...)
	h.put(b, t, len(b))
	return b
}

// buildChain returns a message whose payload chain is raw, the first of type SK.
func buildChain(raw []byte) []byte {
	b := append(make([]byte, HeaderLen), raw...)
	h := Header{Version: Version20, Exchange: IKE_AUTH}
	h.put(b, PayloadSK, len(b))
	return b
}

func TestNoAliasing(t *testing.T) {
	b, _ := sampleInit().Encode()
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xff
	}
	if !reflect.DeepEqual(m, sampleInit()) {
		t.Fatal("decoded message changed when its input buffer was overwritten")
	}
}
