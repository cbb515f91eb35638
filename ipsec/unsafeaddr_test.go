package ipsec

import "unsafe"

// unsafeAddr is the address of b's first byte (b non-empty).
func unsafeAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
