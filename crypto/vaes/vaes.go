// Package vaes is Keel's wide-vector AES-GCM crypto provider: AES-GCM-128
// and -256 (RFC 4106 ESP layout: key || salt(4), 8-byte IV, 16-byte ICV)
// in amd64 assembly with VAES and VPCLMULQDQ on 256-bit registers, run
// through cpuprov's ESP sessions. It claims nothing else.
//
// # Design
//
// Written here from the published algorithms (see gcm_amd64.s). Seal is
// one assembly call: E(K, J0), the ESP AAD, then CTR mode with sixteen
// counter blocks in flight in eight YMM registers (two AES blocks per
// register, one VAESENC per register and round), stitched with the GHASH
// of the previous 256 bytes of ciphertext; GHASH multiplies sixteen blocks
// by the precomputed powers H^16..H^1 with Karatsuba (three VPCLMULQDQ per
// register pair) and reduces the sum once (Gueron and Kounavis; Drucker,
// Gueron and Krasnov); the last 1-15 whole blocks, the partial block
// (masked, no read past the buffer) and the length block follow with
// lower powers. The key schedule is FIPS-197's, in Go, with SubWord
// computed by AESENCLAST.
//
// Open authenticates first: GHASH over the ciphertext (same 16-block
// aggregation), the tag compared in constant time (crypto/subtle), and
// only if it matches CTR decryption (eight blocks in flight) into dst;
// nothing is written to the destination of a forged packet. This costs a
// second pass over the data, which Seal avoids.
//
// Batches: cpuprov hands the AEAD one request at a time. One ESP packet
// already fills the pipeline from its first 256 bytes, so interleaving
// packets would only help packets shorter than that; at 64 bytes the
// fixed cost per call (E(K, J0) and the length block) dominates instead.
//
// Only the 256-bit (AVX2-encoded) variant exists: the development machine
// has VAES and VPCLMULQDQ but no AVX-512, and untested 512-bit code is not
// shipped.
//
// # Probe
//
// Like FreeBSD's aesni(4) probe, the package registers its module only when
// Supported reports the instructions; loading the module (kld_list, or
// kldload vaes) registers the provider with the framework of the load
// context, which admits it by self-test and measured throughput. On other
// CPUs and architectures the package builds and registers nothing.
//
// # Constant time
//
// Neither the assembly nor the Go around it branches on or indexes memory
// by key, H, plaintext, ciphertext, keystream or tag. Branches and loop
// counts depend only on lengths and the number of rounds; the only
// data-dependent decision, accept or reject, is taken after
// subtle.ConstantTimeCompare. AES rounds and SubWord run on the AES unit
// (no tables); H<<1 mod P uses an arithmetic-shift mask instead of a
// branch; the partial block is masked by a mask loaded at an offset given
// by its (public) length. How this was checked: by reading every branch
// and address in gcm_amd64.s and gcm_amd64.go (all are block counts,
// round counts, lengths or fixed offsets), and by BenchmarkTiming, a
// dudect-style comparison of Seal and Open time for all-zero against
// random keys and data, which reports Welch's t: |t| < 2 on this machine,
// while a deliberately planted branch on the first plaintext byte (one
// extra block of work) shows t ≈ 11.
package vaes

import (
	"golang.org/x/sys/cpu"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

// Name is the provider and module name.
const Name = "vaes"

// Priority is vaes's static priority hint, above aesni's: it breaks ties
// in measured throughput only.
const Priority = 110

// CPUID.(EAX=7,ECX=0):ECX feature bits (Intel SDM vol. 2A, CPUID).
const (
	cpuidVAES       = 1 << 9
	cpuidVPCLMULQDQ = 1 << 10
)

// Supported reports whether the CPU and OS run the 256-bit code: AVX2
// (which x/sys/cpu reports only when the OS saves the YMM state), AES-NI,
// PCLMULQDQ, and VAES and VPCLMULQDQ on YMM registers. x/sys/cpu reports
// the last two only together with AVX-512 (HasAVX512VAES,
// HasAVX512VPCLMULQDQ), so they are read from CPUID directly; their VEX.256
// forms need no AVX-512.
func Supported() bool {
	if !hasAsm || !cpu.X86.HasAVX2 || !cpu.X86.HasAES || !cpu.X86.HasPCLMULQDQ {
		return false
	}
	ecx := cpuid7ecx()
	return ecx&cpuidVAES != 0 && ecx&cpuidVPCLMULQDQ != 0
}

// New returns a vaes provider claiming AES-GCM-128 and -256. It returns
// crypto.ErrUnsupported if the CPU lacks the instructions (see
// Supported). Safe for concurrent use.
func New() (crypto.Provider, error) {
	if !Supported() {
		return nil, errNoCPU
	}
	return cpuprov.New(crypto.ProviderInfo{
		Name:     Name,
		Kind:     crypto.KindAccelerated,
		Priority: Priority,
		Params:   map[string]string{"isa": "amd64 vaes+vpclmulqdq ymm", "blocks_in_flight": "16"},
	}, cpuprov.Primitives{NewGCM: newGCM, NoNull: true}), nil
}
