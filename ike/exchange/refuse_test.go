package exchange

import (
	"testing"

	"github.com/keelinit/keel/ike/wire"
)

// TestResponderRefusesInit: a malformed IKE_SA_INIT request gets the
// unprotected notification RFC 7296 names (§2.5, §2.21.1, §3.1) and
// leaves no state in the Server.
func TestResponderRefusesInit(t *testing.T) {
	ic, rc := pairConfigs("shared-secret-of-i-and-r")
	in, err := NewInitiator(ic)
	if err != nil {
		t.Fatal(err)
	}
	good, err := in.Start()
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.Decode(good)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(m *wire.Message) []byte {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	critical := *m
	critical.Payloads = append(append([]wire.Payload(nil), m.Payloads...), &wire.Unknown{T: 250, Critical: true, Data: []byte{1}})
	noKE := *m
	noKE.Payloads = []wire.Payload{m.Payloads[0], m.Payloads[2]}
	v3 := append([]byte(nil), good...)
	v3[17] = 0x30
	tests := []struct {
		name   string
		in     []byte
		notify wire.NotifyType
		data   []byte
	}{
		{"unknown critical payload", enc(&critical), wire.UNSUPPORTED_CRITICAL_PAYLOAD, []byte{250}},
		{"no KE", enc(&noKE), wire.INVALID_SYNTAX, nil},
		{"major version 3", v3, wire.INVALID_MAJOR_VERSION, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := &Server{Config: rc}
			reply := srv.HandleDatagram(tc.in, pairR, pairI)
			rm, err := wire.Decode(reply)
			if err != nil {
				t.Fatalf("reply: %v", err)
			}
			n, ok := rm.Payloads[0].(*wire.Notify)
			if len(rm.Payloads) != 1 || !ok || n.Code != tc.notify || string(n.Data) != string(tc.data) || !rm.Response() {
				t.Fatalf("reply %#v, want only N(%v) with data %v", rm.Payloads, tc.notify, tc.data)
			}
			if len(srv.half) != 0 || len(srv.sas) != 0 {
				t.Fatal("state kept for a refused IKE_SA_INIT")
			}
		})
	}
}
