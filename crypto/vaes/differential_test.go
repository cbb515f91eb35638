//go:build amd64

package vaes

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// maxDiffLen is the longest message of the differential tests: above an
// ESP jumbo frame (9000-byte MTU).
const maxDiffLen = 9000

// stdGCM is the reference: crypto/cipher's GCM over crypto/aes.
func stdGCM(t testing.TB, key []byte) cipher.AEAD {
	t.Helper()
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkAgainstStd compares g and the stdlib on one message: Seal into a
// fresh buffer and in place, Open in place, and Open of a copy with one
// bit flipped at flip (mod the sealed length), which must fail without
// writing to dst.
func checkAgainstStd(t testing.TB, key, nonce, aad, pt []byte, flip uint64) {
	t.Helper()
	g, ref := mustGCM(t, key), stdGCM(t, key)
	want := ref.Seal(nil, nonce, pt, aad)
	if got := g.Seal(nil, nonce, pt, aad); !bytes.Equal(got, want) {
		t.Fatalf("key %d B, aad %d B, pt %d B: Seal differs from crypto/cipher\n got %x\nwant %x", len(key), len(aad), len(pt), got, want)
	}
	buf := make([]byte, len(pt), len(pt)+TagSize)
	copy(buf, pt)
	sealed := g.Seal(buf[:0], nonce, buf, aad)
	if !bytes.Equal(sealed, want) {
		t.Fatalf("pt %d B: in-place Seal differs from crypto/cipher", len(pt))
	}
	opened, err := g.Open(sealed[:0], nonce, sealed, aad)
	if err != nil || !bytes.Equal(opened, pt) {
		t.Fatalf("pt %d B: in-place Open: %v", len(pt), err)
	}
	forged := bytes.Clone(want)
	forged[flip%uint64(len(forged))] ^= 1 << (flip >> 32 % 8)
	dst := bytes.Repeat([]byte{0xa5}, len(pt))
	if _, err := g.Open(dst[:0], nonce, forged, aad); err == nil {
		t.Fatalf("pt %d B: Open accepted a flipped bit at %d", len(pt), flip%uint64(len(forged)))
	}
	if !bytes.Equal(dst, bytes.Repeat([]byte{0xa5}, len(pt))) {
		t.Fatalf("pt %d B: Open wrote to dst before rejecting a forged tag", len(pt))
	}
}

// TestDifferential: every length 0..600 (all block and tail shapes around
// the 8-block loop, several times over) and 300 random lengths up to
// 9000, for AES-128 and AES-256 and ESP AAD lengths 8 and 12, against
// crypto/cipher on random keys and nonces (seed printed).
func TestDifferential(t *testing.T) {
	requireCPU(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	lengths := make([]int, 0, 901)
	for n := 0; n <= 600; n++ {
		lengths = append(lengths, n)
	}
	for range 300 {
		lengths = append(lengths, rng.IntN(maxDiffLen+1))
	}
	for _, n := range lengths {
		for _, kl := range []int{16, 32} {
			aad := fill([]int{8, 12}[rng.IntN(2)])
			checkAgainstStd(t, fill(kl), fill(NonceSize), aad, fill(n), rng.Uint64())
			if t.Failed() {
				t.Fatalf("seed %d", seed)
			}
		}
	}
}

// TestCounterWrap: GCM's counter is inc32, the low 32 bits wrap without
// carrying into the nonce. A nonce cannot set the counter, so this calls
// ctrBlocks directly across the wrap and compares with crypto/cipher's
// CTR, whose 128-bit counter agrees with inc32 only while no carry
// leaves the low word: the reference is built block by block.
func TestCounterWrap(t *testing.T) {
	requireCPU(t)
	key := bytes.Repeat([]byte{7}, 16)
	g := mustGCM(t, key)
	blk, _ := aes.NewCipher(key)
	for _, n := range []int{1, 2, 3, 8, 9, 17} {
		var ctr [16]byte
		copy(ctr[:12], "nonce-nonce!")
		binary.BigEndian.PutUint32(ctr[12:], 0xffffffff-uint32(n/2))
		want := make([]byte, 16*n)
		c := ctr
		for i := range n {
			blk.Encrypt(want[16*i:], c[:])
			binary.BigEndian.PutUint32(c[12:], binary.BigEndian.Uint32(c[12:])+1)
		}
		got := make([]byte, 16*n)
		ctrBlocks(&g.rk[0], g.rounds, &ctr, &got[0], &got[0], n)
		if !bytes.Equal(got, want) || ctr != c {
			t.Fatalf("%d blocks across the 2^32 wrap: keystream or final counter differs", n)
		}
	}
}

// FuzzGCM is the differential fuzz test against crypto/cipher: random
// key (flags bit 0: AES-256), nonce, AAD of 8 or 12 bytes (flags bit 1),
// a plaintext of n mod 9001 bytes drawn from seed, and the bit flipped
// for the forgery. Seeds: testdata/fuzz/FuzzGCM.
func FuzzGCM(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef"), []byte("nonce-012345"), []byte("SPI+seq+esn!"), uint16(1420), uint64(1), uint8(0))
	f.Fuzz(func(t *testing.T, key, nonce, aad []byte, n uint16, seed uint64, flags uint8) {
		requireCPU(t)
		key = fit(key, []int{16, 32}[flags&1])
		aad = fit(aad, []int{8, 12}[flags>>1&1])
		rng := rand.New(rand.NewPCG(seed, uint64(n)))
		pt := make([]byte, int(n)%(maxDiffLen+1))
		for i := range pt {
			pt[i] = byte(rng.Uint32())
		}
		checkAgainstStd(t, key, fit(nonce, NonceSize), aad, pt, rng.Uint64())
	})
}

// fit returns b truncated or zero-extended to n bytes.
func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}
