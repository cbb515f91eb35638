// Package memscan finds secrets left in a process's own memory, for tests
// that check key material is wiped: Count scans every writable mapping
// through /proc/self/mem for a needle kept masked (Mask), so that the
// needle itself is not a copy of the secret.
package memscan

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// Mask returns secret XOR mask (a new slice) and clears secret.
func Mask(secret []byte, mask byte) []byte {
	out := make([]byte, len(secret))
	for i, b := range secret {
		out[i] = b ^ mask
	}
	clear(secret)
	return out
}

// Count counts the places in the process's writable memory (heap,
// stacks, anonymous mappings, data segments) that hold the bytes of
// masked XOR mask. It reads /proc/self/mem into a buffer mapped outside
// the Go heap (skipped by the scan) and builds the needle byte by byte in
// registers, never in memory.
func Count(t testing.TB, masked []byte, mask byte) (hits int) {
	t.Helper()
	const chunk = 1 << 20
	buf, err := syscall.Mmap(-1, 0, chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	self := uintptr(unsafe.Pointer(&buf[0]))
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	first := masked[0] ^ mask
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || !strings.HasPrefix(f[1], "rw") || (len(f) > 5 && strings.HasPrefix(f[5], "[v")) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || uintptr(start) == self {
			continue
		}
		for off := start; off < end; {
			n := min(uint64(chunk), end-off)
			got, err := mem.ReadAt(buf[:n], int64(off))
			if got == 0 && err != nil {
				break // unreadable (guard pages)
			}
			b := buf[:got]
			for i := 0; ; {
				j := bytes.IndexByte(b[i:], first)
				if j < 0 {
					break
				}
				i += j
				if i+len(masked) > len(b) {
					break
				}
				match := true
				for k := 1; k < len(masked); k++ {
					if b[i+k] != masked[k]^mask {
						match = false
						break
					}
				}
				if match {
					hits++
				}
				i++
			}
			if uint64(got) < n {
				break
			}
			// Overlap the chunks by the needle's length.
			off += n - uint64(len(masked)) + 1
			if n < uint64(chunk) {
				break
			}
		}
	}
	clear(buf)
	return hits
}
