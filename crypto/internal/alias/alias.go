// Package alias holds the buffer helpers shared by the AEADs of cryptosoft
// and vaes: append-style output allocation and the stdlib's overlap rule
// (output and input may overlap exactly or not at all), and AEADOutput,
// which combines them for Seal and Open.
package alias

import "unsafe"

// SliceForAppend extends in by n bytes, reusing its capacity when possible,
// and returns the whole slice and the n new bytes.
func SliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return
}

// AnyOverlap reports whether x and y share memory at any index.
func AnyOverlap(x, y []byte) bool {
	return len(x) > 0 && len(y) > 0 &&
		uintptr(unsafe.Pointer(&x[0])) <= uintptr(unsafe.Pointer(&y[len(y)-1])) &&
		uintptr(unsafe.Pointer(&y[0])) <= uintptr(unsafe.Pointer(&x[len(x)-1]))
}

// InexactOverlap reports whether x and y share memory at any
// non-corresponding index (which the AEADs reject, like the stdlib).
func InexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	return AnyOverlap(x, y)
}

// AEADOutput prepares the output of an AEAD's Seal or Open (cipher.AEAD
// contract): it extends dst by n bytes (len(in)+tag size for Seal,
// len(in) for Open) like SliceForAppend and returns the whole slice and
// the n new bytes, out. out may overlap in only exactly (in place: dst is
// in[:0]) and may not overlap aad at all; any other overlap panics, the
// message prefixed with pkg (the calling package's name). It allocates
// only when dst lacks capacity.
func AEADOutput(pkg string, dst []byte, n int, in, aad []byte) (ret, out []byte) {
	ret, out = SliceForAppend(dst, n)
	if InexactOverlap(out, in) {
		panic(pkg + ": invalid buffer overlap")
	}
	if AnyOverlap(out, aad) {
		panic(pkg + ": invalid buffer overlap of output and additional data")
	}
	return ret, out
}
