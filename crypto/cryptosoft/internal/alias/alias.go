// Package alias holds the buffer helpers shared by cryptosoft's AEADs:
// append-style output allocation and the stdlib's overlap rule (output and
// input may overlap exactly or not at all).
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
