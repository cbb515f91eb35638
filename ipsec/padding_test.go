package ipsec

import "testing"

// TestDefaultPadding: defaultPadding agrees with a byte-by-byte check of
// RFC 4303's default padding for every pad length, with each padding
// byte (and the bytes before the padding) altered in turn.
func TestDefaultPadding(t *testing.T) {
	slow := func(buf []byte, end, pad int) bool {
		for i := 0; i < pad; i++ {
			if buf[end-pad+i] != byte(i+1) {
				return false
			}
		}
		return true
	}
	for pad := 0; pad <= 255; pad++ {
		for _, lead := range []int{8, 16, 40} {
			buf := make([]byte, lead+pad+2)
			end := lead + pad
			for i := range lead {
				buf[i] = 0xa5 // not padding: must not matter
			}
			for i := 0; i < pad; i++ {
				buf[lead+i] = byte(i + 1)
			}
			if !defaultPadding(buf, end, pad) {
				t.Fatalf("pad %d lead %d: valid padding rejected", pad, lead)
			}
			for j := end - min(pad+8, end); j < end; j++ {
				old := buf[j]
				buf[j] ^= 0x40
				if got, want := defaultPadding(buf, end, pad), slow(buf, end, pad); got != want {
					t.Fatalf("pad %d lead %d: byte %d altered: got %v, want %v", pad, lead, j, got, want)
				}
				buf[j] = old
			}
		}
	}
}
