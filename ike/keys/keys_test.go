package keys

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	mrand "math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/ike/wire"
)

// refPRFPlus is prf+ written from §2.13's definition, block by block with
// a fresh HMAC each time, sharing nothing with PRF.Plus.
func refPRFPlus(h func() hash.Hash, k, s []byte, n int) []byte {
	var out, t []byte
	for i := byte(1); len(out) < n; i++ {
		m := hmac.New(h, k)
		in := append(append(append([]byte{}, t...), s...), i)
		m.Write(in)
		t = m.Sum(nil)
		out = append(out, t...)
	}
	return out[:n]
}

func seeded(t *testing.T) *mrand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return mrand.New(mrand.NewPCG(seed, 16))
}

func randBytes(r *mrand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestPRFPlusAgainstReference(t *testing.T) {
	r := seeded(t)
	for _, c := range []struct {
		id uint16
		h  func() hash.Hash
	}{{wire.PRF_HMAC_SHA2_256, sha256.New}, {wire.PRF_HMAC_SHA2_384, sha512.New384}, {wire.PRF_HMAC_SHA2_512, sha512.New}} {
		p, err := PRFByID(c.id)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			k, s := randBytes(r, 1+r.IntN(100)), randBytes(r, r.IntN(300))
			n := r.IntN(255*p.Size() + 1)
			got, err := p.Plus(k, s, n)
			if err != nil {
				t.Fatal(err)
			}
			if want := refPRFPlus(c.h, k, s, n); !bytes.Equal(got, want) {
				t.Fatalf("prf %d: prf+ of %d bytes differs from the reference", c.id, n)
			}
		}
		if _, err := p.Plus([]byte("k"), nil, 255*p.Size()+1); err == nil {
			t.Fatalf("prf %d: prf+ beyond 255 blocks accepted", c.id)
		}
	}
}

func TestDeriveAgainstReference(t *testing.T) {
	r := seeded(t)
	suites := []Suite{
		mustSuite(t, wire.ENCR_AES_GCM_16, 256, wire.AUTH_NONE, wire.PRF_HMAC_SHA2_256),
		mustSuite(t, wire.ENCR_AES_CBC, 128, wire.AUTH_HMAC_SHA2_256_128, wire.PRF_HMAC_SHA2_384),
		mustSuite(t, wire.ENCR_CHACHA20_POLY1305, 0, wire.AUTH_NONE, wire.PRF_HMAC_SHA2_512),
		mustSuite(t, wire.ENCR_AES_CBC, 256, wire.AUTH_HMAC_SHA2_512_256, wire.PRF_HMAC_SHA2_256),
	}
	hashes := map[uint16]func() hash.Hash{wire.PRF_HMAC_SHA2_256: sha256.New, wire.PRF_HMAC_SHA2_384: sha512.New384, wire.PRF_HMAC_SHA2_512: sha512.New}
	for _, s := range suites {
		h := hashes[s.PRF.ID]
		ni, nr, gir := randBytes(r, 32), randBytes(r, 48), randBytes(r, 256)
		var spii, spir wire.SPI
		copy(spii[:], randBytes(r, 8))
		copy(spir[:], randBytes(r, 8))
		k, err := DeriveIKE(s, ni, nr, gir, spii, spir)
		if err != nil {
			t.Fatal(err)
		}
		m := hmac.New(h, append(append([]byte{}, ni...), nr...))
		m.Write(gir)
		skeyseed := m.Sum(nil)
		seed := append(append(append(append([]byte{}, ni...), nr...), spii[:]...), spir[:]...)
		p, a, e := h().Size(), s.Integ.KeyLen, s.Encr.KeyLen
		km := refPRFPlus(h, skeyseed, seed, 3*p+2*a+2*e)
		want := &IKEKeys{SKd: km[:p], SKai: km[p : p+a], SKar: km[p+a : p+2*a], SKei: km[p+2*a : p+2*a+e],
			SKer: km[p+2*a+e : p+2*a+2*e], SKpi: km[p+2*a+2*e : 2*p+2*a+2*e], SKpr: km[2*p+2*a+2*e:]}
		for i, pair := range [][2][]byte{{k.SKd, want.SKd}, {k.SKai, want.SKai}, {k.SKar, want.SKar}, {k.SKei, want.SKei}, {k.SKer, want.SKer}, {k.SKpi, want.SKpi}, {k.SKpr, want.SKpr}} {
			if !bytes.Equal(pair[0], pair[1]) {
				t.Fatalf("suite %+v: key %d differs from the reference", s.Encr, i)
			}
		}
		// KEYMAT, with and without PFS.
		for _, g := range [][]byte{nil, randBytes(r, 32)} {
			c, err := DeriveChild(s.PRF, k.SKd, s, g, ni, nr)
			if err != nil {
				t.Fatal(err)
			}
			km := refPRFPlus(h, want.SKd, append(append(append([]byte{}, g...), ni...), nr...), 2*(e+a))
			got := append(append(append(append([]byte{}, c.EncrI...), c.IntegI...), c.EncrR...), c.IntegR...)
			if !bytes.Equal(got, km) || len(c.EncrI) != e || len(c.IntegR) != a {
				t.Fatalf("suite %+v: KEYMAT differs from the reference", s.Encr)
			}
		}
		k.Zero()
		if !bytes.Equal(k.SKd, make([]byte, p)) || !bytes.Equal(k.SKer, make([]byte, e)) {
			t.Fatal("Zero left key bytes")
		}
	}
}

func mustSuite(t *testing.T, encr, bits, integ, prf uint16) Suite {
	t.Helper()
	e, err := EncrByID(encr, bits)
	if err != nil {
		t.Fatal(err)
	}
	i, err := IntegByID(integ)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PRFByID(prf)
	if err != nil {
		t.Fatal(err)
	}
	return Suite{Encr: e, Integ: i, PRF: p, DH: wire.DH_X25519}
}

// TestX25519Vector is RFC 7748 §6.1.
func TestX25519Vector(t *testing.T) {
	h := func(s string) []byte { b, _ := hex.DecodeString(s); return b }
	a, _ := ecdh.X25519().NewPrivateKey(h("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"))
	k := &ecdhKey{group: wire.DH_X25519, curve: ecdh.X25519(), priv: a}
	if got := hex.EncodeToString(k.Public()); got != "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a" {
		t.Fatalf("public %s", got)
	}
	s, err := k.Shared(h("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"))
	if err != nil || hex.EncodeToString(s) != "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742" {
		t.Fatalf("shared %x, %v", s, err)
	}
	if _, err := k.Shared(make([]byte, 32)); err == nil {
		t.Fatal("all-zero (low-order) peer value accepted")
	}
}

func TestDHAgree(t *testing.T) {
	for _, g := range []uint16{wire.DH_MODP2048, wire.DH_ECP256, wire.DH_X25519} {
		a, err := NewDH(g, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewDH(g, rand.Reader)
		sa, err1 := a.Shared(b.Public())
		sb, err2 := b.Shared(a.Public())
		if err1 != nil || err2 != nil || !bytes.Equal(sa, sb) {
			t.Fatalf("group %d: shared secrets differ (%v, %v)", g, err1, err2)
		}
		want := map[uint16]int{14: 256, 19: 64, 31: 32}[g]
		if len(a.Public()) != want {
			t.Fatalf("group %d: public value of %d bytes, want %d", g, len(a.Public()), want)
		}
		// Invalid peer values.
		bad := [][]byte{nil, make([]byte, want), make([]byte, want+1)}
		if g != wire.DH_X25519 { // X25519 accepts every 32-byte u (RFC 7748 §5)
			bad = append(bad, bytes.Repeat([]byte{0xff}, want))
		}
		if g == wire.DH_MODP2048 {
			one := make([]byte, 256)
			one[255] = 1
			bad = append(bad, one)
		}
		for _, v := range bad {
			if _, err := a.Shared(v); err == nil {
				t.Fatalf("group %d: invalid peer value %x accepted", g, v[:min(len(v), 4)])
			}
		}
		a.Zero()
		if _, err := a.Shared(b.Public()); err == nil {
			t.Fatalf("group %d: key usable after Zero", g)
		}
		if strings.Contains(fmt.Sprintf("%v %+v", a, a), hex.EncodeToString(b.Public()[:4])) {
			t.Fatal("DH String shows key bytes")
		}
	}
}

func TestProtectorRoundTrip(t *testing.T) {
	r := seeded(t)
	for _, s := range []Suite{
		mustSuite(t, wire.ENCR_AES_GCM_16, 128, wire.AUTH_NONE, wire.PRF_HMAC_SHA2_256),
		mustSuite(t, wire.ENCR_AES_GCM_16, 256, wire.AUTH_NONE, wire.PRF_HMAC_SHA2_256),
		mustSuite(t, wire.ENCR_CHACHA20_POLY1305, 0, wire.AUTH_NONE, wire.PRF_HMAC_SHA2_256),
		mustSuite(t, wire.ENCR_AES_CBC, 128, wire.AUTH_HMAC_SHA2_256_128, wire.PRF_HMAC_SHA2_256),
		mustSuite(t, wire.ENCR_AES_CBC, 256, wire.AUTH_HMAC_SHA2_512_256, wire.PRF_HMAC_SHA2_256),
	} {
		ek, ik := randBytes(r, s.Encr.KeyLen), randBytes(r, s.Integ.KeyLen)
		p, err := NewProtector(s, ek, ik)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := NewProtector(s, ek, ik)
		h := wire.Header{SPIi: wire.SPI{1}, SPIr: wire.SPI{2}, Version: wire.Version20, Exchange: wire.IKE_AUTH, Flags: wire.FlagInitiator, MessageID: 1}
		inner := []wire.Payload{&wire.ID{IDType: wire.ID_FQDN, Data: []byte("a.example")}, &wire.Auth{Method: wire.AuthSharedKey, Data: randBytes(r, 32)}}
		for n := 0; n < 3; n++ {
			raw, err := p.SealMessage(h, inner)
			if err != nil {
				t.Fatal(err)
			}
			m, err := q.OpenMessage(raw)
			if err != nil {
				t.Fatalf("encr %d: %v", s.Encr.ID, err)
			}
			if !reflect.DeepEqual(m.Payloads, inner) || m.MessageID != 1 {
				t.Fatalf("encr %d: opened payloads differ", s.Encr.ID)
			}
			// Any flipped bit, in the header (AAD) or the body, fails.
			for _, i := range []int{0, 19, 29, len(raw) / 2, len(raw) - 1} {
				bad := append([]byte(nil), raw...)
				bad[i] ^= 1 << r.IntN(8)
				if _, err := q.OpenMessage(bad); !errors.Is(err, ErrIntegrity) {
					t.Fatalf("encr %d: bit flip at %d: %v, want ErrIntegrity", s.Encr.ID, i, err)
				}
			}
		}
		if strings.Contains(fmt.Sprintf("%v %#v", p, p), hex.EncodeToString(ek[:4])) {
			t.Fatal("Protector String shows the key")
		}
		p.Zero()
		if _, err := p.SealMessage(h, inner); err == nil {
			t.Fatal("Seal after Zero")
		}
	}
}
