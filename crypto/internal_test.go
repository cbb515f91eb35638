package crypto

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
)

// syncProv is a minimal synchronous provider (NULL+HMAC-SHA1 only) used to
// test framework internals without importing provider packages.
type syncProv struct{ name string }

func (p syncProv) Info() ProviderInfo { return ProviderInfo{Name: p.name, Kind: KindSoftware} }
func (p syncProv) Capabilities() []Capability {
	return []Capability{{Alg: Algorithm{Cipher: CipherNull, Auth: AuthHMACSHA1_96}}}
}
func (p syncProv) NewSession(sp SessionParams, done CompletionFunc) (Session, error) {
	return &syncSess{done: done}, nil
}

type syncSess struct{ done CompletionFunc }

func (s *syncSess) Submit(reqs []*Request) int {
	for _, r := range reqs {
		r.Status = StatusOK
	}
	s.done(reqs)
	return len(reqs)
}
func (s *syncSess) Close(context.Context) error { return nil }

// TestNoControlLockOnDataPath holds the framework's control mutex (the one
// Register, Deregister and faults take) and shows that Bind, Submit,
// delivery and Close all proceed without it.
func TestNoControlLockOnDataPath(t *testing.T) {
	f := New(Options{SkipSelfTests: true, CalibrationBudget: time.Millisecond, Logger: discard()})
	defer func() { f.Close(testwait.Context(t)) }()
	if err := f.Register(context.Background(), syncProv{"p"}); err != nil {
		t.Fatal(err)
	}
	alg := Algorithm{Cipher: CipherNull, Auth: AuthHMACSHA1_96}
	f.mu.Lock()
	done := make(chan error, 1)
	go func() {
		delivered := 0
		b, err := f.Bind(SessionParams{Alg: alg, AuthKey: make([]byte, 20)}, func(rs []*Request) { delivered += len(rs) })
		if err != nil {
			done <- err
			return
		}
		r := &Request{Data: make([]byte, 8), ICV: make([]byte, 12)}
		if b.Submit([]*Request{r}) != 1 || delivered != 1 {
			done <- context.DeadlineExceeded
			return
		}
		done <- b.Close(testwait.Context(t))
	}()
	select {
	case err := <-done:
		f.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		f.mu.Unlock()
		t.Fatal("Bind/Submit/Close blocked on the framework's control lock")
	}
}

func TestCloseZeroesKeys(t *testing.T) {
	f := New(Options{SkipSelfTests: true, CalibrationBudget: time.Millisecond, Logger: discard()})
	defer func() { f.Close(testwait.Context(t)) }()
	if err := f.Register(context.Background(), syncProv{"p"}); err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdefghij")
	b, err := f.Bind(SessionParams{Alg: Algorithm{Cipher: CipherNull, Auth: AuthHMACSHA1_96}, AuthKey: key}, func([]*Request) {})
	if err != nil {
		t.Fatal(err)
	}
	internal := b.keys.AuthKey
	if string(internal) != string(key) || &internal[0] == &key[0] {
		t.Fatal("binding does not hold a private copy of the key")
	}
	if err := b.Close(testwait.Context(t)); err != nil {
		t.Fatal(err)
	}
	for _, c := range internal {
		if c != 0 {
			t.Fatal("key not zeroed after Close")
		}
	}
	if string(key) != "0123456789abcdefghij" {
		t.Fatal("caller's key modified")
	}
}

func TestESPHMACKey(t *testing.T) {
	tests := []struct {
		name   string
		hf     func() hash.Hash
		keyLen int
		espLen int
		ok     bool
	}{
		{"short sha1 padded", sha1.New, 4, 20, true},
		{"exact sha1", sha1.New, 20, 20, true},
		{"25 bytes cannot be sha1-96", sha1.New, 25, 20, false},
		{"131 bytes hashed for sha256", sha256.New, 131, 32, true},
		{"131 bytes hashed for sha384", sha512.New384, 131, 48, true},
		{"80 bytes hashed for sha1", sha1.New, 80, 20, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := make([]byte, tc.keyLen)
			for i := range key {
				key[i] = byte(i + 1)
			}
			out, ok := espHMACKey(key, tc.hf, tc.espLen)
			if ok != tc.ok {
				t.Fatalf("ok = %v", ok)
			}
			if ok && len(out) != tc.espLen {
				t.Fatalf("len %d", len(out))
			}
		})
	}
}
