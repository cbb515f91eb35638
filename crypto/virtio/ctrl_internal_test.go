//go:build linux

package virtio

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/virtio/spec"
	"github.com/keelinit/keel/internal/testwait"
)

// rawCreate sends one CREATE_SESSION and returns the device's id and
// status.
func rawCreate(t *testing.T, p *Provider, c *spec.CreateSession) (uint64, uint8) {
	t.Helper()
	op := &ctrlOp{inLen: spec.SessionInputLen, build: func(out []byte) (int, error) { return spec.EncodeCreate(out, c) }}
	p.ctrl([]*ctrlOp{op})
	if op.err != nil {
		t.Fatal(op.err)
	}
	return binary.LittleEndian.Uint64(op.res[0:]), uint8(binary.LittleEndian.Uint32(op.res[8:]))
}

func rawDestroy(t *testing.T, p *Provider, opcode uint32, id uint64) uint8 {
	t.Helper()
	op := &ctrlOp{inLen: 1, build: func(out []byte) (int, error) { return spec.EncodeDestroy(out, opcode, id), nil }}
	p.ctrl([]*ctrlOp{op})
	if op.err != nil {
		t.Fatal(op.err)
	}
	return op.res[0]
}

// TestControlQueueStatusCodes drives the device's control queue with
// cipher, MAC and AEAD requests and checks the spec's status codes.
func TestControlQueueStatusCodes(t *testing.T) {
	for _, mode := range []Mode{ModeAsync, ModeDepth1Poll} {
		p, err := Start(context.Background(), Options{MaxSessions: 3, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		k16, k32 := make([]byte, 16), make([]byte, 32)
		tests := []struct {
			name string
			c    spec.CreateSession
			want uint8
		}{
			{"cipher-ok", spec.CreateSession{Opcode: spec.OpCipherCreateSession, SymOp: spec.SymOpCipher, CipherAlgo: spec.CipherAESCBC, CipherKey: k16, Dir: spec.DirEncrypt}, spec.StatusOK},
			{"cipher-notsupp", spec.CreateSession{Opcode: spec.OpCipherCreateSession, SymOp: spec.SymOpCipher, CipherAlgo: 5 /* DES-ECB */, CipherKey: k16, Dir: spec.DirEncrypt}, spec.StatusNotSupp},
			{"cipher-key-rejected", spec.CreateSession{Opcode: spec.OpCipherCreateSession, SymOp: spec.SymOpCipher, CipherAlgo: spec.CipherAESCBC, CipherKey: make([]byte, 15), Dir: spec.DirEncrypt}, spec.StatusKeyRejected},
			{"cipher-badmsg-optype", spec.CreateSession{Opcode: spec.OpCipherCreateSession, SymOp: 7, CipherAlgo: spec.CipherAESCBC, CipherKey: k16}, spec.StatusBadMsg},
			{"mac-ok", spec.CreateSession{Opcode: spec.OpMACCreateSession, MACAlgo: spec.MACHMACSHA256, HashLen: 16, AuthKey: k32}, spec.StatusOK},
			{"mac-notsupp", spec.CreateSession{Opcode: spec.OpMACCreateSession, MACAlgo: 1 /* HMAC-MD5 */, HashLen: 12, AuthKey: k16}, spec.StatusNotSupp},
			{"mac-badmsg-hashlen", spec.CreateSession{Opcode: spec.OpMACCreateSession, MACAlgo: spec.MACHMACSHA1, HashLen: 64, AuthKey: k16}, spec.StatusBadMsg},
			{"aead-key-rejected", spec.CreateSession{Opcode: spec.OpAEADCreateSession, AEADAlgo: spec.AEADChaCha20Poly1305, AEADKey: k16, TagLen: 16, Dir: spec.DirEncrypt}, spec.StatusKeyRejected},
			{"aead-notsupp-ccm", spec.CreateSession{Opcode: spec.OpAEADCreateSession, AEADAlgo: 2 /* CCM */, AEADKey: k16, TagLen: 16, Dir: spec.DirEncrypt}, spec.StatusNotSupp},
			{"aead-ok", spec.CreateSession{Opcode: spec.OpAEADCreateSession, AEADAlgo: spec.AEADGCM, AEADKey: k16, TagLen: 16, Dir: spec.DirDecrypt}, spec.StatusOK},
			// MaxSessions is 3 and three were created above.
			{"nospc", spec.CreateSession{Opcode: spec.OpAEADCreateSession, AEADAlgo: spec.AEADGCM, AEADKey: k16, TagLen: 16, Dir: spec.DirDecrypt}, spec.StatusNoSpc},
		}
		var ids []uint64
		for _, tc := range tests {
			id, st := rawCreate(t, p, &tc.c)
			if st != tc.want {
				t.Errorf("mode %d %s: status %s, want %s", mode, tc.name, spec.StatusString(st), spec.StatusString(tc.want))
			}
			if st == spec.StatusOK {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			if st := rawDestroy(t, p, spec.OpCipherDestroySess, id); st != spec.StatusOK {
				t.Errorf("destroy %d: %s", id, spec.StatusString(st))
			}
		}
		if st := rawDestroy(t, p, spec.OpCipherDestroySess, ids[0]); st != spec.StatusInvSess {
			t.Errorf("double destroy: %s, want INVSESS", spec.StatusString(st))
		}
		// A malformed control request (truncated key area).
		op := &ctrlOp{inLen: spec.SessionInputLen, build: func(out []byte) (int, error) {
			n, err := spec.EncodeCreate(out, &spec.CreateSession{Opcode: spec.OpMACCreateSession, MACAlgo: spec.MACHMACSHA1, HashLen: 12, AuthKey: k16})
			return n - 8, err
		}}
		p.ctrl([]*ctrlOp{op})
		if st := uint8(binary.LittleEndian.Uint32(op.res[8:])); op.err != nil || st != spec.StatusBadMsg {
			t.Errorf("truncated request: %v %s", op.err, spec.StatusString(st))
		}
		p.Close(testwait.Context(t))
	}
}

// TestDataInvalidSession: a data request naming a destroyed session gets
// INVSESS, surfaced as StatusError with Data untouched.
func TestDataInvalidSession(t *testing.T) {
	p, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Close(testwait.Context(t)) }()
	done := make(chan *crypto.Request, 1)
	cs, err := p.NewSession(crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: make([]byte, 20)},
		func(rs []*crypto.Request) {
			for _, r := range rs {
				done <- r
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	s := cs.(*session)
	if st := rawDestroy(t, p, spec.OpAEADDestroySession, s.encID); st != spec.StatusOK {
		t.Fatal(spec.StatusString(st))
	}
	r := &crypto.Request{Data: []byte("payload"), ICV: make([]byte, 16), IV: make([]byte, 8)}
	if s.Submit([]*crypto.Request{r}) != 1 {
		t.Fatal("not accepted")
	}
	testwait.Recv(t, testwait.Timeout, "completion of the request on the destroyed session", done)
	if r.Status != crypto.StatusError || string(r.Data) != "payload" {
		t.Fatalf("status %v err %v data %q", r.Status, r.Err, r.Data)
	}
}
