package spec

import (
	"bytes"
	"testing"
)

func TestCreateRoundTrip(t *testing.T) {
	tests := []CreateSession{
		{Opcode: OpCipherCreateSession, SymOp: SymOpCipher, CipherAlgo: CipherAESCBC, CipherKey: bytes.Repeat([]byte{1}, 16), Dir: DirDecrypt},
		{Opcode: OpCipherCreateSession, SymOp: SymOpChaining, ChainOrder: ChainCipherThenHash, CipherAlgo: CipherAESCBC, CipherKey: bytes.Repeat([]byte{2}, 32), Dir: DirEncrypt,
			MACAlgo: MACHMACSHA256, HashLen: 16, AuthKey: bytes.Repeat([]byte{3}, 32)},
		{Opcode: OpMACCreateSession, MACAlgo: MACHMACSHA512, HashLen: 32, AuthKey: bytes.Repeat([]byte{4}, 64)},
		{Opcode: OpAEADCreateSession, AEADAlgo: AEADGCM, AEADKey: bytes.Repeat([]byte{5}, 16), TagLen: 16, Dir: DirEncrypt},
	}
	for _, c := range tests {
		b := make([]byte, 512)
		n, err := EncodeCreate(b, &c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCreate(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		if got.Opcode != c.Opcode || got.CipherAlgo != c.CipherAlgo || !bytes.Equal(got.CipherKey, c.CipherKey) || got.Dir != c.Dir ||
			got.MACAlgo != c.MACAlgo || got.HashLen != c.HashLen || !bytes.Equal(got.AuthKey, c.AuthKey) ||
			got.AEADAlgo != c.AEADAlgo || !bytes.Equal(got.AEADKey, c.AEADKey) || got.TagLen != c.TagLen || got.ChainOrder != c.ChainOrder {
			t.Fatalf("round trip: %+v != %+v", got, c)
		}
		if _, err := DecodeCreate(b[:n-1]); err == nil {
			t.Fatal("truncated request decoded")
		}
	}
}

func TestStatusStrings(t *testing.T) {
	want := []string{"OK", "ERR", "BADMSG", "NOTSUPP", "INVSESS", "NOSPC", "KEY_REJECTED"}
	for i, w := range want {
		if StatusString(uint8(i)) != w {
			t.Fatalf("status %d = %s", i, StatusString(uint8(i)))
		}
	}
}

// FuzzDecodeCreate: the device parses control requests written by
// another process; no input may panic, and decoded keys stay in bounds.
func FuzzDecodeCreate(f *testing.F) {
	b := make([]byte, 512)
	n, _ := EncodeCreate(b, &CreateSession{Opcode: OpMACCreateSession, MACAlgo: MACHMACSHA1, HashLen: 12, AuthKey: make([]byte, 20)})
	f.Add(b[:n])
	n, _ = EncodeCreate(b, &CreateSession{Opcode: OpCipherCreateSession, SymOp: SymOpChaining, ChainOrder: 2, CipherAlgo: CipherAESCBC, CipherKey: make([]byte, 16), MACAlgo: 2, HashLen: 12, AuthKey: make([]byte, 20)})
	f.Add(b[:n])
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := DecodeCreate(in)
		if err != nil {
			return
		}
		if len(c.CipherKey)+len(c.AuthKey)+len(c.AEADKey) > len(in) {
			t.Fatal("keys exceed the request")
		}
	})
}

// FuzzDecodeOp: data request headers never panic and round-trip.
func FuzzDecodeOp(f *testing.F) {
	b := make([]byte, OpReqLen)
	EncodeOp(b, &OpReq{Opcode: OpAEADEncrypt, Algo: AEADGCM, SessionID: 7, IVLen: 12, AADLen: 8, SrcLen: 100, DstLen: 100, HashLen: 16})
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		var o OpReq
		if DecodeOp(in, &o) != nil {
			return
		}
		out := make([]byte, OpReqLen)
		EncodeOp(out, &o)
		var o2 OpReq
		if DecodeOp(out, &o2) != nil || o2 != o {
			t.Fatalf("round trip %+v != %+v", o2, o)
		}
	})
}
