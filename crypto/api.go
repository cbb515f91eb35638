// Package crypto is Keel's crypto provider framework.
//
// Providers (aesni, cryptosoft, glxsb, virtio) implement Provider and are
// admitted by a Framework only after they pass known-answer self-tests and a
// throughput calibration. Callers never hold a provider Session directly:
// they hold a *Binding, whose current session the framework swaps live when
// a faster provider arrives, when the bound one unloads, or when it faults.
//
// This file holds the contract shared by the framework, the providers and
// the IPsec engine. It is deliberately small.
//
// Design notes (framework.go, binding.go):
//
//   - Admission: Register runs the embedded known-answer vectors (kat/)
//     through the provider's own sessions, then measures its throughput
//     at 64, 512 and 1420 bytes. Selection compares the 1420-byte figure;
//     throughputs within 2% are a tie, broken by the static priority.
//   - Data path: a Binding keeps a ring of its accepted requests in
//     submission order. Submit takes only the binding's submit lock;
//     completions mark requests done under the binding's completion lock,
//     and whichever goroutine finds the ring's head done delivers the
//     completed prefix (one deliverer at a time, so CompletionFunc calls
//     are serialized and ordered). Nothing on this path is shared between
//     bindings, and nothing allocates.
//   - Rebind: a new session is created off the data path, then swapped in
//     under the submit lock (tens of nanoseconds); the old session stops
//     receiving requests, drains, and is closed in the background.
//     Requests completed on either session are delivered in one order.
//   - Faults: a StatusError completion or a request older than
//     RequestTimeout degrades the provider and rebinds its bindings; the
//     failed requests are resubmitted with unchanged data to the current
//     session. A hung request is only retried after its provider released
//     it (completed it with StatusError, normally from Session.Close), so a
//     hung device can never write into a buffer the framework handed to
//     someone else; if Close gives up (CloseTimeout) the request is
//     delivered with ErrAbandoned and its buffers must not be reused, and
//     any later completion of it is ignored (BindingStatus.Stale).
package crypto

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// Cipher names the confidentiality transform of an Algorithm.
type Cipher uint8

// Ciphers.
const (
	CipherNull             Cipher = iota // ESP NULL encryption (RFC 2410)
	CipherAESCBC                         // AES-CBC, 16-byte IV (RFC 3602)
	CipherAESGCM                         // AES-GCM, 16-byte ICV, key||salt(4) (RFC 4106)
	CipherChaCha20Poly1305               // ChaCha20-Poly1305, key||salt(4) (RFC 7634)
)

// Auth names the integrity transform of a non-AEAD Algorithm.
type Auth uint8

// Auths. The suffix is the truncated ICV length in bits (RFC 2404, RFC 4868).
const (
	AuthNone           Auth = iota
	AuthHMACSHA1_96         // 20-byte key, 12-byte ICV
	AuthHMACSHA256_128      // 32-byte key, 16-byte ICV
	AuthHMACSHA384_192      // 48-byte key, 24-byte ICV
	AuthHMACSHA512_256      // 64-byte key, 32-byte ICV
)

// Algorithm is a complete ESP transform: a cipher with its key size and,
// unless the cipher is an AEAD, an integrity transform applied
// encrypt-then-MAC. Algorithm is comparable and may be used as a map key.
type Algorithm struct {
	Cipher  Cipher
	KeyBits int // cipher key bits, excluding any salt; 0 for CipherNull
	Auth    Auth
}

// Direction says which way a Request is processed.
type Direction uint8

// Directions.
const (
	Encrypt Direction = iota // seal: Data becomes ciphertext, ICV is written
	Decrypt                  // open: ICV is verified, Data becomes plaintext
)

// Status is the outcome of a Request.
type Status uint8

// Statuses.
const (
	StatusPending    Status = iota // not yet completed
	StatusOK                       // processed
	StatusAuthFailed               // ICV mismatch on Decrypt; Data is unspecified
	StatusError                    // the provider failed; see Request.Err
)

// Request is one crypto operation, processed in place.
//
// Layout for every algorithm:
//   - Encrypt with an AEAD: Data is sealed in place, the tag is written to
//     ICV, AAD is authenticated, and the nonce is salt || IV.
//   - Encrypt with encrypt-then-MAC: Data is encrypted in place with IV (for
//     CBC), then ICV = trunc(HMAC(AAD || IV || Data || AuthTrailer)).
//     For ESP: AAD = SPI||seq, IV = the packet's IV, AuthTrailer = ESN high
//     bits (empty without ESN).
//   - Decrypt reverses this, checking ICV before touching Data.
//
// The caller supplies the IV/nonce: providers never invent one. ICV must
// have exactly Algorithm.ICVLen() bytes. Data, ICV, AAD, IV and AuthTrailer
// may all be subslices of one packet buffer; ICV typically directly follows
// Data.
//
// Ownership: from Submit until the completion callback the request and the
// memory it points to belong to the framework/provider. A provider must not
// touch a request after completing it, nor any request of a session after
// that session's Close returns. A request completed with StatusError must
// leave Data and ICV unmodified, so that the framework can retry it on
// another provider (with the same data: a (key, nonce) pair never sees two
// different plaintexts). A device that may still write to memory after
// its driver gave a request up (a hung accelerator's late DMA) must only
// ever have been handed a bounce copy, never the caller's buffers.
type Request struct {
	Dir         Direction
	Data        []byte
	ICV         []byte
	AAD         []byte
	IV          []byte
	AuthTrailer []byte

	// Status and Err are set by the provider before completion.
	Status Status
	Err    error

	// User is opaque caller state (e.g. the packet that owns this request).
	// Storing a pointer here does not allocate.
	User any

	// fw is framework-private bookkeeping (sequence number within a binding,
	// submission time, retry count). Providers must not touch it.
	fw requestState
}

// Reset clears a request for reuse from a pool. It must not be called while
// the request is submitted.
func (r *Request) Reset() { *r = Request{} }

var requestPool = sync.Pool{New: func() any { return new(Request) }}

// GetRequest returns a zeroed Request from a process-wide pool. It does not
// allocate in steady state. Safe for concurrent use.
func GetRequest() *Request { return requestPool.Get().(*Request) }

// PutRequest resets r and returns it to the pool. The caller must own r (it
// has been delivered to a CompletionFunc, or was never submitted) and must
// not use it afterwards. A request whose Err wraps ErrAbandoned must not be
// returned to the pool.
func PutRequest(r *Request) {
	r.Reset()
	requestPool.Put(r)
}

// CompletionFunc receives completed requests. A provider calls it from any
// goroutine, with each submitted request exactly once, in any order and in
// batches of any size; the slice is only valid during the call, and the
// function must not modify it (it may be the submitter's own slice). It
// must not block for long.
type CompletionFunc func(done []*Request)

// Kind classifies a provider.
type Kind uint8

// Kinds.
const (
	KindSoftware    Kind = iota // portable software (cryptosoft)
	KindAccelerated             // CPU-accelerated software (aesni)
	KindHardware                // a device (glxsb, virtio), possibly emulated
)

// Capability is one algorithm a provider supports, with the largest Data it
// accepts in one request (0 means unlimited).
type Capability struct {
	Alg     Algorithm
	MaxData int
}

// ProviderInfo is static description shown in status.
type ProviderInfo struct {
	Name     string
	Kind     Kind
	Priority int  // static hint: breaks ties in measured throughput only
	Emulated bool // true for emulated devices
	// Params describes the device model (e.g. "throughput_mbps": "45").
	Params map[string]string
}

// SessionParams are the keys of a session. Keys are copied by NewSession;
// the caller may zero its copy afterwards.
type SessionParams struct {
	Alg Algorithm
	// CipherKey is the cipher key; for AES-GCM and ChaCha20-Poly1305 it is
	// key || 4-byte salt.
	CipherKey []byte
	// AuthKey is the HMAC key (empty for AEADs).
	AuthKey []byte
}

// Provider is a crypto driver. All methods are safe for concurrent use.
type Provider interface {
	Info() ProviderInfo
	Capabilities() []Capability
	// NewSession creates a keyed session whose completions go to done.
	NewSession(p SessionParams, done CompletionFunc) (Session, error)
}

// Session is a keyed context on one provider. Submit and Close are safe
// for concurrent use.
type Session interface {
	// Submit queues a prefix of reqs and returns how many it accepted.
	// Accepting fewer than len(reqs) is backpressure (a full queue); Submit
	// never blocks waiting for room. Accepted requests complete
	// asynchronously through the session's CompletionFunc, possibly before
	// Submit returns.
	Submit(reqs []*Request) int
	// Close waits until every accepted request has completed (or, for a
	// dead or hung device, has been completed with StatusError), zeroes the
	// keys and releases the session. Submit after Close accepts nothing.
	Close(ctx context.Context) error
}

// Sentinel errors. Check them with errors.Is.
var (
	ErrUnsupported = errors.New("crypto: algorithm not supported")
	ErrKeySize     = errors.New("crypto: invalid key size")
	ErrNoProvider  = errors.New("crypto: no provider for algorithm")
	ErrClosed      = errors.New("crypto: closed")
	ErrDeviceGone  = errors.New("crypto: device gone")
	ErrTimeout     = errors.New("crypto: request timed out")
	ErrQuarantined = errors.New("crypto: provider quarantined")
	// ErrInvalidRequest marks a request that is malformed for its session
	// (wrong IV, ICV or block length). Providers complete such a request
	// with StatusError and an Err wrapping ErrInvalidRequest; the framework
	// then delivers it as failed instead of treating it as a provider fault.
	ErrInvalidRequest = errors.New("crypto: invalid request")
	// ErrAbandoned marks a request that a broken provider never released:
	// its session's Close gave up waiting for it. The provider may still
	// write into the request's buffers later, so the owner must not reuse
	// (recycle) Data, ICV or the Request itself.
	ErrAbandoned = errors.New("crypto: request abandoned by a hung provider")
)

// IsAEAD reports whether the cipher authenticates by itself.
func (a Algorithm) IsAEAD() bool {
	return a.Cipher == CipherAESGCM || a.Cipher == CipherChaCha20Poly1305
}

// IVLen is the per-packet IV length carried in ESP.
func (a Algorithm) IVLen() int {
	switch a.Cipher {
	case CipherAESCBC:
		return 16
	case CipherAESGCM, CipherChaCha20Poly1305:
		return 8
	}
	return 0
}

// SaltLen is the length of the salt appended to the cipher key.
func (a Algorithm) SaltLen() int {
	if a.IsAEAD() {
		return 4
	}
	return 0
}

// BlockSize is the ESP padding alignment of the cipher (at least 4).
func (a Algorithm) BlockSize() int {
	if a.Cipher == CipherAESCBC {
		return 16
	}
	return 4
}

// ICVLen is the length of the integrity check value.
func (a Algorithm) ICVLen() int {
	if a.IsAEAD() {
		return 16
	}
	return a.Auth.ICVLen()
}

// ICVLen is the truncated HMAC length.
func (x Auth) ICVLen() int {
	switch x {
	case AuthHMACSHA1_96:
		return 12
	case AuthHMACSHA256_128:
		return 16
	case AuthHMACSHA384_192:
		return 24
	case AuthHMACSHA512_256:
		return 32
	}
	return 0
}

// Hash returns the constructor of the hash under the HMAC, or nil for
// AuthNone and unknown values.
func (x Auth) Hash() func() hash.Hash {
	switch x {
	case AuthHMACSHA1_96:
		return sha1.New
	case AuthHMACSHA256_128:
		return sha256.New
	case AuthHMACSHA384_192:
		return sha512.New384
	case AuthHMACSHA512_256:
		return sha512.New
	}
	return nil
}

// KeyLen is the HMAC key length used by ESP (RFC 2404, RFC 4868).
func (x Auth) KeyLen() int {
	switch x {
	case AuthHMACSHA1_96:
		return 20
	case AuthHMACSHA256_128:
		return 32
	case AuthHMACSHA384_192:
		return 48
	case AuthHMACSHA512_256:
		return 64
	}
	return 0
}

// CipherKeyLen is the expected len(SessionParams.CipherKey), salt included.
func (a Algorithm) CipherKeyLen() int { return a.KeyBits/8 + a.SaltLen() }

// Validate checks that the algorithm is a well-formed ESP transform.
func (a Algorithm) Validate() error {
	switch a.Cipher {
	case CipherNull:
		if a.KeyBits != 0 || a.Auth == AuthNone {
			return fmt.Errorf("%w: %v", ErrUnsupported, a)
		}
	case CipherAESCBC:
		if (a.KeyBits != 128 && a.KeyBits != 192 && a.KeyBits != 256) || a.Auth == AuthNone {
			return fmt.Errorf("%w: %v", ErrUnsupported, a)
		}
	case CipherAESGCM:
		// RFC 4106 section 8.1: 128, 192 and 256-bit keys.
		if (a.KeyBits != 128 && a.KeyBits != 192 && a.KeyBits != 256) || a.Auth != AuthNone {
			return fmt.Errorf("%w: %v", ErrUnsupported, a)
		}
	case CipherChaCha20Poly1305:
		if a.KeyBits != 256 || a.Auth != AuthNone {
			return fmt.Errorf("%w: %v", ErrUnsupported, a)
		}
	default:
		return fmt.Errorf("%w: %v", ErrUnsupported, a)
	}
	return nil
}

// CheckParams validates key lengths for p.Alg. The error never contains key
// material.
func (p SessionParams) CheckParams() error {
	if err := p.Alg.Validate(); err != nil {
		return err
	}
	if len(p.CipherKey) != p.Alg.CipherKeyLen() {
		return fmt.Errorf("%w: %v cipher key is %d bytes, want %d", ErrKeySize, p.Alg, len(p.CipherKey), p.Alg.CipherKeyLen())
	}
	if len(p.AuthKey) != p.Alg.Auth.KeyLen() {
		return fmt.Errorf("%w: %v auth key is %d bytes, want %d", ErrKeySize, p.Alg, len(p.AuthKey), p.Alg.Auth.KeyLen())
	}
	return nil
}

// String returns the setkey(8) name of the cipher, e.g. "aes-gcm-16".
func (c Cipher) String() string {
	switch c {
	case CipherNull:
		return "null"
	case CipherAESCBC:
		return "aes-cbc"
	case CipherAESGCM:
		return "aes-gcm-16"
	case CipherChaCha20Poly1305:
		return "chacha20-poly1305"
	}
	return fmt.Sprintf("cipher(%d)", uint8(c))
}

// String returns the name of the integrity transform, e.g. "hmac-sha1-96".
func (x Auth) String() string {
	switch x {
	case AuthNone:
		return "none"
	case AuthHMACSHA1_96:
		return "hmac-sha1-96"
	case AuthHMACSHA256_128:
		return "hmac-sha2-256-128"
	case AuthHMACSHA384_192:
		return "hmac-sha2-384-192"
	case AuthHMACSHA512_256:
		return "hmac-sha2-512-256"
	}
	return fmt.Sprintf("auth(%d)", uint8(x))
}

// String renders e.g. "aes-gcm-16-128" or "aes-cbc-256+hmac-sha1-96".
func (a Algorithm) String() string {
	s := a.Cipher.String()
	if a.KeyBits != 0 && a.Cipher != CipherChaCha20Poly1305 {
		s = fmt.Sprintf("%s-%d", s, a.KeyBits)
	}
	if a.Auth != AuthNone {
		s += "+" + a.Auth.String()
	}
	return s
}

// String returns "software", "accelerated" or "hardware".
func (k Kind) String() string {
	switch k {
	case KindSoftware:
		return "software"
	case KindAccelerated:
		return "accelerated"
	case KindHardware:
		return "hardware"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// String returns "pending", "ok", "auth-failed" or "error".
func (s Status) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusOK:
		return "ok"
	case StatusAuthFailed:
		return "auth-failed"
	case StatusError:
		return "error"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// String returns "encrypt" or "decrypt".
func (d Direction) String() string {
	if d == Encrypt {
		return "encrypt"
	}
	return "decrypt"
}

// frameworkKey carries a *Framework through a context.Context, so that a
// provider module's Load hook can register with the framework of the
// process that loads it.
type frameworkKey struct{}

// NewContext returns ctx carrying fw. Provider modules find their framework
// with FromContext in their Load and Unload hooks.
func NewContext(ctx context.Context, fw *Framework) context.Context {
	return context.WithValue(ctx, frameworkKey{}, fw)
}

// FromContext returns the framework carried by ctx, if any.
func FromContext(ctx context.Context) (*Framework, bool) {
	fw, ok := ctx.Value(frameworkKey{}).(*Framework)
	return fw, ok && fw != nil
}

// String describes the parameters without key material: only the algorithm
// and the key lengths are shown.
func (p SessionParams) String() string {
	return fmt.Sprintf("%v (cipher key %d bytes, auth key %d bytes: redacted)", p.Alg, len(p.CipherKey), len(p.AuthKey))
}

// GoString is String, so that %#v does not print the keys either.
func (p SessionParams) GoString() string { return "crypto.SessionParams{" + p.String() + "}" }

// Format prints String for every verb, so no fmt verb reveals the keys.
func (p SessionParams) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, p.GoString())
		return
	}
	fmt.Fprint(f, p.String())
}

// MarshalText encodes the redacted String, which also covers encoding/json
// and the slog handlers.
func (p SessionParams) MarshalText() ([]byte, error) { return []byte(p.String()), nil }
