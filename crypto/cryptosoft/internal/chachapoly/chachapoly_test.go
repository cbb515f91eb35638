package chachapoly

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
	refpoly "golang.org/x/crypto/poly1305" //nolint:staticcheck // reference implementation for differential tests only
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func loadJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

type vector struct{ Name, Key, Nonce, AAD, PT, CT, Tag string }

func vectors(t *testing.T) []vector {
	var d struct {
		RFC8439 []vector `json:"rfc8439"`
	}
	loadJSON(t, "testdata/kat.json", &d)
	var e struct {
		ESP []struct{ Case, Keymat, IV, AAD, Plaintext, Ciphertext, Tag string } `json:"rfc7634_chacha20poly1305_esp"`
	}
	loadJSON(t, "../../testdata/esp_vectors.json", &e)
	if len(d.RFC8439) == 0 || len(e.ESP) == 0 {
		t.Fatal("missing vectors")
	}
	vs := d.RFC8439
	for _, v := range e.ESP {
		// RFC 7634: keymat = key(32) || salt(4); nonce = salt || IV(8).
		vs = append(vs, vector{
			Name: "RFC 7634 " + v.Case, Key: v.Keymat[:64], Nonce: v.Keymat[64:] + v.IV,
			AAD: v.AAD, PT: v.Plaintext, CT: v.Ciphertext, Tag: v.Tag,
		})
	}
	return vs
}

func TestVectors(t *testing.T) {
	for _, v := range vectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			a, err := New(unhex(t, v.Key))
			if err != nil {
				t.Fatal(err)
			}
			nonce, aad, pt := unhex(t, v.Nonce), unhex(t, v.AAD), unhex(t, v.PT)
			want := append(unhex(t, v.CT), unhex(t, v.Tag)...)
			if got := a.Seal(nil, nonce, pt, aad); !bytes.Equal(got, want) {
				t.Fatalf("Seal = %x\nwant   %x", got, want)
			}
			buf := append(make([]byte, 0, len(pt)+TagSize), pt...)
			sealed := a.Seal(buf[:0], nonce, buf, aad)
			if !bytes.Equal(sealed, want) {
				t.Fatalf("in-place Seal = %x", sealed)
			}
			opened, err := a.Open(sealed[:0], nonce, sealed, aad)
			if err != nil || !bytes.Equal(opened, pt) {
				t.Fatalf("in-place Open = %x, %v", opened, err)
			}
		})
	}
}

func TestPoly1305Vector(t *testing.T) {
	// RFC 8439 section 2.5.2.
	var key [32]byte
	copy(key[:], unhex(t, "85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b"))
	var p poly1305
	p.init(&key)
	p.write([]byte("Cryptographic Forum Research Group"))
	var tag [16]byte
	p.sum(&tag)
	if want := unhex(t, "a8061dc1305136c6c22b8baf0c0127a9"); !bytes.Equal(tag[:], want) {
		t.Fatalf("tag %x, want %x", tag, want)
	}
}

// TestPoly1305Differential compares against x/crypto/poly1305, including
// all-ones keys and messages that stress the carries and final reduction.
func TestPoly1305Differential(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for it := 0; it < 500; it++ {
		var key [32]byte
		msg := make([]byte, rng.IntN(200))
		switch it % 4 {
		case 0:
			for i := range key {
				key[i] = 0xff
			}
			for i := range msg {
				msg[i] = 0xff
			}
		default:
			fill(rng, key[:])
			fill(rng, msg)
		}
		var want, got [16]byte
		refpoly.Sum(&want, msg, &key)
		var p poly1305
		p.init(&key)
		// Feed in random pieces to exercise buffering.
		for m := msg; len(m) > 0; {
			n := min(len(m), rng.IntN(40))
			p.write(m[:n])
			m = m[n:]
		}
		p.sum(&got)
		if got != want {
			t.Fatalf("key %x msg %x: tag %x, want %x", key, msg, got, want)
		}
	}
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func TestKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 36} {
		if _, err := New(make([]byte, n)); !errors.Is(err, ErrKeySize) {
			t.Errorf("New(%d bytes) err = %v", n, err)
		}
	}
}

func TestDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(0x6b65656c, 0x63686163))
	for it := 0; it < 300; it++ {
		n := rng.IntN(300)
		if it%10 == 0 {
			n = rng.IntN(3000)
		}
		diffOne(t, rng, n)
	}
}

func diffOne(t testing.TB, rng *rand.Rand, n int) {
	key := make([]byte, 32)
	nonce := make([]byte, 12)
	aad := make([]byte, rng.IntN(40))
	msg := make([]byte, n)
	fill(rng, key)
	fill(rng, nonce)
	fill(rng, aad)
	fill(rng, msg)
	ref, _ := chacha20poly1305.New(key)
	a, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	want := ref.Seal(nil, nonce, msg, aad)
	got := a.Seal(nil, nonce, msg, aad)
	if !bytes.Equal(got, want) {
		t.Fatalf("key %x nonce %x aad %x len %d: Seal mismatch", key, nonce, aad, n)
	}
	o, err := a.Open(nil, nonce, want, aad)
	if err != nil || !bytes.Equal(o, msg) {
		t.Fatalf("Open of reference ciphertext: %v", err)
	}
}

func TestTamper(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	key := make([]byte, 32)
	nonce := make([]byte, 12)
	fill(rng, key)
	fill(rng, nonce)
	a, _ := New(key)
	for _, n := range []int{0, 1, 63, 64, 65, 130} {
		pt := make([]byte, n)
		fill(rng, pt)
		aad := []byte{1, 2, 3, 4, 0, 0, 0, 5}
		sealed := a.Seal(nil, nonce, pt, aad)
		for i := range sealed {
			bad := bytes.Clone(sealed)
			bad[i] ^= 1 << (i % 8)
			orig := bytes.Clone(bad)
			if out, err := a.Open(bad[:0], nonce, bad, aad); !errors.Is(err, ErrOpen) || out != nil {
				t.Fatalf("len %d: flipped byte %d accepted", n, i)
			}
			if !bytes.Equal(bad, orig) {
				t.Fatalf("len %d: failed Open modified the buffer", n)
			}
		}
		if _, err := a.Open(nil, nonce, sealed, aad[:7]); !errors.Is(err, ErrOpen) {
			t.Fatal("wrong AAD accepted")
		}
		bn := bytes.Clone(nonce)
		bn[0] ^= 0x80
		if _, err := a.Open(nil, bn, sealed, aad); !errors.Is(err, ErrOpen) {
			t.Fatal("wrong nonce accepted")
		}
	}
	if _, err := a.Open(nil, nonce, make([]byte, 15), nil); !errors.Is(err, ErrOpen) {
		t.Fatal("short input accepted")
	}
}

func TestAllocs(t *testing.T) {
	a, _ := New(make([]byte, 32))
	nonce := make([]byte, 12)
	buf := make([]byte, 1420+16)
	aad := make([]byte, 8)
	n := testing.AllocsPerRun(20, func() {
		s := a.Seal(buf[:0], nonce, buf[:1420], aad)
		if _, err := a.Open(s[:0], nonce, s, aad); err != nil {
			panic(err)
		}
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
}

// TestConcurrent shares one AEAD between goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	key := make([]byte, 32)
	a, _ := New(key)
	ref, _ := chacha20poly1305.New(key)
	done := make(chan bool, 4)
	for w := 0; w < 4; w++ {
		go func() {
			nonce := make([]byte, 12)
			nonce[11] = byte(w)
			msg := bytes.Repeat([]byte{byte(w)}, 333)
			ok := true
			for i := 0; i < 50; i++ {
				ok = ok && bytes.Equal(a.Seal(nil, nonce, msg, msg[:9]), ref.Seal(nil, nonce, msg, msg[:9]))
			}
			done <- ok
		}()
	}
	for w := 0; w < 4; w++ {
		if !<-done {
			t.Fatal("concurrent Seal mismatch")
		}
	}
}

func TestWipe(t *testing.T) {
	a, _ := New(bytes.Repeat([]byte{7}, 32))
	a.Wipe()
	if a.key != ([8]uint32{}) {
		t.Fatal("Wipe left key material")
	}
}
