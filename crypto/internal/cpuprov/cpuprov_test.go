package cpuprov_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"slices"
	"sync"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
	"github.com/keelinit/keel/internal/testwait"
)

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

var std = cpuprov.Primitives{NewAES: aes.NewCipher, NewGCM: newGCM, NewChaCha20Poly1305: chacha20poly1305.New}

// cbcBlock exposes whole-buffer CBC (the CBCBlock fast path).
type cbcBlock struct{ cipher.Block }

func (c cbcBlock) EncryptCBC(dst, src, iv []byte) {
	cipher.NewCBCEncrypter(c.Block, iv).CryptBlocks(dst, src)
}
func (c cbcBlock) DecryptCBC(dst, src, iv []byte) {
	cipher.NewCBCDecrypter(c.Block, iv).CryptBlocks(dst, src)
}

// plainBlock hides *aes.Block's identity and offers a BlockMode without
// SetIV, which forces cpuprov's hand-chained CBC.
type plainBlock struct{ b cipher.Block }

func (p plainBlock) BlockSize() int          { return 16 }
func (p plainBlock) Encrypt(dst, src []byte) { p.b.Encrypt(dst, src) }
func (p plainBlock) Decrypt(dst, src []byte) { p.b.Decrypt(dst, src) }
func (p plainBlock) NewCBCEncrypter(iv []byte) cipher.BlockMode {
	return noSetIV{cipher.NewCBCEncrypter(p.b, iv)}
}

type noSetIV struct{ m cipher.BlockMode }

func (n noSetIV) BlockSize() int              { return 16 }
func (n noSetIV) CryptBlocks(dst, src []byte) { n.m.CryptBlocks(dst, src) }

func variants() map[string]cpuprov.Primitives {
	return map[string]cpuprov.Primitives{
		"stdlib": std,
		"cbc-fast-path": {NewAES: func(k []byte) (cipher.Block, error) {
			b, err := aes.NewCipher(k)
			return cbcBlock{b}, err
		}, NewGCM: newGCM},
		"cbc-hand-chained": {NewAES: func(k []byte) (cipher.Block, error) {
			b, err := aes.NewCipher(k)
			return plainBlock{b}, err
		}},
	}
}

type collect struct {
	mu  sync.Mutex
	got []*crypto.Request
}

func (c *collect) done(rs []*crypto.Request) {
	c.mu.Lock()
	c.got = append(c.got, rs...)
	c.mu.Unlock()
}

func keys(alg crypto.Algorithm) crypto.SessionParams {
	p := crypto.SessionParams{Alg: alg, CipherKey: make([]byte, alg.CipherKeyLen()), AuthKey: make([]byte, alg.Auth.KeyLen())}
	for i := range p.CipherKey {
		p.CipherKey[i] = byte(i * 3)
	}
	for i := range p.AuthKey {
		p.AuthKey[i] = byte(i * 5)
	}
	return p
}

// TestRoundTripLayouts: for every claimed algorithm and every primitives
// variant, encrypt with the ICV apart and adjacent, check both give the
// same bytes, and decrypt back (both layouts), across sizes.
func TestRoundTripLayouts(t *testing.T) {
	for vname, prims := range variants() {
		p := cpuprov.New(crypto.ProviderInfo{Name: vname}, prims)
		for _, c := range p.Capabilities() {
			alg := c.Alg
			t.Run(vname+"/"+alg.String(), func(t *testing.T) {
				col := &collect{}
				s, err := p.NewSession(keys(alg), col.done)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { s.Close(testwait.Context(t)) }()
				for _, size := range []int{0, 16, 48, 1408, 4096} {
					iv := make([]byte, alg.IVLen())
					for i := range iv {
						iv[i] = byte(size + i)
					}
					aad := []byte{1, 2, 3, 4, 5, 6, 7, byte(size)}
					pt := make([]byte, size)
					for i := range pt {
						pt[i] = byte(i * 7)
					}
					adj := append(slices.Clone(pt), make([]byte, alg.ICVLen())...)
					apart := slices.Clone(pt)
					apartICV := make([]byte, alg.ICVLen())
					r1 := &crypto.Request{Dir: crypto.Encrypt, Data: adj[:size], ICV: adj[size:], AAD: aad, IV: iv, AuthTrailer: []byte{9}}
					r2 := &crypto.Request{Dir: crypto.Encrypt, Data: apart, ICV: apartICV, AAD: aad, IV: iv, AuthTrailer: []byte{9}}
					if n := s.Submit([]*crypto.Request{r1, r2}); n != 2 {
						t.Fatalf("accepted %d", n)
					}
					if r1.Status != crypto.StatusOK || r2.Status != crypto.StatusOK {
						t.Fatalf("status %v %v: %v %v", r1.Status, r2.Status, r1.Err, r2.Err)
					}
					if !bytes.Equal(r1.Data, r2.Data) || !bytes.Equal(r1.ICV, r2.ICV) {
						t.Fatalf("size %d: adjacent and separate layouts differ", size)
					}
					if size > 0 && alg.Cipher != crypto.CipherNull && bytes.Equal(r1.Data, pt) {
						t.Fatalf("size %d: not encrypted", size)
					}
					r1.Dir, r2.Dir = crypto.Decrypt, crypto.Decrypt
					s.Submit([]*crypto.Request{r1, r2})
					if r1.Status != crypto.StatusOK || r2.Status != crypto.StatusOK || !bytes.Equal(r1.Data, pt) || !bytes.Equal(r2.Data, pt) {
						t.Fatalf("size %d: decrypt %v %v", size, r1.Status, r2.Status)
					}
					// A different trailer (ESN high bits) must not verify for
					// encrypt-then-MAC; AEADs do not use it.
					if !alg.IsAEAD() {
						s.Submit([]*crypto.Request{{Dir: crypto.Encrypt, Data: r1.Data, ICV: r1.ICV, AAD: aad, IV: iv, AuthTrailer: []byte{9}}})
						bad := &crypto.Request{Dir: crypto.Decrypt, Data: r1.Data, ICV: r1.ICV, AAD: aad, IV: iv, AuthTrailer: []byte{8}}
						s.Submit([]*crypto.Request{bad})
						if bad.Status != crypto.StatusAuthFailed {
							t.Fatalf("wrong trailer: %v", bad.Status)
						}
					}
				}
			})
		}
	}
}

func TestCapabilitiesFollowPrimitives(t *testing.T) {
	p := cpuprov.New(crypto.ProviderInfo{Name: "x"}, cpuprov.Primitives{NewAES: aes.NewCipher})
	for _, c := range p.Capabilities() {
		if c.Alg.IsAEAD() {
			t.Fatalf("claims %v without an AEAD constructor", c.Alg)
		}
	}
	if _, err := p.NewSession(keys(crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}), func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrUnsupported) {
		t.Fatalf("unclaimed algorithm: %v", err)
	}
	bad := keys(crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 128, Auth: crypto.AuthHMACSHA1_96})
	bad.AuthKey = bad.AuthKey[:5]
	if _, err := p.NewSession(bad, func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrKeySize) {
		t.Fatalf("short auth key: %v", err)
	}
}

func TestCloseStopsSubmit(t *testing.T) {
	p := cpuprov.New(crypto.ProviderInfo{Name: "x"}, std)
	alg := crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}
	s, err := p.NewSession(keys(alg), func([]*crypto.Request) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	r := &crypto.Request{Data: make([]byte, 16), ICV: make([]byte, 16), IV: make([]byte, 8)}
	if n := s.Submit([]*crypto.Request{r}); n != 0 || r.Status != crypto.StatusPending {
		t.Fatalf("Submit after Close: %d, %v", n, r.Status)
	}
}

// TestConcurrentSubmit: many goroutines share a session (race detector).
func TestConcurrentSubmit(t *testing.T) {
	p := cpuprov.New(crypto.ProviderInfo{Name: "x"}, std)
	alg := crypto.Algorithm{Cipher: crypto.CipherAESCBC, KeyBits: 256, Auth: crypto.AuthHMACSHA256_128}
	col := &collect{}
	s, err := p.NewSession(keys(alg), col.done)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				r := &crypto.Request{Dir: crypto.Encrypt, Data: make([]byte, 64), ICV: make([]byte, 16), IV: make([]byte, 16), AAD: []byte{byte(g), byte(i)}}
				s.Submit([]*crypto.Request{r})
			}
		}()
	}
	testwait.Wait(t, testwait.Timeout, "submitters done", &wg)
	s.Close(testwait.Context(t))
	if len(col.got) != 800 {
		t.Fatalf("completed %d", len(col.got))
	}
	for _, r := range col.got {
		if r.Status != crypto.StatusOK {
			t.Fatalf("status %v", r.Status)
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	p := cpuprov.New(crypto.ProviderInfo{Name: "x"}, std)
	for _, c := range p.Capabilities() {
		alg := c.Alg
		s, err := p.NewSession(keys(alg), func([]*crypto.Request) {})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1424+alg.ICVLen())
		sep := make([]byte, alg.ICVLen())
		rs := []*crypto.Request{
			{Dir: crypto.Encrypt, Data: buf[:1424], ICV: buf[1424:], IV: make([]byte, alg.IVLen()), AAD: make([]byte, 8)},
			{Dir: crypto.Encrypt, Data: make([]byte, 1424), ICV: sep, IV: make([]byte, alg.IVLen()), AAD: make([]byte, 8)},
		}
		s.Submit(rs) // grow scratch once
		if a := testing.AllocsPerRun(50, func() {
			rs[0].Dir, rs[1].Dir = crypto.Encrypt, crypto.Encrypt
			s.Submit(rs)
			rs[0].Dir, rs[1].Dir = crypto.Decrypt, crypto.Decrypt
			s.Submit(rs)
		}); a != 0 {
			t.Errorf("%v: %.1f allocations per encrypt+decrypt", alg, a)
		}
		s.Close(testwait.Context(t))
	}
}

// FuzzDecrypt feeds attacker-controlled packets (any lengths, any bytes)
// to every algorithm's decrypt: it must never panic, must reject malformed
// lengths with ErrInvalidRequest, and must never accept a random ICV.
func FuzzDecrypt(f *testing.F) {
	f.Add(uint8(0), make([]byte, 32), uint8(16), uint8(8), []byte("aad"))
	f.Add(uint8(3), make([]byte, 15), uint8(12), uint8(16), []byte{})
	f.Add(uint8(17), []byte("hello world, this is not a packet"), uint8(16), uint8(8), []byte{1, 2})
	p := cpuprov.New(crypto.ProviderInfo{Name: "fuzz"}, std)
	caps := p.Capabilities()
	f.Fuzz(func(t *testing.T, which uint8, data []byte, icvLen, ivLen uint8, aad []byte) {
		alg := caps[int(which)%len(caps)].Alg
		s, err := p.NewSession(keys(alg), func([]*crypto.Request) {})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { s.Close(testwait.Context(t)) }()
		icv := make([]byte, int(icvLen)%40)
		copy(icv, data)
		r := &crypto.Request{Dir: crypto.Decrypt, Data: slices.Clone(data), ICV: icv, IV: make([]byte, int(ivLen)%20), AAD: aad}
		if s.Submit([]*crypto.Request{r}) != 1 {
			t.Fatal("not accepted")
		}
		valid := len(r.ICV) == alg.ICVLen() && len(r.IV) == alg.IVLen() && (alg.Cipher != crypto.CipherAESCBC || len(data)%16 == 0)
		switch {
		case !valid && (r.Status != crypto.StatusError || !errors.Is(r.Err, crypto.ErrInvalidRequest)):
			t.Fatalf("malformed request: %v %v", r.Status, r.Err)
		case valid && r.Status == crypto.StatusOK:
			t.Fatalf("%v accepted a forged packet", alg)
		case valid && r.Status != crypto.StatusAuthFailed:
			t.Fatalf("valid-shape request: %v %v", r.Status, r.Err)
		}
	})
}

// TestNoNull: with NoNull a provider bringing only an AEAD claims that
// AEAD and no NULL+HMAC transform.
func TestNoNull(t *testing.T) {
	p := cpuprov.New(crypto.ProviderInfo{Name: "gcm-only"}, cpuprov.Primitives{NewGCM: newGCM, NoNull: true})
	var got []crypto.Algorithm
	for _, c := range p.Capabilities() {
		got = append(got, c.Alg)
	}
	want := []crypto.Algorithm{
		{Cipher: crypto.CipherAESGCM, KeyBits: 128},
		{Cipher: crypto.CipherAESGCM, KeyBits: 192},
		{Cipher: crypto.CipherAESGCM, KeyBits: 256},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("capabilities %v, want %v", got, want)
	}
	if _, err := p.NewSession(keys(crypto.Algorithm{Cipher: crypto.CipherNull, Auth: crypto.AuthHMACSHA256_128}), func([]*crypto.Request) {}); !errors.Is(err, crypto.ErrUnsupported) {
		t.Fatalf("NULL session: %v, want ErrUnsupported", err)
	}
}
