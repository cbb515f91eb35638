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

func TestAEADOutput(t *testing.T) {
	buf := make([]byte, 64)
	const tag = 16
	tests := []struct {
		name      string
		dst, in   []byte
		aad       []byte
		n         int
		wantPanic string
	}{
		{"seal in place", buf[:0], buf[:32], nil, 32 + tag, ""},
		{"open in place", buf[:0], buf[:32], nil, 32 - tag, ""},
		{"disjoint", make([]byte, 0, 8), buf[:32], buf[32:40], 32 + tag, ""},
		{"append after prefix", buf[:8], buf[8:24], nil, 16 + tag, ""},
		{"shifted", buf[1:1], buf[:32], nil, 32 + tag, "pkg: invalid buffer overlap"},
		{"output over aad", buf[:0], make([]byte, 16), buf[8:16], 16 + tag, "pkg: invalid buffer overlap of output and additional data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			func() {
				defer func() {
					if r := recover(); r != nil {
						got = r.(string)
					}
				}()
				ret, out := AEADOutput("pkg", tt.dst, tt.n, tt.in, tt.aad)
				if len(ret) != len(tt.dst)+tt.n || len(out) != tt.n || &ret[len(tt.dst)] != &out[0] {
					t.Errorf("ret %d bytes, out %d bytes", len(ret), len(out))
				}
				if cap(tt.dst) >= len(tt.dst)+tt.n && &ret[0] != &tt.dst[:1][0] {
					t.Error("did not reuse dst's capacity")
				}
			}()
			if got != tt.wantPanic {
				t.Fatalf("panic %q, want %q", got, tt.wantPanic)
			}
		})
	}
	in := buf[:32]
	if a := testing.AllocsPerRun(100, func() { AEADOutput("pkg", in[:0], len(in)+tag, in, nil) }); a != 0 {
		t.Fatalf("%v allocations in place", a)
	}
}
