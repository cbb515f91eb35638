package alias

import "testing"

func TestOverlap(t *testing.T) {
	buf := make([]byte, 32)
	tests := []struct {
		name         string
		x, y         []byte
		any, inexact bool
	}{
		{"same", buf[:16], buf[:16], true, false},
		{"same start, different lengths", buf[:16], buf[:8], true, false},
		{"shifted", buf[1:17], buf[:16], true, true},
		{"adjacent", buf[:16], buf[16:], false, false},
		{"empty", buf[:0], buf[:16], false, false},
		{"disjoint", buf[:8], make([]byte, 8), false, false},
	}
	for _, tt := range tests {
		if got := AnyOverlap(tt.x, tt.y); got != tt.any {
			t.Errorf("%s: AnyOverlap = %v", tt.name, got)
		}
		if got := InexactOverlap(tt.x, tt.y); got != tt.inexact {
			t.Errorf("%s: InexactOverlap = %v", tt.name, got)
		}
	}
}

func TestSliceForAppend(t *testing.T) {
	in := make([]byte, 3, 10)
	head, tail := SliceForAppend(in, 5)
	if len(head) != 8 || len(tail) != 5 || &head[0] != &in[0] {
		t.Fatal("did not reuse capacity")
	}
	head, tail = SliceForAppend(in, 20)
	if len(head) != 23 || len(tail) != 20 || &head[0] == &in[0] {
		t.Fatal("did not grow")
	}
}
