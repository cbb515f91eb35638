//go:build amd64

package vaes

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// TestWycheproof runs every AES-GCM vector of Wycheproof's
// aes_gcm_test.json (testdata/wycheproof, see its README) that ESP's
// parameters allow: 128 and 256-bit keys, 96-bit nonce, 128-bit tag.
// Valid vectors must seal to ct||tag and open to msg; invalid ones (all
// modified tags or ciphertexts at these sizes) must be rejected.
func TestWycheproof(t *testing.T) {
	requireCPU(t)
	raw, err := os.ReadFile("testdata/wycheproof/aes_gcm_test.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		NumberOfTests int `json:"numberOfTests"`
		TestGroups    []struct {
			IVSize  int `json:"ivSize"`
			KeySize int `json:"keySize"`
			TagSize int `json:"tagSize"`
			Tests   []struct {
				TcID    int    `json:"tcId"`
				Comment string `json:"comment"`
				Key     string `json:"key"`
				IV      string `json:"iv"`
				AAD     string `json:"aad"`
				Msg     string `json:"msg"`
				CT      string `json:"ct"`
				Tag     string `json:"tag"`
				Result  string `json:"result"`
			} `json:"tests"`
		} `json:"testGroups"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("testdata/wycheproof/aes_gcm_test.json: %v", err)
	}
	ran, invalid := 0, 0
	for _, g := range file.TestGroups {
		if g.IVSize != 96 || g.TagSize != 128 || (g.KeySize != 128 && g.KeySize != 256) {
			continue
		}
		for _, tc := range g.Tests {
			key, iv, aad := unhex(t, tc.Key), unhex(t, tc.IV), unhex(t, tc.AAD)
			msg, ct, tag := unhex(t, tc.Msg), unhex(t, tc.CT), unhex(t, tc.Tag)
			a := mustGCM(t, key)
			sealed := append(bytes.Clone(ct), tag...)
			pt, err := a.Open(nil, iv, sealed, aad)
			switch tc.Result {
			case "valid":
				if got := a.Seal(nil, iv, msg, aad); !bytes.Equal(got, sealed) {
					t.Errorf("tcId %d (%s): Seal = %x, want %x", tc.TcID, tc.Comment, got, sealed)
				}
				if err != nil || !bytes.Equal(pt, msg) {
					t.Errorf("tcId %d (%s): Open = %x, %v; want %x", tc.TcID, tc.Comment, pt, err, msg)
				}
			case "invalid":
				invalid++
				if err == nil {
					t.Errorf("tcId %d (%s): Open accepted an invalid vector", tc.TcID, tc.Comment)
				}
			default:
				t.Fatalf("tcId %d: unknown result %q", tc.TcID, tc.Result)
			}
			ran++
		}
	}
	// 67 AES-128 and 66 AES-256 vectors with a 96-bit nonce at the
	// pinned version: a changed file must be looked at, not silently run.
	if ran != 133 || invalid == 0 {
		t.Fatalf("ran %d vectors (%d invalid), want 133 with some invalid", ran, invalid)
	}
}

// TestGCMSpecVectors runs the GCM specification's test cases (McGrew and
// Viega, the revision submitted to NIST and referenced by SP 800-38D:
// cases 1-4, 13-16) embedded in cryptosoft's aesct testdata, and the
// FIPS-197 appendix C.1 and C.3 single blocks, which check the key
// schedule on its own (E(K, X) is CTR with counter block X over zeros).
func TestGCMSpecVectors(t *testing.T) {
	requireCPU(t)
	const path = "../cryptosoft/internal/aesct/testdata/kat.json"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type vec struct {
		Name, Key, IV, AAD, PT, CT, Tag string
	}
	var file struct {
		FIPS197 []vec `json:"fips197"`
		GCMSpec []vec `json:"gcm_spec"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	blocks := 0
	for _, v := range file.FIPS197 {
		key := unhex(t, v.Key)
		if len(key) == 24 {
			continue // AES-192 is not implemented
		}
		g := mustGCM(t, key)
		ctr := [16]byte(unhex(t, v.PT))
		var out [16]byte
		ctrBlocks(&g.rk[0], g.rounds, &ctr, &out[0], &out[0], 1)
		if want := unhex(t, v.CT); !bytes.Equal(out[:], want) {
			t.Errorf("%s: E(K, pt) = %x, want %x", v.Name, out, want)
		}
		blocks++
	}
	cases := 0
	for _, v := range file.GCMSpec {
		key, iv, aad, pt := unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.AAD), unhex(t, v.PT)
		want := append(unhex(t, v.CT), unhex(t, v.Tag)...)
		g := mustGCM(t, key)
		if got := g.Seal(nil, iv, pt, aad); !bytes.Equal(got, want) {
			t.Errorf("%s: Seal = %x, want %x", v.Name, got, want)
		}
		if got, err := g.Open(nil, iv, want, aad); err != nil || !bytes.Equal(got, pt) {
			t.Errorf("%s: Open = %x, %v", v.Name, got, err)
		}
		cases++
	}
	if blocks < 2 || cases != 8 {
		t.Fatalf("%d FIPS-197 blocks and %d GCM cases run, want >= 2 and 8", blocks, cases)
	}
}
