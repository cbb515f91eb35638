package vaes

// hasAsm: the assembly exists for this GOARCH.
const hasAsm = true

// Implemented in gcm_amd64.s.

// subWord returns FIPS-197 SubWord of x (bytes in little-endian order).
//
//go:noescape
func subWord(x uint32) uint32

// ctrBlocks sets dst[i] = src[i] XOR E(K, ctr+i) for n whole blocks and
// advances ctr by n (inc32). rk points at rounds+1 lane-doubled round keys.
//
//go:noescape
func ctrBlocks(rk *byte, rounds int, ctr *[16]byte, dst, src *byte, n int)

// ghashInit fills pow with H^16..H^1 in the form the GHASH code expects,
// then their Karatsuba table (lo XOR hi of each).
//
//go:noescape
func ghashInit(pow *[512]byte, h *[16]byte)

// ghashBlocks absorbs n whole blocks at data into the GHASH state y.
//
//go:noescape
func ghashBlocks(pow *[512]byte, y *[16]byte, data *byte, n int)

// cpuid7ecx returns CPUID.(EAX=7,ECX=0):ECX.
func cpuid7ecx() uint32

// spinAdds runs 8n dependent additions (8n cycles), n > 0; the benchmarks time it
// to measure the clock.
func spinAdds(n int)

// gcmSeal is Seal's whole computation (see gcm_amd64.s) over n whole
// blocks at src, the state and tail in st.
//
//go:noescape
func gcmSeal(k *gcm, st *sealState, dst, src *byte, n, aadInline, tailLen int)
