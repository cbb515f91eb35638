package aesct

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/keelinit/keel/internal/testwait"
)

type katFile struct {
	FIPS197 []struct{ Name, Key, PT, CT string }               `json:"fips197"`
	CBC     []struct{ Name, Key, IV, PT, CT string }           `json:"sp800_38a_cbc"`
	GCM     []struct{ Name, Key, IV, AAD, PT, CT, Tag string } `json:"gcm_spec"`
}

type espFile struct {
	CBCRaw []struct {
		Case                           string
		Key, IV, Plaintext, Ciphertext string
	} `json:"rfc3602_aes_cbc_raw"`
	CBCESP []struct {
		Case       string
		K          string `json:"key"`
		P          string `json:"esp_packet"`
		Pl         string `json:"payload"`
		NextHeader byte   `json:"next_header"`
	} `json:"rfc3602_esp_aes_cbc"`
	GCM []struct {
		Case                                              int
		Key, Salt, Nonce, AAD, Plaintext, Ciphertext, Tag string
	} `json:"draft_mcgrew_gcm_test_01"`
}

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

func loadKAT(t testing.TB) *katFile {
	var k katFile
	loadJSON(t, "testdata/kat.json", &k)
	if len(k.FIPS197) == 0 || len(k.CBC) == 0 || len(k.GCM) == 0 {
		t.Fatal("testdata/kat.json: empty section")
	}
	return &k
}

func loadESP(t testing.TB) *espFile {
	var e espFile
	loadJSON(t, "../../testdata/esp_vectors.json", &e)
	if len(e.CBCRaw) == 0 || len(e.CBCESP) == 0 || len(e.GCM) == 0 {
		t.Fatal("esp_vectors.json: empty section")
	}
	return &e
}

// refSbox computes the AES S-box from its definition (GF(2^8) inverse and
// affine map), independently of the circuit.
func refSbox(x byte) byte {
	mul := func(a, b byte) byte {
		var p byte
		for b != 0 {
			if b&1 != 0 {
				p ^= a
			}
			hi := a & 0x80
			a <<= 1
			if hi != 0 {
				a ^= 0x1b
			}
			b >>= 1
		}
		return p
	}
	var inv byte
	for c := 1; c < 256; c++ {
		if mul(x, byte(c)) == 1 {
			inv = byte(c)
		}
	}
	rotl := func(b byte, n uint) byte { return b<<n | b>>(8-n) }
	return inv ^ rotl(inv, 1) ^ rotl(inv, 2) ^ rotl(inv, 3) ^ rotl(inv, 4) ^ 0x63
}

func TestSboxCircuit(t *testing.T) {
	// Each 64-byte batch goes through the bitsliced layout and the
	// circuit; every S-box output must match the definition.
	for base := 0; base < 256; base += 64 {
		var in [64]byte
		for i := range in {
			in[i] = byte(base + i)
		}
		var q [8]uint64
		load4(&q, in[:])
		sbox(&q)
		var out [64]byte
		store4(out[:], &q)
		load4(&q, out[:])
		invSbox(&q)
		var back [64]byte
		store4(back[:], &q)
		for i := range in {
			if want := refSbox(in[i]); out[i] != want {
				t.Errorf("S(%#02x) = %#02x, want %#02x", in[i], out[i], want)
			}
			if back[i] != in[i] {
				t.Errorf("InvS(S(%#02x)) = %#02x", in[i], back[i])
			}
		}
	}
}

func TestFIPS197(t *testing.T) {
	for _, v := range loadKAT(t).FIPS197 {
		t.Run(v.Name, func(t *testing.T) {
			c, err := NewCipher(unhex(t, v.Key))
			if err != nil {
				t.Fatal(err)
			}
			pt, ct := unhex(t, v.PT), unhex(t, v.CT)
			got := make([]byte, 16)
			c.Encrypt(got, pt)
			if !bytes.Equal(got, ct) {
				t.Fatalf("Encrypt = %x, want %x", got, ct)
			}
			c.Decrypt(got, ct)
			if !bytes.Equal(got, pt) {
				t.Fatalf("Decrypt = %x, want %x", got, pt)
			}
		})
	}
}

func TestKeySize(t *testing.T) {
	for _, n := range []int{0, 1, 15, 17, 23, 25, 31, 33, 64} {
		if _, err := NewCipher(make([]byte, n)); !errors.Is(err, ErrKeySize) {
			t.Errorf("NewCipher(%d bytes) err = %v, want ErrKeySize", n, err)
		}
		if _, err := NewGCM(make([]byte, n)); !errors.Is(err, ErrKeySize) {
			t.Errorf("NewGCM(%d bytes) err = %v, want ErrKeySize", n, err)
		}
	}
}

func checkCBC(t *testing.T, name string, key, iv, pt, ct []byte) {
	t.Helper()
	c, err := NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	ivCopy := bytes.Clone(iv)
	got := make([]byte, len(pt))
	c.EncryptCBC(got, pt, iv)
	if !bytes.Equal(got, ct) {
		t.Errorf("%s: EncryptCBC = %x, want %x", name, got, ct)
	}
	c.DecryptCBC(got, ct, iv)
	if !bytes.Equal(got, pt) {
		t.Errorf("%s: DecryptCBC = %x, want %x", name, got, pt)
	}
	// In place.
	buf := bytes.Clone(pt)
	c.EncryptCBC(buf, buf, iv)
	if !bytes.Equal(buf, ct) {
		t.Errorf("%s: in-place EncryptCBC = %x", name, buf)
	}
	c.DecryptCBC(buf, buf, iv)
	if !bytes.Equal(buf, pt) {
		t.Errorf("%s: in-place DecryptCBC = %x", name, buf)
	}
	if !bytes.Equal(iv, ivCopy) {
		t.Errorf("%s: iv modified", name)
	}
}

func TestCBCVectors(t *testing.T) {
	for _, v := range loadKAT(t).CBC {
		checkCBC(t, v.Name, unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.PT), unhex(t, v.CT))
	}
	esp := loadESP(t)
	for _, v := range esp.CBCRaw {
		checkCBC(t, "RFC 3602 "+v.Case, unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.Plaintext), unhex(t, v.Ciphertext))
	}
	for _, v := range esp.CBCESP {
		// ESP packet = SPI(4) | seq(4) | IV(16) | ciphertext.
		// The plaintext is payload | padding 1,2,3,... | pad length |
		// next header (RFC 4303 default padding).
		pkt := unhex(t, v.P)
		ct := pkt[24:]
		pt := unhex(t, v.Pl)
		padLen := len(ct) - len(pt) - 2
		for i := 1; i <= padLen; i++ {
			pt = append(pt, byte(i))
		}
		pt = append(pt, byte(padLen), v.NextHeader)
		checkCBC(t, "RFC 3602 "+v.Case, unhex(t, v.K), pkt[8:24], pt, ct)
	}
}

func checkGCM(t *testing.T, name string, key, nonce, aad, pt, ct, tag []byte) {
	t.Helper()
	g, err := NewGCM(key)
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(ct), tag...)
	got := g.Seal(nil, nonce, pt, aad)
	if !bytes.Equal(got, want) {
		t.Errorf("%s: Seal = %x, want %x", name, got, want)
	}
	dec, err := g.Open(nil, nonce, want, aad)
	if err != nil || !bytes.Equal(dec, pt) {
		t.Errorf("%s: Open = %x, %v; want %x", name, dec, err, pt)
	}
	// In place, exact overlap.
	buf := make([]byte, len(pt), len(pt)+TagSize)
	copy(buf, pt)
	sealed := g.Seal(buf[:0], nonce, buf, aad)
	if !bytes.Equal(sealed, want) || &sealed[0] != &buf[:1][0] {
		t.Errorf("%s: in-place Seal = %x", name, sealed)
	}
	opened, err := g.Open(sealed[:0], nonce, sealed, aad)
	if err != nil || !bytes.Equal(opened, pt) {
		t.Errorf("%s: in-place Open = %x, %v", name, opened, err)
	}
}

func TestGCMVectors(t *testing.T) {
	for _, v := range loadKAT(t).GCM {
		checkGCM(t, v.Name, unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.AAD), unhex(t, v.PT), unhex(t, v.CT), unhex(t, v.Tag))
	}
	for _, v := range loadESP(t).GCM {
		checkGCM(t, fmt.Sprintf("draft-mcgrew-gcm-test-01 #%d", v.Case),
			unhex(t, v.Key), unhex(t, v.Nonce), unhex(t, v.AAD), unhex(t, v.Plaintext), unhex(t, v.Ciphertext), unhex(t, v.Tag))
	}
}

func TestGCMTamper(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := make([]byte, 16)
	nonce := make([]byte, 12)
	for _, n := range []int{0, 1, 16, 47, 48, 49, 64, 100} {
		fill(rng, key)
		fill(rng, nonce)
		g, _ := NewGCM(key)
		pt := make([]byte, n)
		fill(rng, pt)
		aad := []byte("spi+seq!")
		sealed := g.Seal(nil, nonce, pt, aad)
		for i := range sealed {
			for _, bit := range []byte{0x01, 0x80} {
				bad := bytes.Clone(sealed)
				bad[i] ^= bit
				orig := bytes.Clone(bad)
				if out, err := g.Open(bad[:0], nonce, bad, aad); !errors.Is(err, ErrOpen) || out != nil {
					t.Fatalf("len %d: flipped byte %d accepted", n, i)
				}
				if !bytes.Equal(bad, orig) {
					t.Fatalf("len %d: failed Open modified the buffer", n)
				}
			}
		}
		badAAD := []byte("spi+seq?")
		if _, err := g.Open(nil, nonce, sealed, badAAD); !errors.Is(err, ErrOpen) {
			t.Fatalf("len %d: wrong AAD accepted", n)
		}
		badNonce := bytes.Clone(nonce)
		badNonce[11] ^= 1
		if _, err := g.Open(nil, badNonce, sealed, aad); !errors.Is(err, ErrOpen) {
			t.Fatalf("len %d: wrong nonce accepted", n)
		}
		if _, err := g.Open(nil, nonce, sealed[:len(sealed)-1], aad); !errors.Is(err, ErrOpen) {
			t.Fatalf("len %d: truncated accepted", n)
		}
	}
	g, _ := NewGCM(key)
	if _, err := g.Open(nil, nonce, make([]byte, 15), nil); !errors.Is(err, ErrOpen) {
		t.Fatal("short ciphertext accepted")
	}
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// TestDifferential compares against crypto/aes and crypto/cipher on random
// keys, IVs, nonces, AAD and lengths (deterministic seed).
func TestDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(0x6b65656c, 0x61657363))
	iters := 300
	if testing.Short() {
		iters = 50
	}
	for it := 0; it < iters; it++ {
		key := make([]byte, []int{16, 24, 32}[rng.IntN(3)])
		fill(rng, key)
		n := rng.IntN(300)
		if it%10 == 0 {
			n = rng.IntN(2000)
		}
		diffOne(t, key, n, rng)
	}
}

func diffOne(t testing.TB, key []byte, n int, rng *rand.Rand) {
	ref, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	// Block.
	blk := make([]byte, 16)
	fill(rng, blk)
	a, b := make([]byte, 16), make([]byte, 16)
	ref.Encrypt(a, blk)
	c.Encrypt(b, blk)
	if !bytes.Equal(a, b) {
		t.Fatalf("key %x: Encrypt(%x) = %x, want %x", key, blk, b, a)
	}
	ref.Decrypt(a, blk)
	c.Decrypt(b, blk)
	if !bytes.Equal(a, b) {
		t.Fatalf("key %x: Decrypt(%x) = %x, want %x", key, blk, b, a)
	}
	// CBC.
	iv := make([]byte, 16)
	fill(rng, iv)
	pt := make([]byte, n&^15)
	fill(rng, pt)
	want := make([]byte, len(pt))
	cipher.NewCBCEncrypter(ref, iv).CryptBlocks(want, pt)
	got := make([]byte, len(pt))
	c.EncryptCBC(got, pt, iv)
	if !bytes.Equal(got, want) {
		t.Fatalf("key %x len %d: EncryptCBC mismatch", key, len(pt))
	}
	c.DecryptCBC(got, want, iv)
	if !bytes.Equal(got, pt) {
		t.Fatalf("key %x len %d: DecryptCBC mismatch", key, len(pt))
	}
	// GCM.
	rg, _ := cipher.NewGCM(ref)
	g, err := NewGCM(key)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 12)
	fill(rng, nonce)
	aad := make([]byte, rng.IntN(40))
	fill(rng, aad)
	msg := make([]byte, n)
	fill(rng, msg)
	ws := rg.Seal(nil, nonce, msg, aad)
	gs := g.Seal(nil, nonce, msg, aad)
	if !bytes.Equal(ws, gs) {
		t.Fatalf("key %x nonce %x aad %d len %d: Seal mismatch", key, nonce, len(aad), n)
	}
	o, err := g.Open(nil, nonce, ws, aad)
	if err != nil || !bytes.Equal(o, msg) {
		t.Fatalf("Open of stdlib ciphertext failed: %v", err)
	}
}

// TestCTRCounterWrap checks that the 32-bit counter wraps like inc32.
func TestCTRCounterWrap(t *testing.T) {
	key := make([]byte, 16)
	c, _ := NewCipher(key)
	var prefix [12]byte
	prefix[3] = 7
	var ks [64]byte
	c.Keystream4(&ks, &prefix, 0xfffffffe)
	for i, ctr := range []uint32{0xfffffffe, 0xffffffff, 0, 1} {
		var blk, want [16]byte
		copy(blk[:], prefix[:])
		blk[12], blk[13], blk[14], blk[15] = byte(ctr>>24), byte(ctr>>16), byte(ctr>>8), byte(ctr)
		c.Encrypt(want[:], blk[:])
		if !bytes.Equal(ks[16*i:16*i+16], want[:]) {
			t.Errorf("block %d (ctr %#x) mismatch", i, ctr)
		}
	}
}

func TestOverlapPanics(t *testing.T) {
	g, _ := NewGCM(make([]byte, 16))
	buf := make([]byte, 64)
	defer func() {
		if recover() == nil {
			t.Fatal("inexact overlap did not panic")
		}
	}()
	g.Seal(buf[1:1], make([]byte, 12), buf[:32], nil)
}

func TestAllocs(t *testing.T) {
	g, _ := NewGCM(make([]byte, 16))
	c, _ := NewCipher(make([]byte, 16))
	nonce := make([]byte, 12)
	buf := make([]byte, 1420+16)
	iv := make([]byte, 16)
	n := testing.AllocsPerRun(20, func() {
		s := g.Seal(buf[:0], nonce, buf[:1420], buf[1420:1420])
		if _, err := g.Open(s[:0], nonce, s, nil); err != nil {
			panic(err)
		}
		c.EncryptCBC(buf[:1408], buf[:1408], iv)
		c.DecryptCBC(buf[:1408], buf[:1408], iv)
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
}

// TestConcurrent uses one Cipher and one GCM from several goroutines (run
// with -race): they are immutable after construction.
func TestConcurrent(t *testing.T) {
	key := []byte("0123456789abcdef")
	g, _ := NewGCM(key)
	c, _ := NewCipher(key)
	ref, _ := aes.NewCipher(key)
	rg, _ := cipher.NewGCM(ref)
	done := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func() {
			nonce := make([]byte, 12)
			nonce[0] = byte(w)
			msg := bytes.Repeat([]byte{byte(w)}, 300)
			iv := make([]byte, 16)
			for i := 0; i < 50; i++ {
				if !bytes.Equal(g.Seal(nil, nonce, msg, nil), rg.Seal(nil, nonce, msg, nil)) {
					done <- fmt.Errorf("worker %d: Seal mismatch", w)
					return
				}
				buf := bytes.Clone(msg[:288])
				c.EncryptCBC(buf, buf, iv)
				c.DecryptCBC(buf, buf, iv)
				if !bytes.Equal(buf, msg[:288]) {
					done <- fmt.Errorf("worker %d: CBC round trip", w)
					return
				}
			}
			done <- nil
		}()
	}
	for w := 0; w < 4; w++ {
		if err, _ := testwait.Recv(t, testwait.Long, "worker done", done); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWipe(t *testing.T) {
	g, _ := NewGCM([]byte("0123456789abcdef"))
	g.Wipe()
	if g.c.sk != ([120]uint64{}) || g.h != (ghashKey{}) || g.c.nr != 0 {
		t.Fatal("Wipe left key material")
	}
}

func TestEncryptCBCMulti(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, count := range []int{0, 1, 3, 4, 5, 9} {
		key := make([]byte, 16)
		fill(rng, key)
		c, _ := NewCipher(key)
		ref, _ := aes.NewCipher(key)
		var dst, src, iv, want [][]byte
		for i := 0; i < count; i++ {
			m := make([]byte, 16*rng.IntN(12))
			v := make([]byte, 16)
			fill(rng, m)
			fill(rng, v)
			w := make([]byte, len(m))
			cipher.NewCBCEncrypter(ref, v).CryptBlocks(w, m)
			want = append(want, w)
			if i%2 == 0 {
				dst = append(dst, m) // in place
			} else {
				dst = append(dst, make([]byte, len(m)))
			}
			src, iv = append(src, m), append(iv, bytes.Clone(v))
		}
		ivs := make([][]byte, len(iv))
		for i := range iv {
			ivs[i] = bytes.Clone(iv[i])
		}
		c.EncryptCBCMulti(dst, src, iv)
		for i := range want {
			if !bytes.Equal(dst[i], want[i]) {
				t.Fatalf("count %d message %d (len %d) mismatch", count, i, len(want[i]))
			}
			if !bytes.Equal(iv[i], ivs[i]) {
				t.Fatalf("iv %d modified", i)
			}
		}
	}
}
