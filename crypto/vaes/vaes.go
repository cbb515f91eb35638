package vaes

import "golang.org/x/sys/cpu"

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
